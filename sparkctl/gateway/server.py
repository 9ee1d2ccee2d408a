"""Assemble the gateway: the public listener (pass-through + /gateway/metrics), the admin socket,
one upstream connection pool; run until SIGTERM/SIGINT, then let in-flight requests finish."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import aiohttp
from aiohttp import web

from . import admin
from .admission import LongContext
from .gate import Gate
from .metrics import Metrics
from .proxy import Proxy
from .settings import Settings

log = logging.getLogger("sparkctl.gateway")
METRICS_PATH = "/gateway/metrics"  # the public /metrics stays the engine's


async def run(s: Settings) -> None:
    m = Metrics()
    m.info.info({"upstream": s.upstream, "hold_s": f"{s.hold_s:g}", "hold_max_s": f"{s.hold_max_s:g}"})
    # no pool limit by default (the engine's own queue decides); bytes pass through as the engine sent them
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=s.upstream_connections, force_close=False),
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept-Encoding"),
        timeout=aiohttp.ClientTimeout(total=None, connect=s.connect_timeout_s),
    )

    async def probe() -> bool:
        try:
            async with session.get(s.upstream + "/health", timeout=aiohttp.ClientTimeout(total=2)) as r:
                return r.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return False

    async def tokenize(ask: dict) -> int | None:
        try:
            async with session.post(s.upstream + "/tokenize", json=ask, timeout=aiohttp.ClientTimeout(total=30)) as r:
                if r.status != 200:
                    return None
                count = (await r.json()).get("count")
                return count if isinstance(count, int) else None
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
            return None

    gate = Gate(s.hold_s, s.hold_max_s, s.hold_queue, s.probe_interval_s, probe, m)
    lc = LongContext(
        s.long_context_tokens, s.long_context_max_concurrent, s.long_context_queue, s.long_context_wait_s, tokenize, m
    )
    proxy = Proxy(s.upstream, session, gate, lc, m)

    async def own_metrics(_request: web.Request) -> web.Response:
        body, ctype = m.render()
        return web.Response(body=body, headers={"Content-Type": ctype})

    public = web.Application(client_max_size=s.max_body_bytes)
    public.router.add_get(METRICS_PATH, own_metrics)
    public.router.add_route("*", "/{tail:.*}", proxy.handle)
    # handler_cancellation: a client that goes away cancels its request here, and so upstream
    pub_runner = web.AppRunner(public, handler_cancellation=True, access_log=None, shutdown_timeout=s.shutdown_timeout_s)
    adm_runner = web.AppRunner(admin.app(gate, lc, m, s.upstream, lambda: proxy.in_flight), access_log=None)
    await pub_runner.setup()
    await adm_runner.setup()
    await admin.listen_on_socket(adm_runner, s.admin_socket)  # 0600: only root may hold or release
    await web.TCPSite(pub_runner, s.host, s.port, backlog=1024, reuse_address=True).start()
    log.info(
        "gateway on %s:%d -> %s, admin on %s, hold_s %g, long_context %s",
        s.host,
        s.port,
        s.upstream,
        s.admin_socket,
        s.hold_s,
        f"> {s.long_context_tokens} tokens: {s.long_context_max_concurrent} at once" if lc.enabled else "off",
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("stopping: in-flight requests have %g s to finish", s.shutdown_timeout_s)
    gate.release()
    await adm_runner.cleanup()
    await pub_runner.cleanup()
    await session.close()
    try:
        os.unlink(s.admin_socket)
    except OSError:
        pass
