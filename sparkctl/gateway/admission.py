"""Long-context admission: at most K requests whose prompt exceeds N tokens at the engine at once
(the seed 002 recipe crashes under concurrent long-context requests); the rest wait in a bounded
queue, in arrival order, and are answered 429 with Retry-After when it is full or their wait is over.

Counting. A request body of at most N bytes cannot hold a prompt of more than N tokens (a byte-level
BPE token covers at least one byte of text, and the JSON around the messages outweighs the few
tokens a chat template adds per message), so short requests cost nothing. A larger body is counted
by the engine's own `/tokenize` (the same messages or prompt, the same chat-template arguments): one
round trip that carries the body again. When that fails, the request counts as long (the safe side).

Every route that carries a prompt is counted: completions, chat completions, the Responses API
(its `instructions` and `input` items as the chat messages vLLM renders them to, through
`/tokenize`) and the Anthropic Messages API (its own `/v1/messages/count_tokens`, which renders the
request as /v1/messages does). An input the gateway cannot put into messages counts as long.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from contextlib import asynccontextmanager
from typing import AsyncIterator, Awaitable, Callable

from .metrics import LONG_CONTEXT_QUEUE_FULL, LONG_CONTEXT_WAIT, Metrics
from .rejection import Rejected

GENERATION_ROUTES = ("/v1/completions", "/v1/chat/completions", "/v1/responses", "/v1/messages")
TOKENIZE = "/tokenize"
MESSAGES_COUNT = "/v1/messages/count_tokens"
# the Messages request's fields count_tokens takes (vLLM 0.33 entrypoints/anthropic/protocol.py AnthropicCountTokensRequest)
MESSAGES_FIELDS = ("model", "messages", "system", "tools", "tool_choice", "thinking", "output_config", "chat_template_kwargs")
# the chat request's fields /tokenize takes (vLLM 0.33 entrypoints/serve/tokenize/protocol.py TokenizeChatRequest)
CHAT_FIELDS = (
    "model",
    "messages",
    "add_generation_prompt",
    "continue_final_message",
    "chat_template",
    "chat_template_kwargs",
    "tools",
    "add_special_tokens",
)
FIRST_GUESS_S = 10.0  # a long request's duration before one has been seen: Retry-After's first estimate

# (the engine's path, the body): the prompt tokens it counts, None when it could not
Tokenize = Callable[[str, dict], Awaitable[int | None]]


class Uncountable(ValueError):
    """An input the gateway cannot put into chat messages: it counts as long."""


def _text(content) -> str:
    """A Responses-API message's content as text: a string, or its text parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise Uncountable("content")
    texts = []
    for part in content:
        if not (isinstance(part, dict) and part.get("type") in ("input_text", "output_text", "text", "refusal")):
            raise Uncountable(f"content part {part.get('type') if isinstance(part, dict) else part!r}")
        texts.append(str(part.get("text") or part.get("refusal") or ""))
    return "".join(texts)


def responses_as_chat(body: dict) -> dict:
    """A Responses-API request as the chat request /tokenize counts: instructions as the system
    message, each input item as a message (a tool call's arguments and a tool's output as text)."""
    messages = [{"role": "system", "content": body["instructions"]}] if isinstance(body.get("instructions"), str) else []
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise Uncountable("input")
    for item in items:
        if not isinstance(item, dict):
            raise Uncountable("input item")
        kind = item.get("type", "message")
        if kind == "message":
            messages.append({"role": str(item.get("role") or "user"), "content": _text(item.get("content"))})
        elif kind == "function_call":
            messages.append({"role": "assistant", "content": f"{item.get('name', '')}({item.get('arguments', '')})"})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "content": _text(item.get("output"))})
        elif kind == "reasoning":
            messages.append({"role": "assistant", "content": _text(item.get("content") or item.get("summary") or "")})
        else:
            raise Uncountable(f"input item {kind}")
    chat = {"messages": messages, **({"model": body["model"]} if "model" in body else {})}
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        if not all(isinstance(t, dict) and t.get("type") == "function" for t in tools):
            raise Uncountable("tools")
        chat["tools"] = [
            {"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters") if k in t}} for t in tools
        ]
    return chat


