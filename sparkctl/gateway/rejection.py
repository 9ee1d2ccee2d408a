"""What the gateway answers itself (a refusal, a hold given up, a missing key, an engine that died
with the request), in the error shape of the route the client called: vLLM's OpenAI shape
(entrypoints/serve/engine/protocol.py ErrorResponse/ErrorInfo) on the OpenAI routes, and on the
Anthropic Messages API the shape vLLM translates its errors to there (entrypoints/anthropic/
api_router.py translate_error_response: `{"type": "error", "error": {"type", "message"}}`, the type
from protocol.py's table), so an Anthropic client reads a 429 as `rate_limit_error` and a 503 as
`overloaded_error`. Retry-After is in whole seconds.
"""

from __future__ import annotations

import json
import math

ERROR_TYPES = {503: "ServiceUnavailableError", 429: "RateLimitError"}
MESSAGES_ROUTES = ("/v1/messages", "/v1/messages/count_tokens")
# entrypoints/anthropic/protocol.py _ANTHROPIC_ERROR_TYPE_BY_STATUS
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}


def anthropic_type(status: int) -> str:
    """translate_error_type: the table's, else api_error from 500 up, else invalid_request_error."""
    return ANTHROPIC_TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")


def error_doc(path: str, status: int, message: str, openai_type: str) -> dict:
    """The body of an error the gateway answers on `path`, as that route's clients parse it."""
    if path in MESSAGES_ROUTES:
        return {"type": "error", "error": {"type": anthropic_type(status), "message": message}}
    return {"error": {"message": message, "type": openai_type, "param": None, "code": status}}


def error_body(path: str, status: int, message: str, openai_type: str) -> bytes:
    return json.dumps(error_doc(path, status, message, openai_type)).encode()


class Rejected(Exception):
    def __init__(self, status: int, reason: str, message: str, retry_after_s: float):
        super().__init__(message)
        self.status = status
        self.reason = reason  # the metrics' `reason` label
        self.message = message
        self.retry_after = max(1, math.ceil(retry_after_s))  # RFC 9110 delay-seconds: a whole number

    def body(self, path: str) -> bytes:
        return error_body(path, self.status, self.message, ERROR_TYPES.get(self.status, "Error"))

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after), "Content-Type": "application/json"}
