"""A request the gateway answers itself, and the OpenAI-shaped body it answers with (vLLM's shape:
entrypoints/serve/engine/protocol.py ErrorResponse/ErrorInfo), with Retry-After in whole seconds."""

from __future__ import annotations

import json
import math

ERROR_TYPES = {503: "ServiceUnavailableError", 429: "RateLimitError"}


class Rejected(Exception):
    def __init__(self, status: int, reason: str, message: str, retry_after_s: float):
        super().__init__(message)
        self.status = status
        self.reason = reason  # the metrics' `reason` label
        self.message = message
        self.retry_after = max(1, math.ceil(retry_after_s))  # RFC 9110 delay-seconds: a whole number

    def body(self) -> bytes:
        return json.dumps(
            {
                "error": {
                    "message": self.message,
                    "type": ERROR_TYPES.get(self.status, "Error"),
                    "param": None,
                    "code": self.status,
                }
            }
        ).encode()

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after), "Content-Type": "application/json"}
