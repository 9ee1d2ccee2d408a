"""What one client, or all of them together, may make the gateway hold in memory and for how long
(docs/gateway.md "Security"): a request body of at most max_body_bytes (413 past it, before a byte
of it is read when it says its length), at most max_buffered_bytes of bodies across every request
the gateway has (read, held, queued or at the engine: 503 with Retry-After past it, never growth),
and a body that must arrive within body_timeout_s (408). Headers that never end are the keep-alive
timeout's (server.py): aiohttp closes a connection whose request has not begun by then.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from .metrics import BODY_TOO_LARGE, BUFFER_FULL, Metrics
from .rejection import Rejected, error_body

BUFFER_RETRY_AFTER_S = 5  # bodies drain as requests finish: seconds, not a hold


def _error(path: str, status: int, kind: str, message: str) -> web.Response:
    body = error_body(path, status, message, kind)
    return web.Response(status=status, body=body, headers={"Content-Type": "application/json", "Connection": "close"})


class Bounds:
    def __init__(self, max_body_bytes: int, max_buffered_bytes: int, body_timeout_s: float, metrics: Metrics):
        self.max_body, self.max_buffered, self.body_timeout_s, self.m = (
            max_body_bytes,
            max_buffered_bytes,
            body_timeout_s,
            metrics,
        )
        self.buffered = 0  # bytes reserved by the bodies of every request the gateway has now
        metrics.buffered_bytes.set_function(lambda: self.buffered)

    def middleware(self):
        @web.middleware
        async def bounded(request: web.Request, handler) -> web.StreamResponse:
            if not request.body_exists:
                return await handler(request)
            length = request.content_length
            if length is not None and length > self.max_body:
                self.m.rejected.labels(BODY_TOO_LARGE).inc()
                return _error(request.path, 413, "BadRequestError", self._too_large(length))
            reserve = length if length is not None else self.max_body  # chunked: its most
            if self.buffered + reserve > self.max_buffered:
                r = Rejected(
                    503,
                    BUFFER_FULL,
                    f"The gateway holds {self.max_buffered} bytes of request bodies already; retry after Retry-After seconds.",
                    BUFFER_RETRY_AFTER_S,
                )
                self.m.rejected.labels(r.reason).inc()
                return web.Response(status=r.status, body=r.body(request.path), headers=r.headers())
            self.buffered += reserve
            try:
                try:
                    # read here, under the deadline: the handler's read() then finds it read
                    await asyncio.wait_for(request.read(), self.body_timeout_s)
                except asyncio.TimeoutError:
                    return _error(
                        request.path,
                        408,
                        "RequestTimeoutError",
                        f"The request body did not arrive within {self.body_timeout_s:g} s.",
                    )
                except web.HTTPRequestEntityTooLarge:  # a chunked body past the limit
                    self.m.rejected.labels(BODY_TOO_LARGE).inc()
                    return _error(request.path, 413, "BadRequestError", self._too_large(None))
                return await handler(request)
            finally:
                self.buffered -= reserve

        return bounded

    def _too_large(self, length: int | None) -> str:
        size = f"{length} bytes" if length is not None else "more"
        return f"The request body is {size}; this server takes at most {self.max_body} bytes (gateway.max_body_bytes)."
