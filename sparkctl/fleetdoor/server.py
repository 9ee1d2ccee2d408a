"""Assemble the front door: the public listener (pass-through + /fleetdoor/metrics), the admin
socket, one probe per member, one connection pool; run until SIGTERM/SIGINT, then let in-flight
requests finish."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import aiohttp
from aiohttp import web

from sparkctl.gateway.admin import listen_on_socket

from . import admin
from .members import Member, probe, probe_forever
from .metrics import Metrics
from .placement import METRICS_PATH
from .proxy import Door, Proxy
from .settings import Settings

log = logging.getLogger("sparkctl.fleetdoor")


async def run(s: Settings) -> None:
    m = Metrics([spec.name for spec in s.members])
    m.info.info({"members": " ".join(f"{x.name}={x.public_url}" for x in s.members), "hold_s": f"{s.hold_s:g}"})
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept-Encoding"),
        timeout=aiohttp.ClientTimeout(total=None, connect=s.connect_timeout_s),
    )
    door: Door
    members = [Member(spec, m, lambda: door.changed()) for spec in s.members]
    door = Door(members, m, s.hold_s, s.affinity_chars, s.affinity_slack)
    await asyncio.gather(*(probe(x, session) for x in members))  # serve knowing each member's state
    probes = [asyncio.ensure_future(probe_forever(x, session, s.probe_interval_s)) for x in members]
    proxy = Proxy(door, session, m)

    async def own_metrics(_request: web.Request) -> web.Response:
        body, ctype = m.render()
        return web.Response(body=body, headers={"Content-Type": ctype})

    public = web.Application(client_max_size=s.max_body_bytes)
    public.router.add_get(METRICS_PATH, own_metrics)
    public.router.add_route("*", "/{tail:.*}", proxy.handle)
    pub_runner = web.AppRunner(public, handler_cancellation=True, access_log=None, shutdown_timeout=s.shutdown_timeout_s)
    adm_runner = web.AppRunner(admin.app(door, m), access_log=None)
    await pub_runner.setup()
    await adm_runner.setup()
    await listen_on_socket(adm_runner, s.admin_socket)  # 0600: only root may drain
    await web.TCPSite(pub_runner, s.host, s.port, backlog=1024, reuse_address=True).start()
    log.info(
        "fleet door on %s:%d -> %s; admin on %s",
        s.host,
        s.port,
        ", ".join(f"{x.name} ({x.state})" for x in members),
        s.admin_socket,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("stopping: in-flight requests have %g s to finish", s.shutdown_timeout_s)
    await adm_runner.cleanup()
    await pub_runner.cleanup()
    for p in probes:
        p.cancel()
    await session.close()
    try:
        os.unlink(s.admin_socket)
    except OSError:
        pass
