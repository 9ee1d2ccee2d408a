"""Pass-through to the chosen member: the same method, path, query, headers and body; the member's
status, headers and body back, streamed chunk by chunk as they arrive (SSE unbuffered).

A request that never reached a member (refused or reset before any answer), that a member refused
with 503, or that was waiting for the answer of a member that turned failing, goes to another
member. An answer that breaks off midway cannot be replayed: the client's connection is closed
midway too. With no member eligible a request waits up to hold_s for one, then gets 503.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Optional

import aiohttp
from aiohttp import web
from yarl import URL

from sparkctl.gateway.proxy import NOT_SENT, forward_headers
from sparkctl.gateway.rejection import Rejected

from .members import Member
from .metrics import CONNECT, CUT, REFUSED, RESCUED, Metrics
from .routing import affinity_key, choose

log = logging.getLogger("sparkctl.fleetdoor")


class Door:
    """The members and the choice among them; waiters learn of every state change."""

    def __init__(self, members: list[Member], metrics: Metrics, hold_s: float, affinity_chars: int, affinity_slack: int):
        self.members = {m.name: m for m in members}
        self.m, self.hold_s, self.chars, self.slack = metrics, hold_s, affinity_chars, affinity_slack
        self._changed = asyncio.Event()

    def changed(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()
        self.m.eligible.set(len(self.eligible()))

    def eligible(self) -> list[Member]:
        return [m for m in self.members.values() if m.state == "passing"]

    async def pick(self, key: Optional[str], deadline: float) -> Member:
        while True:
            member, how = choose(self.eligible(), key, self.slack)
            if member is not None:
                self.m.routed.labels(how).inc()
                return member  # type: ignore[return-value]
            left = deadline - time.monotonic()
            if left <= 0:
                states = ", ".join(f"{m.name} {m.state}" for m in self.members.values())
                raise Rejected(
                    503,
                    "no_member",
                    f"No member of the fleet takes requests now ({states}); retry after Retry-After seconds.",
                    self.hold_s,
                )
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except asyncio.TimeoutError:
                pass


class Proxy:
    def __init__(self, door: Door, session: aiohttp.ClientSession, metrics: Metrics):
        self.door, self.session, self.m = door, session, metrics

    async def handle(self, request: web.Request) -> web.StreamResponse:
        arrival = time.monotonic()
        self.m.received.inc()
        body = await request.read()
        key = affinity_key(request.path, body, self.door.chars)
        headers = forward_headers(request.headers)
        while True:
            try:
                member = await self.door.pick(key, arrival + self.door.hold_s)
            except Rejected as r:
                self.m.rejected.inc()
                return web.Response(status=r.status, body=r.body(), headers=r.headers())
            member.count(+1)
            try:
                up = await self._send(member, request, headers, body)
                if up is None:
                    continue
                try:
                    if up.status == 503:  # its gateway rejects (a hold beyond its bound) or its engine is paused
                        member.error(REFUSED)
                        member.set(holding=f"it answered 503 ({up.headers.get('Retry-After', 'no')} Retry-After)")
                        continue
                    return await self._relay(member, request, up)
                finally:
                    up.close()
            finally:
                member.count(-1)

    async def _send(self, member: Member, request: web.Request, headers: dict, body: bytes) -> Optional[aiohttp.ClientResponse]:
        """The member's response (its status and headers), or None when it did not take the request."""
        url = URL(member.public_url + request.raw_path, encoded=True)
        gone = member.gone
        send = asyncio.ensure_future(self.session.request(request.method, url, headers=headers, data=body, allow_redirects=False))
        watch = asyncio.ensure_future(gone.wait())
        try:
            await asyncio.wait({send, watch}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:  # the client went away: the member's request goes too
            send.cancel()
            raise
        finally:
            watch.cancel()
        if not send.done():  # it turned failing before it answered: what it had is lost, send it elsewhere
            send.cancel()
            member.error(RESCUED)
            log.info("member %s failed before answering %s %s: sent to another member", member.name, request.method, request.path)
            return None
        try:
            return send.result()
        except NOT_SENT as e:
            member.error(CONNECT)
            member.set(failing=f"{type(e).__name__}: {e}")
            return None

    async def _relay(self, member: Member, request: web.Request, up: aiohttp.ClientResponse) -> web.StreamResponse:
        resp = web.StreamResponse(status=up.status, reason=up.reason, headers=forward_headers(up.headers))
        if up.content_length is not None and "chunked" not in up.headers.get("transfer-encoding", ""):
            resp.content_length = up.content_length
        await resp.prepare(request)
        try:
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
        except (aiohttp.ClientPayloadError, aiohttp.ClientOSError, aiohttp.ServerDisconnectedError) as e:
            # the member broke off mid-answer: the client's connection is closed too, never ended cleanly
            member.error(CUT)
            log.warning("member %s cut %s %s mid-answer: %s", member.name, request.method, request.path, e)
            if request.transport is not None:
                request.transport.close()
            return resp
        except ConnectionResetError:
            return resp  # the client went away: closing the member's response makes its engine abort it
        await resp.write_eof()
        return resp
