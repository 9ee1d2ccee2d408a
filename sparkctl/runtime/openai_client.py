"""Talking to an OpenAI-compatible endpoint: streamed chat completions measured chunk by chunk
(`sparkctl bench`'s requests, and the throughput step's decode measurement after a restart).

Streaming is parsed by a real SSE parser (httpx-sse) over httpx; tokens are counted from the
server's usage (stream_options.include_usage), never from chunks, because one chunk can carry
several tokens when speculative decoding accepts drafts.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from sparkctl.errors import HostError, InputError


@dataclass
class Measured:
    """One request as the client saw it; times are time.perf_counter() seconds."""

    stream: int = 0
    sent: float = 0.0
    first_token: Optional[float] = None
    done: Optional[float] = None
    chunk_times: list[float] = field(default_factory=list)  # arrival of each chunk with generated text
    prompt_tokens: Optional[int] = None
    output_tokens: Optional[int] = None  # usage.completion_tokens
    finish_reason: Optional[str] = None
    error: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.done is not None and self.first_token is not None

    @property
    def ttft(self) -> Optional[float]:
        return None if self.first_token is None else self.first_token - self.sent

    @property
    def e2el(self) -> Optional[float]:
        return None if self.done is None else self.done - self.sent

    @property
    def itls(self) -> list[float]:
        """Gaps between chunks, as vllm bench serve's ITL (a chunk may hold several tokens)."""
        t = self.chunk_times
        return [b - a for a, b in zip(t, t[1:])]

    @property
    def tpot(self) -> Optional[float]:
        """Time per output token after the first: (e2el - ttft) / (tokens - 1)."""
        if not self.ok or not self.output_tokens or self.output_tokens < 2 or self.done is None or self.first_token is None:
            return None
        return (self.done - self.first_token) / (self.output_tokens - 1)

    @property
    def output_throughput(self) -> Optional[float]:
        """This stream's tokens per second over its whole request (TTFT included)."""
        if not self.ok or self.output_tokens is None or not self.e2el:
            return None
        return self.output_tokens / self.e2el

    @property
    def decode_throughput(self) -> Optional[float]:
        """Tokens per second after the first token: decode speed without prefill."""
        if not self.ok or not self.output_tokens or self.output_tokens < 2 or self.done is None or self.first_token is None:
            return None
        if self.done <= self.first_token:
            return None
        return (self.output_tokens - 1) / (self.done - self.first_token)

    def feed(self, data: str, now: float) -> None:
        """Fold one `data:` payload of the streamed completion in; [DONE] marks the end."""
        if self.done is not None:
            return
        if data.strip() == "[DONE]":
            self.done = now
            return
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError:
            self.error = f"unreadable event from the server: {data[:200]!r}"
            return
        if not isinstance(chunk, dict):
            return
        if "error" in chunk or chunk.get("object") == "error":
            self.error = _error_message(chunk)
            return
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = usage.get("prompt_tokens", self.prompt_tokens)
            self.output_tokens = usage.get("completion_tokens", self.output_tokens)
        for choice in chunk.get("choices") or []:
            if _generated_text(choice):
                if self.first_token is None:
                    self.first_token = now
                self.chunk_times.append(now)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]


def _generated_text(choice: dict) -> str:
    delta = choice.get("delta")
    if isinstance(delta, dict):
        # Reasoning text is generated output too (if thinking is on, it comes first).
        return delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or ""
    return choice.get("text") or ""  # /v1/completions


def normalise_endpoint(url: str) -> str:
    """Accept http://host:port or http://host:port/v1; always return the /v1 base."""
    import httpx

    url = url.strip().rstrip("/")
    try:
        parsed = httpx.URL(url)
    except Exception as err:  # httpx.InvalidURL and friends
        raise InputError(f"--endpoint {url!r} is not a URL ({err})", fix="write it as http://HOST:PORT/v1") from err
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InputError(f"--endpoint {url!r} is not an http(s) URL", fix="write it as http://HOST:PORT/v1")
    return url if url.endswith("/v1") else url + "/v1"


