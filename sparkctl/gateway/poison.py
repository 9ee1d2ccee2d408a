"""No poison replay: a request the engine was running when it died is not sent again, to the
restarted engine or anywhere else; it is the likeliest cause of the crash (seed 002: "Concurrent
long-context usage still hits CUDA device-side asserts").

The gateway cannot see which requests the engine had scheduled, so it counts every request it had
sent on while the gate was open and that the engine, dying, answered with an error or broke off:
those in flight at the death. Requests it can tell were never started are held and sent again
instead: refused connections, a stream request answered 500 before its stream began (vLLM 0.33
answers a dead engine's new requests so, `EngineDeadError`, while the in-flight streams get an error
event), and trial requests sent to an engine that was draining (it starts nothing new). Held too: a request
the engine broke off or failed while sparkctl's hold was on, since sparkctl stopped it (proxy.py).

The client gets a clear error with the reason (502, or an error event in the stream's own shape)
and `x-should-retry: false` (the OpenAI and Anthropic SDKs do not retry it by themselves). The log
gets the request's shape for the post-mortem: route, sizes and counts, never its content.
"""

from __future__ import annotations

import json

from . import rejection

MESSAGE = (
    "The engine stopped while it was running this request; the gateway does not send it again (a request "
    "running when an engine dies is the likeliest cause of the crash). Send it again yourself only if you "
    "know it is not."
)
STATUS = 502
NO_RETRY = {"x-should-retry": "false"}
MESSAGES_ROUTE = "/v1/messages"
RESPONSES_ROUTE = "/v1/responses"
# the numbers a request's shape is told by (never a string it carries)
LIMIT_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens", "n")
LIST_FIELDS = ("messages", "input", "tools", "prompt")


def shape(method: str, path: str, body: bytes, at_engine_s: float | None, relayed_bytes: int) -> str:
    """What the request was like, for the log: route, sizes, counts; never its text."""
    parts = [f"{method} {path}", f"body {len(body)} bytes"]
    if at_engine_s is not None:
        parts.append(f"at the engine {at_engine_s:.1f} s")
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        parts.append(f"stream {bool(doc.get('stream'))}")
        for k in LIST_FIELDS:
            v = doc.get(k)
            if isinstance(v, list):
                parts.append(f"{len(v)} {k}")
            elif isinstance(v, str):
                parts.append(f"{k} {len(v)} chars")
        for k in LIMIT_FIELDS:
            v = doc.get(k)
            if isinstance(v, int) and not isinstance(v, bool):
                parts.append(f"{k} {v}")
    if relayed_bytes:
        parts.append(f"{relayed_bytes} bytes already sent to the client")
    return ", ".join(parts)


def error_body(path: str) -> bytes:
    """The answer's body in the route's own error shape."""
    return rejection.error_body(path, STATUS, MESSAGE, "BadGatewayError")


def error_event(path: str) -> bytes:
    """The end of a stream the engine died in, as an error event of the stream's shape."""
    if path == MESSAGES_ROUTE:
        return f"event: error\ndata: {error_body(path).decode()}\n\n".encode()
    if path == RESPONSES_ROUTE:
        data = json.dumps({"type": "error", "code": "engine_died", "message": MESSAGE, "param": None})
        return f"event: error\ndata: {data}\n\n".encode()  # entrypoints/openai/responses/api_router.py
    return f"data: {error_body(path).decode()}\n\ndata: [DONE]\n\n".encode()
