"""A client load for changes made under traffic: the OpenAI Python client at max_retries=0 (every
error reaches the test), streamed chat completions from several threads until stopped. Used through
the gateway (test_gateway_changes) and through a fleet's front door (test_fleet_rollout)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Optional

import openai

NAME = "deepseek-v4.1-flash"
# A thread starts a request at most this often. Back to back, the lab's 100x decode made four
# threads a CPU loop (137 requests/s, 1.4 cores of two on the idle lab, measured): every other test
# of the run waited for it. Paced, four threads send ~40/s (one every ~25 ms) at ~0.55 core; a
# request that takes longer (held through a restart) is followed at once, so a change's transitions
# still meet requests sent and held throughout.
PERIOD_S = 0.1


@dataclass
class Result:
    start: float
    seconds: float
    outcome: str  # ok | status 503 | connection: ... | empty | error: ...
    retry_after: Optional[str] = None
    message: str = ""


class Load:
    """`with Load(url) as load:` streamed chats to `url` (its /v1) from `threads` threads, each
    starting one at most every PERIOD_S, from half a second before the block to half a second after;
    each sends `api_key` (a door that asks none takes any)."""

    def __init__(self, url: str, threads: int = 4, max_tokens: int = 12, api_key: str = "lab"):
        self.url, self.threads, self.max_tokens, self.api_key = url, threads, max_tokens, api_key
        self.results: list[Result] = []
        self._stop = threading.Event()
        self._t = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def __enter__(self) -> "Load":
        for t in self._t:
            t.start()
        time.sleep(0.5)  # streams in flight before the change begins
        return self

    def __exit__(self, *exc) -> None:
        time.sleep(0.5)  # and after it ends
        self._stop.set()
        for t in self._t:
            t.join(120)

    def _run(self) -> None:
        client = openai.OpenAI(base_url=f"{self.url}/v1", api_key=self.api_key, max_retries=0, timeout=120)
        while not self._stop.is_set():
            t0 = time.monotonic()
            retry_after, message = None, ""
            try:
                chunks = client.chat.completions.create(
                    model=NAME, messages=[{"role": "user", "content": "Count from 1 to 10."}],
                    max_tokens=self.max_tokens, temperature=0, stream=True,
                )  # fmt: skip
                text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
                outcome = "ok" if text else "empty"
            except openai.APIStatusError as e:
                outcome, retry_after, message = f"status {e.status_code}", e.response.headers.get("retry-after"), e.message
            except openai.APIConnectionError as e:
                outcome = f"connection: {e.__cause__!r}"
            except Exception as e:  # noqa: BLE001 - any other failure is a failed request too
                outcome = f"error: {e!r}"
            self.results.append(Result(t0, time.monotonic() - t0, outcome, retry_after, message))
            self._stop.wait(t0 + PERIOD_S - time.monotonic())

    def failed(self, after: float = 0.0) -> list[Result]:
        """The requests that did not end ok, of those sent at `after` (time.monotonic()) or later."""
        return [r for r in self.results if r.outcome != "ok" and r.start >= after]

    def longest(self) -> float:
        return max(r.seconds for r in self.results)
