"""Watch a server-sent-event stream going by for its first content token ("HTTP up, zero tokens":
vLLM 0.33 during a drain answers 200 and a stream that ends `abort` with no text), and for how it
ended: its finish reason, or an error event in its place.

The three stream shapes vLLM 0.33 serves: OpenAI chat/completions chunks (`choices`), the Responses
API's typed events (`response.output_text.delta`, ... `response.completed`), and the Anthropic
Messages API's (entrypoints/anthropic/serving.py: `content_block_delta` carrying `text_delta`,
`thinking_delta` or `input_json_delta`; `message_delta` with the stop reason, null when the request
was aborted; an `error` event).

Read by the gateway (gateway/proxy.py: a stream that ends with no token was not served) and by
sparkctl's own first-token check after a start (runtime/health.py): standard library only, since
it is shipped to the head with the gateway (launch/gateway_code.py).
"""

from __future__ import annotations

import json

ABORT = "abort"
# Anthropic deltas that carry generated tokens (a thinking block's signature_delta does not)
MESSAGES_DELTAS = {"text_delta": "text", "thinking_delta": "thinking", "input_json_delta": "partial_json"}


class FirstToken:
    """Fed the raw bytes of an SSE stream; `seen` once it carries a generated token (completion
    `text`, chat `delta.content`/reasoning/tool calls, a Responses-API `*.delta`, an Anthropic
    `content_block_delta`). After that it reads nothing more: the rest of the stream costs nothing.
    Before that, `finish_reason` is the last one it said (an aborted Messages stream's null stop
    reason reads `abort`, as the engine finished it) and `error` whether it sent an error event."""

    def __init__(self) -> None:
        self.seen = False
        self.finish_reason: str | None = None
        self.error = False
        self._buf = b""

    @property
    def aborted_empty(self) -> bool:
        """Ended (or broke off) without a token and without a reason of its own: not served."""
        return not self.seen and not self.error and self.finish_reason in (None, ABORT)

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
        kind = str(obj.get("type", ""))
        if "error" in obj or kind in ("error", "response.failed"):
            self.error = True
            return False
        if kind.startswith("response.") or kind.startswith("message") or kind.startswith("content_block"):
            return self._typed(kind, obj)
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

    def _typed(self, kind: str, obj: dict) -> bool:
        delta = obj.get("delta")
        if kind.startswith("response."):
            if kind.endswith(".delta") and delta:
                return True
            if kind in ("response.completed", "response.incomplete"):
                response: dict = obj["response"] if isinstance(obj.get("response"), dict) else {}
                usage: dict = response["usage"] if isinstance(response.get("usage"), dict) else {}
                # an abort leaves the response "completed" with nothing generated (entrypoints/openai/responses)
                self.finish_reason = ABORT if usage.get("output_tokens") == 0 else str(response.get("status") or kind)
            return False
        if kind == "content_block_delta" and isinstance(delta, dict):
            field = MESSAGES_DELTAS.get(str(delta.get("type")))
            return bool(field and delta.get(field))
        if kind == "message_delta" and isinstance(delta, dict):
            # vLLM maps finish reasons stop/length/tool_calls to a stop reason and an abort to null
            self.finish_reason = str(delta.get("stop_reason") or ABORT)
        return False