def tokenize_requests(path: str, body: dict) -> list[tuple[str, dict]]:
    """The engine's (path, body) asks that count this request's prompt tokens ([] when there is
    nothing to ask); raises Uncountable when the gateway cannot say."""
    if path == "/v1/messages":
        return [(MESSAGES_COUNT, {k: body[k] for k in MESSAGES_FIELDS if k in body})] if "messages" in body else []
    if path == "/v1/responses":
        return [(TOKENIZE, responses_as_chat(body))]
    if path.endswith("/chat/completions"):
        return [(TOKENIZE, {k: body[k] for k in CHAT_FIELDS if k in body})] if "messages" in body else []
    prompt = body.get("prompt")
    prompts = prompt if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt) else [prompt]
    return [
        (TOKENIZE, {"model": body["model"], "prompt": p} if "model" in body else {"prompt": p})
        for p in prompts
        if isinstance(p, str)
    ]


def token_ids_in(body: dict) -> int | None:
    """A completion prompt given as token ids counts itself."""
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(p, list) for p in prompt):
        return sum(len(p) for p in prompt)  # a batch runs at once: its prompts add up
    return None


class LongContext:
    def __init__(self, tokens: int, max_concurrent: int, queue: int, wait_s: float, tokenize: Tokenize, metrics: Metrics):
        self.tokens, self.max_concurrent, self.queue, self.wait_s = tokens, max_concurrent, queue, wait_s
        self._tokenize, self.m = tokenize, metrics
        self._slots = asyncio.Semaphore(max_concurrent)  # FIFO: waiters acquire in arrival order
        self.running = 0
        self.waiting = 0
        self._mean_s = FIRST_GUESS_S  # a running mean of long requests' durations

    @property
    def enabled(self) -> bool:
        return self.tokens > 0

    async def prompt_tokens(self, path: str, raw: bytes) -> int:
        """An upper bound that is exact where it matters: above N only when the prompt is."""
        if len(raw) <= self.tokens:
            return len(raw)
        try:
            body = json.loads(raw)
        except ValueError:
            return len(raw)  # the engine will refuse it; do not let it by as short
        if not isinstance(body, dict):
            return len(raw)
        ids = token_ids_in(body)
        if ids is not None:
            return ids
        try:
            asks = tokenize_requests(path, body)
        except Uncountable:
            return len(raw)
        if not asks:
            return len(raw)
        total = 0
        for engine_path, ask in asks:
            n = await self._tokenize(engine_path, ask)
            if n is None:
                return len(raw)  # /tokenize failed: count it long
            total += n
        return total

    @asynccontextmanager
    async def admit(self, method: str, path: str, raw: bytes) -> AsyncIterator[bool]:
        """Hold a slot while the request runs when it is long; yields whether it was."""
        if (
            not (self.enabled and method == "POST" and path in GENERATION_ROUTES)
            or await self.prompt_tokens(path, raw) <= self.tokens
        ):
            yield False
            return
        if self._slots.locked() and self.waiting >= self.queue:
            raise Rejected(
                429,
                LONG_CONTEXT_QUEUE_FULL,
                f"{self.max_concurrent} long-context request(s) (over "
                f"{self.tokens} prompt tokens) run and {self.waiting} wait already; retry after "
                "Retry-After seconds.",
                self._retry_after(),
            )
        self.waiting += 1
        self.m.long_waiting.set(self.waiting)
        try:
            await asyncio.wait_for(self._slots.acquire(), timeout=self.wait_s)
        except asyncio.TimeoutError:
            raise Rejected(
                429,
                LONG_CONTEXT_WAIT,
                f"A long-context request (over {self.tokens} prompt tokens) "
                f"waited {self.wait_s:g} s for a slot; retry after Retry-After seconds.",
                self._retry_after(),
            ) from None
        finally:
            self.waiting -= 1
            self.m.long_waiting.set(self.waiting)
        self.running += 1
        self.m.long_running.set(self.running)
        start = time.monotonic()
        try:
            yield True
        finally:
            self.running -= 1
            self.m.long_running.set(self.running)
            self._slots.release()
            self._mean_s = 0.8 * self._mean_s + 0.2 * (time.monotonic() - start)

    def _retry_after(self) -> float:
        """The queue ahead, at the mean long request's duration per slot."""
        return self._mean_s * math.ceil((self.waiting + 1) / self.max_concurrent)

    def status(self) -> dict:
        return (
            {
                "tokens": self.tokens,
                "max_concurrent": self.max_concurrent,
                "queue": self.queue,
                "running": self.running,
                "waiting": self.waiting,
            }
            if self.enabled
            else {"tokens": 0}
        )
