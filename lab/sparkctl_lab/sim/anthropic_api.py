"""vLLM 0.33's Anthropic Messages API (entrypoints/anthropic/) on the simulator: the request as the
chat request vLLM converts it to (to_chat_completion_request: `system` first, each message's text
blocks joined, `stop_sequences` as `stop`), and the answer in Anthropic's shapes: a message
(model_dump(exclude_none=True): a null stop reason is left out) or the event stream
message_stream_converter makes of the chat stream (message_start; content_block_start /
content_block_delta text_delta / content_block_stop; message_delta with the stop reason and usage;
message_stop; an `error` event when the engine fails). An aborted request's stop reason is null
(_to_anthropic_stop_reason maps only stop, length and tool_calls).
"""

from __future__ import annotations

import json

# _to_anthropic_stop_reason (no tools in the simulator)
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens"}


def _text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def as_chat(body: dict) -> dict:
    """The chat completion request vLLM serves a Messages request as."""
    messages = []
    if body.get("system"):
        messages.append({"role": "system", "content": _text(body["system"])})
    for m in body.get("messages") or []:
        if isinstance(m, dict):
            messages.append({"role": m.get("role", "user"), "content": _text(m.get("content"))})
    chat = {"messages": messages, "max_tokens": body.get("max_tokens")}
    for k in ("model", "temperature", "stream", "chat_template_kwargs", "ignore_eos", "seed"):
        if k in body:
            chat[k] = body[k]
    if body.get("stop_sequences"):
        chat["stop"] = body["stop_sequences"]
    return chat


def stop_reason(finish_reason: str | None, stop: str | int | None) -> str | None:
    if finish_reason == "stop" and isinstance(stop, str):
        return "stop_sequence"
    return STOP_REASONS.get(finish_reason or "")


def usage(prompt_tokens: int, output_tokens: int) -> dict:
    return {"input_tokens": prompt_tokens, "output_tokens": output_tokens}


def message(request_id: str, model: str, text: str, finish_reason: str | None, stop, prompt_tokens: int, out: int) -> dict:
    doc = {
        "id": request_id,
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": text}],  # an empty answer is one empty text block
        "model": model,
        "usage": usage(prompt_tokens, out),
    }
    reason = stop_reason(finish_reason, stop)
    if reason is not None:
        doc["stop_reason"] = reason
        if reason == "stop_sequence":
            doc["stop_sequence"] = stop
    return doc


def event(name: str, data: dict) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def message_start(request_id: str, model: str, prompt_tokens: int) -> bytes:
    msg = {
        "id": request_id,
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": model,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage(prompt_tokens, 0),
    }
    return event("message_start", {"type": "message_start", "message": msg})


def block_start() -> bytes:
    return event(
        "content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    )


def text_delta(text: str) -> bytes:
    return event(
        "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}
    )


def block_stop() -> bytes:
    return event("content_block_stop", {"type": "content_block_stop", "index": 0})


def message_end(finish_reason: str | None, stop, prompt_tokens: int, out: int) -> bytes:
    reason = stop_reason(finish_reason, stop)
    delta = {"stop_reason": reason, "stop_sequence": stop if reason == "stop_sequence" else None}
    return event("message_delta", {"type": "message_delta", "delta": delta, "usage": usage(prompt_tokens, out)}) + event(
        "message_stop", {"type": "message_stop"}
    )


def error_event(message: str) -> bytes:
    return event("error", {"type": "error", "error": {"type": "api_error", "message": message}})


def error_body(message: str) -> dict:
    """translate_error_response: {"type": "error", "error": {"type", "message"}} (api_error from 500 up)."""
    return {"type": "error", "error": {"type": "api_error", "message": message}}
