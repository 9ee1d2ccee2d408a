"""Long-context admission: at most K requests whose prompt exceeds N tokens at the engine at once
(the seed 002 recipe crashes under concurrent long-context requests); the rest wait in a bounded
queue, in arrival order, and are answered 429 with Retry-After when it is full or their wait is over.

Counting. A request body of at most N bytes cannot hold a prompt of more than N tokens (a byte-level
BPE token covers at least one byte of text, and the JSON around the messages outweighs the few
tokens a chat template adds per message), so short requests cost nothing. A larger body is counted
by the engine's own `/tokenize` (the same messages or prompt, the same chat-template arguments): one
round trip that carries the body again. When that fails, the request counts as long (the safe side).
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

GENERATION_ROUTES = ("/v1/completions", "/v1/chat/completions")
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

Tokenize = Callable[[dict], Awaitable[int | None]]


def tokenize_requests(path: str, body: dict) -> list[dict]:
    """The /tokenize bodies that count this request's prompt tokens ([] when there is nothing to ask)."""
    if path.endswith("/chat/completions"):
        return [{k: body[k] for k in CHAT_FIELDS if k in body}] if "messages" in body else []
    prompt = body.get("prompt")
    prompts = prompt if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt) else [prompt]
    return [{"model": body["model"], "prompt": p} if "model" in body else {"prompt": p} for p in prompts if isinstance(p, str)]


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
        asks = tokenize_requests(path, body)
        if not asks:
            return len(raw)
        total = 0
        for ask in asks:
            n = await self._tokenize(ask)
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
