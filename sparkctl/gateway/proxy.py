"""Pass-through of every route to the engine: the same method, path, query, headers and body; the
engine's status, headers and body back, streamed chunk by chunk as they arrive (SSE unbuffered).

A request waits at the gate (held) and, when it is long, for a long-context slot. A connection that
fails before the engine has the request (refused, reset before any answer) sends it back to the gate,
which holds it while the upstream is down; so does one that reached the engine after a hold began
and that the engine, going away, refused or aborted empty. Otherwise what the engine answers goes
to the client as it is.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

import aiohttp
from aiohttp import web
from yarl import URL

from .admission import LongContext
from .gate import Gate
from .metrics import Metrics
from .rejection import Rejected
from .sse import FirstToken

log = logging.getLogger("sparkctl.gateway")

# RFC 9110 7.6.1 hop-by-hop fields, and those aiohttp sets itself from the body it sends
HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
# the request never reached the engine: sending it again is safe
NOT_SENT = (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, asyncio.TimeoutError)


def forward_headers(headers) -> dict[str, str]:
    drop = HOP_BY_HOP | {v.strip().lower() for v in headers.get("connection", "").split(",")}
    return {k: v for k, v in headers.items() if k.lower() not in drop}


class Proxy:
    def __init__(self, upstream: str, session: aiohttp.ClientSession, gate: Gate, long_context: LongContext, metrics: Metrics):
        self.upstream, self.session, self.gate, self.lc, self.m = upstream, session, gate, long_context, metrics
        self.in_flight = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        arrival = time.monotonic()
        self.m.requests.inc()
        body = await request.read()
        try:
            await self.gate.wait(arrival)
            async with self.lc.admit(request.method, request.path, body):
                return await self._forward(request, body, arrival)
        except Rejected as r:
            self.m.rejected.labels(r.reason).inc()
            return web.Response(status=r.status, body=r.body(), headers=r.headers())

    async def _forward(self, request: web.Request, body: bytes, arrival: float) -> web.StreamResponse:
        url = URL(self.upstream + request.raw_path, encoded=True)  # the path and query exactly as they came
        headers = forward_headers(request.headers)
        while True:
            await self.gate.wait(arrival)  # again: a hold may have begun while it was counted or queued
            passed = self.gate.epoch
            self._count(+1)  # in flight from the moment it goes upstream
            try:
                up = await self.session.request(request.method, url, headers=headers, data=body, allow_redirects=False)
            except NOT_SENT as e:
                self._count(-1)
                self.m.upstream_errors.labels("connect").inc()
                self.gate.upstream_down(f"{type(e).__name__}: {e}")
                continue
            except BaseException:
                self._count(-1)
                raise
            try:
                watch = FirstToken() if is_sse(up) else None
                head = b""
                if self.gate.epoch != passed:
                    # The gate closed after this request passed it: it may have reached an engine that was
                    # already going away (vLLM 0.33 answers those 200 with an empty `abort`, and so does the
                    # lab's simulator; a paused engine, 503). Look before answering; one that was not served
                    # goes back to the gate.
                    head = await self._served(up, watch)
                    if head is None:
                        self.m.upstream_errors.labels("drain").inc()
                        continue
                return await self._relay(request, up, head, watch)
            finally:
                up.close()  # after a complete body it is released for reuse already; else the engine sees the close
                self._count(-1)

    def _count(self, n: int) -> None:
        self.in_flight += n
        self.m.in_flight.set(self.in_flight)

    async def _served(self, up: aiohttp.ClientResponse, watch: FirstToken | None) -> bytes | None:
        """What the engine has sent so far when it served the request; None when it refused it (503) or
        ended it empty with `abort`. A stream is read up to its first content token."""
        if up.status == 503:
            return None
        try:
            if watch is not None:
                buf = bytearray()
                async for chunk in up.content.iter_any():
                    buf += chunk
                    watch.feed(chunk)
                    if watch.seen:
                        return bytes(buf)
                return None if watch.finish_reason in (None, "abort") else bytes(buf)
            raw = await up.read()
        except (aiohttp.ClientPayloadError, aiohttp.ClientOSError, aiohttp.ServerDisconnectedError):
            return None  # cut before anything reached the client: not served
        return None if up.status == 200 and aborted_empty(raw) else raw

    async def _relay(
        self, request: web.Request, up: aiohttp.ClientResponse, head: bytes, watch: FirstToken | None
    ) -> web.StreamResponse:
        resp = web.StreamResponse(status=up.status, reason=up.reason, headers=forward_headers(up.headers))
        if up.content_length is not None and "chunked" not in up.headers.get("transfer-encoding", ""):
            resp.content_length = up.content_length
        await resp.prepare(request)
        try:
            if head:
                await resp.write(head)
            async for chunk in up.content.iter_any():
                if watch is not None and not watch.seen:
                    watch.feed(chunk)
                await resp.write(chunk)
        except (aiohttp.ClientPayloadError, aiohttp.ClientOSError, aiohttp.ServerDisconnectedError) as e:
            # the engine broke off mid-answer: the client's connection is closed too, never ended cleanly
            self.m.upstream_errors.labels("cut").inc()
            log.warning("upstream cut %s %s mid-answer: %s", request.method, request.path, e)
            if request.transport is not None:
                request.transport.close()
            return resp
        except ConnectionResetError:
            return resp  # the client went away: closing the upstream (below) makes the engine abort it
        if watch is not None and not watch.seen:
            self.m.zero_token_streams.labels(watch.finish_reason or "none").inc()
            log.warning("stream %s ended with no content token (finish_reason %s)", request.path, watch.finish_reason)
        await resp.write_eof()
        return resp


def is_sse(up: aiohttp.ClientResponse) -> bool:
    return up.headers.get("content-type", "").startswith("text/event-stream")


def aborted_empty(raw: bytes) -> bool:
    """A completion whose every choice finished `abort` with no text (vLLM 0.33 during its drain)."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return False
    choices = doc.get("choices") if isinstance(doc, dict) else None
    if not isinstance(choices, list) or not choices:
        return False
    for c in choices:
        msg = c.get("message") or {} if isinstance(c, dict) else {}
        if not isinstance(c, dict) or c.get("finish_reason") != "abort" or c.get("text") or msg.get("content"):
            return False
    return True
