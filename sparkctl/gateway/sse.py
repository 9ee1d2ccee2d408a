"""Watch a server-sent-event stream going by for its first content token ("HTTP up, zero tokens":
vLLM 0.33 during a drain answers 200 and a stream that ends `abort` with no text)."""

from __future__ import annotations

import json


class FirstToken:
    """Fed the raw bytes of an OpenAI-style SSE stream; `seen` once a choice carries text (completion
    `text`, chat `delta.content`/reasoning/tool calls, or a Responses-API `*.delta`). After that it
    reads nothing more: the rest of the stream costs nothing."""

    def __init__(self) -> None:
        self.seen = False
        self.finish_reason: str | None = None
        self._buf = b""

    def feed(self, chunk: bytes) -> None:
        if self.seen:
            return
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        for line in lines:
            if self._event(line.strip()):
                self.seen = True
                self._buf = b""
                return

    def _event(self, line: bytes) -> bool:
        if not line.startswith(b"data:"):
            return False
        data = line[5:].strip()
        if not data or data == b"[DONE]":
            return False
        try:
            obj = json.loads(data)
        except ValueError:
            return False
        if not isinstance(obj, dict):
            return False
        if str(obj.get("type", "")).endswith(".delta") and obj.get("delta"):
            return True
        for choice in obj.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
            delta = choice.get("delta") or {}
            if choice.get("text") or (
                isinstance(delta, dict)
                and (delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or delta.get("tool_calls"))
            ):
                return True
        return False
