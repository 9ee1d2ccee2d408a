"""vLLM 0.33's Responses API (entrypoints/openai/responses/) on the simulator, its simple (non-harmony)
path, as DeepSeek models take it: the request as the chat request it is served as (`instructions` as
the system message, `input` a string or a list of message items, `max_output_tokens` the limit), the
answer a `response` object (ResponsesResponse.from_request: status "completed", "incomplete" with
`incomplete_details` when the limit cut it; an aborted request stays "completed" with no output
tokens), and the typed event stream responses_stream_generator sends: response.created,
response.in_progress, response.output_item.added, response.content_part.added,
response.output_text.delta..., response.output_text.done, response.content_part.done,
response.output_item.done, response.completed (or response.incomplete), each with its
`sequence_number` and as `event: <type>` + `data: <json>` (api_router._convert_stream_to_sse_events).
"""

from __future__ import annotations

import json
import uuid


def _text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        kinds = ("input_text", "output_text", "text")
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") in kinds)
    return ""


def as_chat(body: dict) -> dict:
    """The chat completion request a Responses request is served as."""
    messages = [{"role": "system", "content": body["instructions"]}] if isinstance(body.get("instructions"), str) else []
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and item.get("type", "message") == "message":
            messages.append({"role": str(item.get("role") or "user"), "content": _text(item.get("content"))})
    chat: dict = {"messages": messages, "max_tokens": body.get("max_output_tokens")}
    for k in ("model", "temperature", "top_p", "stream", "ignore_eos", "seed"):
        if k in body:
            chat[k] = body[k]
    return chat


def status(finish_reason: str | None) -> str:
    return "incomplete" if finish_reason == "length" else "completed"


def usage(prompt_tokens: int, output_tokens: int) -> dict:
    return {
        "input_tokens": prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0, "tool_output_tokens": 0},
        "total_tokens": prompt_tokens + output_tokens,
    }


def output_text(text: str) -> dict:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": None}


def output_message(item_id: str, text: str, item_status: str) -> dict:
    content = [output_text(text)] if text else []
    return {"id": item_id, "type": "message", "role": "assistant", "content": content, "status": item_status}


def response(
    request_id: str,
    body: dict,
    model: str,
    created: int,
    state: str,
    output: list[dict],
    use: dict | None,
    max_tokens: int,
) -> dict:
    """ResponsesResponse.from_request, the fields a client reads (the request's own echoed back)."""
    return {
        "id": request_id,
        "created_at": created,
        "incomplete_details": {"reason": "max_output_tokens"} if state == "incomplete" else None,
        "instructions": body.get("instructions"),
        "metadata": body.get("metadata"),
        "model": model,
        "object": "response",
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "temperature": body.get("temperature", 1.0),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0),
        "background": bool(body.get("background", False)),
        "max_output_tokens": max_tokens,
        "previous_response_id": body.get("previous_response_id"),
        "service_tier": body.get("service_tier", "auto"),
        "status": state,
        "truncation": body.get("truncation", "disabled"),
        "usage": use,
        "user": body.get("user"),
    }


def request_id() -> str:
    return f"resp_{uuid.uuid4().hex}"


def item_id() -> str:
    return f"msg_{uuid.uuid4().hex}"


class EventStream:
    """Numbers the events of one stream (sequence_number from 0) and writes them as SSE."""

    def __init__(self) -> None:
        self.sequence = 0

    def event(self, kind: str, fields: dict) -> bytes:
        data = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()

    def opened(self, initial: dict) -> bytes:
        return self.event("response.created", {"response": initial}) + self.event("response.in_progress", {"response": initial})

    def content_open(self, msg_id: str) -> bytes:
        return self.event(
            "response.output_item.added", {"output_index": 0, "item": output_message(msg_id, "", "in_progress")}
        ) + self.event(
            "response.content_part.added",
            {"output_index": 0, "item_id": msg_id, "content_index": 0, "part": {**output_text(""), "logprobs": []}},
        )

    def delta(self, msg_id: str, text: str) -> bytes:
        fields = {"content_index": 0, "output_index": 0, "item_id": msg_id, "delta": text, "logprobs": []}
        return self.event("response.output_text.delta", fields)

    def content_done(self, msg_id: str, text: str, item_status: str) -> bytes:
        where = {"output_index": 0, "item_id": msg_id, "content_index": 0}
        return (
            self.event("response.output_text.done", {**where, "text": text, "logprobs": []})
            + self.event("response.content_part.done", {**where, "part": output_text(text)})
            + self.event("response.output_item.done", {"output_index": 0, "item": output_message(msg_id, text, item_status)})
        )

    def finished(self, final: dict) -> bytes:
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        return self.event(kind, {"response": final})

    def error(self, message: str) -> bytes:
        # serving.py _convert_generation_error_to_streaming_response: an `error` event
        return self.event("error", {"code": "InternalServerError", "message": message, "param": None})
