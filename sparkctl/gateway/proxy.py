"""Pass-through of every route to the engine: the same method, path, query, headers and body; the
engine's status, headers and body back, streamed chunk by chunk as they arrive (SSE unbuffered).

A request waits at the gate (held) and, when it is long, for a long-context slot. A connection that
fails before the engine has the request (refused) sends it back to the gate, which holds it while the
upstream is down. An answer to a generation request is looked at before the client sees it (a stream
up to its first token): one the engine did not serve (an empty `abort`: it is draining, told or not;
a 503 during a hold; a dead engine's 500 to a stream not yet begun) goes back to the gate too, and an
empty `abort` with no hold on closes the gate (gate.py). A request the engine died with (it broke off,
or answered an error, and /health no longer answers 200) is not sent again (poison.py), unless
sparkctl's hold was on: then the engine went because sparkctl stopped it, and the request is held too. Otherwise
what the engine answers goes to the client as it is.
"""

from __future__ import annotations

import json
import logging
import time

import aiohttp
from aiohttp import web
from yarl import URL

from sparkctl.sse import ABORT, FirstToken

from . import poison
from .admission import GENERATION_ROUTES, LongContext
from .gate import Gate
from .metrics import Metrics
from .rejection import Rejected

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
NOT_SENT = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)
# it has the request and sent nothing for upstream_idle_s (server.py's sock_read): hung, or stopped
STALLED = aiohttp.SocketTimeoutError
# it may have: a kept-alive connection the engine had closed (sent again), or an engine that died with it
BROKEN = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, aiohttp.ClientPayloadError, STALLED)
# what the look before answering concludes
SERVED, NOT_SERVED, FAILED = "served", "not served", "failed"


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
            return web.Response(status=r.status, body=r.body(request.path), headers=r.headers())

    async def _forward(self, request: web.Request, body: bytes, arrival: float) -> web.StreamResponse:
        url = URL(self.upstream + request.raw_path, encoded=True)  # the path and query exactly as they came
        headers = forward_headers(request.headers)
        generation = request.method == "POST" and request.path in GENERATION_ROUTES
        while True:
            await self.gate.wait(arrival)  # again: a hold may have begun while it was counted or queued
            passed = self.gate.epoch
            # let through a closed gate: a trial while the engine drains, which starts nothing new
            trial = self.gate.closed
            self._count(+1)  # in flight from the moment it goes upstream
            sent_at = time.monotonic()
            try:
                up = await self.session.request(request.method, url, headers=headers, data=body, allow_redirects=False)
            except STALLED as e:  # before NOT_SENT and BROKEN: never sent again, the engine may be running it
                self._count(-1)
                return self._stalled(request, e)
            except NOT_SENT as e:
                self._count(-1)
                self.m.upstream_errors.labels("connect").inc()
                self.gate.upstream_down(f"{type(e).__name__}: {e}")
                continue
            except BROKEN as e:
                self._count(-1)
                if self._may_have_killed(generation, trial) and not await self.gate.probe():
                    return self._died(request, body, sent_at, f"{type(e).__name__}: {e}")
                self.m.upstream_errors.labels("connect").inc()  # a connection it had closed: sent again
                continue
            except BaseException:
                self._count(-1)
                raise
            try:
                watch = FirstToken() if is_sse(up) else None
                head = b""
                if generation or self.gate.epoch != passed:
                    verdict, head = await self._look(up, watch)
                    if verdict == NOT_SERVED:
                        self._not_served(up, watch, head)
                        continue
                    if verdict == FAILED and not await self.gate.probe():
                        # the engine is dead: a stream answered 500 before it began was never started
                        stream_refused = up.status == 500 and watch is None and _asks_stream(body)
                        if stream_refused or not self._may_have_killed(generation, trial):
                            self.m.upstream_errors.labels("dead").inc()
                            self.gate.upstream_down(f"it answered {up.status} and its /health does not answer 200")
                            continue
                        return await self._died_answered(request, body, sent_at, up, head, watch)
                    if verdict == SERVED and trial:
                        self.gate.upstream_serving()  # the engine serves again (a request from before a drain proves nothing)
                return await self._relay(request, up, head, watch, body)
            finally:
                up.close()  # after a complete body it is released for reuse already; else the engine sees the close
                self._count(-1)

    def _may_have_killed(self, generation: bool, trial: bool) -> bool:
        """Could a dead engine have died of this request (poison.py: never sent again)? Only a
        generation request sent on an open gate, and not while sparkctl's hold is on: then the engine
        went because sparkctl stopped it (ci63: a request sent just before the hold broke off)."""
        return generation and not trial and self.gate.hold is None

    def _stalled(self, request: web.Request, e: BaseException) -> web.Response:
        """The engine took the request and answered nothing within upstream_idle_s: 504 (not sent
        again: it may be running it), and new requests are held until its /health answers 200 (a
        stopped engine stays held; a slow but healthy one opens the gate at the next probe)."""
        self.m.upstream_errors.labels("stalled").inc()
        self.gate.upstream_down(f"no answer from the engine within upstream_idle_s ({e or 'read timeout'})")
        log.warning("stalled %s %s: the engine answered nothing in time; not sent again", request.method, request.path)
        message = "The server did not answer in time (the gateway's upstream_idle_s); not retried by the gateway."
        body = json.dumps({"error": {"message": message, "type": "GatewayTimeoutError", "param": None, "code": 504}})
        return web.Response(status=504, body=body.encode(), headers={"Content-Type": "application/json"})

    def _count(self, n: int) -> None:
        self.in_flight += n
        self.m.in_flight.set(self.in_flight)

    async def _look(self, up: aiohttp.ClientResponse, watch: FirstToken | None) -> tuple[str, bytes]:
        """Whether the engine served the request, and what it has sent so far: a stream up to its
        first content token, any other answer whole."""
        if up.status == 503 and self.gate.hold is not None:
            return NOT_SERVED, b""  # a paused or stopping engine refused it during sparkctl's hold
        buf = bytearray()
        try:
            if watch is not None:
                async for chunk in up.content.iter_any():
                    buf += chunk
                    watch.feed(chunk)
                    if watch.seen:
                        return SERVED, bytes(buf)
                if watch.error:
                    return FAILED, bytes(buf)
                return (NOT_SERVED if watch.aborted_empty else SERVED), bytes(buf)
            buf += await up.read()
        except BROKEN:
            return FAILED, bytes(buf)  # broke off before anything reached the client
        raw = bytes(buf)
        if up.status == 200 and aborted_empty(raw):
            return NOT_SERVED, raw
        return (FAILED if up.status == 500 else SERVED), raw

    def _not_served(self, up: aiohttp.ClientResponse, watch: FirstToken | None, head: bytes) -> None:
        """Back to the gate; an empty abort with no hold on is a drain nobody announced: close the gate."""
        self.m.upstream_errors.labels("drain").inc()
        if self.gate.hold is None and up.status == 200:
            self.gate.upstream_draining(f"a request ended {(watch.finish_reason if watch else None) or ABORT}, empty")

    def _died(self, request: web.Request, body: bytes, sent_at: float, error: str) -> web.Response:
        """The engine broke off a request it had and is not healthy: a clear error, never sent again."""
        self._record_death(request, body, sent_at, 0, error)
        return died_answer(request.path)

    async def _died_answered(
        self, request: web.Request, body: bytes, sent_at: float, up: aiohttp.ClientResponse, head: bytes, watch: FirstToken | None
    ) -> web.StreamResponse:
        """The engine answered an error (or broke off) with the request and is dead: the client gets
        the reason; a stream gets what the engine sent, then an error event of its shape."""
        self._record_death(request, body, sent_at, len(head), f"it answered {up.status}; its /health does not answer 200")
        if watch is None:
            return died_answer(request.path)
        resp = web.StreamResponse(status=up.status, reason=up.reason, headers={**forward_headers(up.headers), **poison.NO_RETRY})
        await resp.prepare(request)
        await resp.write(head + (b"" if watch.error else poison.error_event(request.path)))
        await resp.write_eof()
        return resp

    def _record_death(self, request: web.Request, body: bytes, sent_at: float, relayed: int, error: str) -> None:
        self.gate.upstream_down(error)
        self.m.upstream_errors.labels("died").inc()
        log.error(
            "not sent again: the engine stopped while it had this request (%s): %s",
            error,
            poison.shape(request.method, request.path, body, time.monotonic() - sent_at, relayed),
        )

    async def _relay(
        self, request: web.Request, up: aiohttp.ClientResponse, head: bytes, watch: FirstToken | None, body: bytes = b""
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
        except (aiohttp.ClientPayloadError, aiohttp.ClientOSError, aiohttp.ServerDisconnectedError, STALLED) as e:
            if isinstance(e, STALLED):  # silent mid-answer: hold new requests until its /health answers
                self.m.upstream_errors.labels("stalled").inc()
                self.gate.upstream_down(f"the engine sent nothing mid-answer for upstream_idle_s ({e or 'read timeout'})")
            # the engine broke off mid-answer (never sent again: poison.py): a stream ends with an error
            # event of its shape, any other answer with its connection closed, never ended cleanly
            self.m.upstream_errors.labels("cut").inc()
            log.warning(
                "upstream cut %s %s mid-answer (%s), not sent again: %s",
                request.method,
                request.path,
                e,
                poison.shape(request.method, request.path, body, None, len(head)),
            )
            if watch is not None and request.path in GENERATION_ROUTES:
                try:
                    await resp.write(poison.error_event(request.path))
                    await resp.write_eof()
                    return resp
                except ConnectionResetError:
                    return resp
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


def died_answer(path: str) -> web.Response:
    return web.Response(
        status=poison.STATUS, body=poison.error_body(path), headers={"Content-Type": "application/json", **poison.NO_RETRY}
    )


def _asks_stream(body: bytes) -> bool:
    try:
        doc = json.loads(body)
    except ValueError:
        return False
    return isinstance(doc, dict) and doc.get("stream") is True


def is_sse(up: aiohttp.ClientResponse) -> bool:
    return up.headers.get("content-type", "").startswith("text/event-stream")


def aborted_empty(raw: bytes) -> bool:
    """An answer the engine ended `abort` with nothing generated (vLLM 0.33 during its drain): a
    completion whose every choice finished `abort` with no text; a Messages answer with a null stop
    reason and no content (vLLM maps `abort` to null); a Responses answer with no output token."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return False
    if isinstance(doc, dict) and doc.get("type") == "message":
        blocks: list = doc["content"] if isinstance(doc.get("content"), list) else []
        said = any(isinstance(b, dict) and (b.get("text") or b.get("thinking") or b.get("type") == "tool_use") for b in blocks)
        return doc.get("stop_reason") is None and not said
    if isinstance(doc, dict) and doc.get("object") == "response":
        usage: dict = doc["usage"] if isinstance(doc.get("usage"), dict) else {}
        return usage.get("output_tokens") == 0
    choices = doc.get("choices") if isinstance(doc, dict) else None
    if not isinstance(choices, list) or not choices:
        return False
    for c in choices:
        msg = c.get("message") or {} if isinstance(c, dict) else {}
        if not isinstance(c, dict) or c.get("finish_reason") != "abort" or c.get("text") or msg.get("content"):
            return False
    return True