class Endpoint:
    """An OpenAI-compatible server: its /v1 base, the model to ask for, and how to reach it."""

    def __init__(self, url: str, model: Optional[str], api_key: Optional[str] = None, timeout_s: float = 1800.0):
        from sparkctl.transport.guard import check_url

        self.url = normalise_endpoint(url)
        check_url(self.url, "sparkctl bench")  # the dev/CI fence (SPARKCTL_ONLY_NETWORKS), before any request
        self.root = self.url.removesuffix("/v1")  # where /metrics, /health and /version live
        self.model = model
        self._api_key = api_key
        self.timeout_s = timeout_s

    def client(self):
        import httpx

        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        # trust_env=False: never route through a proxy from the environment; we talk to this URL only.
        return httpx.AsyncClient(
            timeout=httpx.Timeout(self.timeout_s, connect=10.0),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=64),
            headers=headers,
            trust_env=False,
        )

    async def models(self, client) -> list[dict]:
        """GET /v1/models; unreachable or not OpenAI-compatible is the operator's to fix."""
        import httpx

        try:
            r = await client.get(f"{self.url}/models")
        except httpx.HTTPError as err:
            raise HostError(
                f"cannot reach {self.url}/models: {err or type(err).__name__}",
                fix="check the runtime is up (`sparkctl status`) and the --endpoint URL",
            ) from err
        if r.status_code != 200:
            raise HostError(
                f"{self.url}/models answered HTTP {r.status_code}: {r.text[:200]}",
                fix="point --endpoint at an OpenAI-compatible server (its /v1 base)",
            )
        try:
            return list(r.json().get("data") or [])
        except (ValueError, AttributeError) as err:
            raise HostError(f"{self.url}/models did not answer a model list", fix="check --endpoint") from err

    async def optional_text(self, client, path: str) -> Optional[str]:
        """GET a non-OpenAI path (/metrics, /version): None when the server has none."""
        import httpx

        try:
            r = await client.get(f"{self.root}{path}")
        except httpx.HTTPError:
            return None
        return r.text if r.status_code == 200 else None

    def chat_body(self, prompt: str, max_tokens: int, temperature: float, thinking: bool, ignore_eos: bool) -> dict:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens,
            "temperature": temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
            "chat_template_kwargs": {"enable_thinking": thinking},
        }
        if ignore_eos:
            # vLLM's sampling extras: generate exactly max_tokens, whatever the model would stop at.
            body["ignore_eos"] = True
            body["min_tokens"] = max_tokens
        return body

    async def chat(self, client, body: dict, stream: int = 0) -> Measured:
        """Send one streamed chat completion and time every chunk; failures land in .error."""
        import httpx
        from httpx_sse import SSEError, aconnect_sse

        m = Measured(stream=stream, sent=time.perf_counter())
        try:
            async with aconnect_sse(client, "POST", f"{self.url}/chat/completions", json=body) as source:
                response = source.response
                if response.status_code != 200:
                    await response.aread()
                    m.error = f"HTTP {response.status_code}: {_error_text(response)}"
                    m.done = time.perf_counter()
                    return m
                async for event in source.aiter_sse():
                    m.feed(event.data, time.perf_counter())
                    if m.error:
                        break
                # Read to the end of the body even after [DONE] (timed already), so the keep-alive
                # connection goes back to the pool instead of being reset.
        except (httpx.HTTPError, SSEError) as err:
            m.error = f"{type(err).__name__}: {err}"
        if m.done is None:  # no [DONE]: an error, or a stream that just ended (also an error)
            m.error = m.error or "the stream ended before data: [DONE]"
            m.done = time.perf_counter()
        return m


def _error_message(doc) -> str:
    """The message of an OpenAI-style error document ({"error": {"message": ...}} or flat)."""
    err = doc.get("error", doc) if isinstance(doc, dict) else doc
    return str(err.get("message", err) if isinstance(err, dict) else err)


def _error_text(response) -> str:
    try:
        return _error_message(response.json())[:500]
    except ValueError:
        return response.text[:500]
