"""Assemble the gateway: the public listener (pass-through + /gateway/metrics), the admin socket,
one upstream connection pool; run until SIGTERM/SIGINT, then let in-flight requests finish."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import aiohttp
from aiohttp import web
from yarl import URL

from sparkctl.launch.gateway import ENGINE_PATH, METRICS_PATH  # the public /metrics stays the engine's

from . import admin
from .admission import LongContext
from .bounds import Bounds
from .gate import Gate
from .keys import OPEN_PATHS, Keys, unauthorized_body
from .metrics import Metrics
from .proxy import Proxy, forward_headers
from .settings import Settings

log = logging.getLogger("sparkctl.gateway")


LOOPBACK = frozenset({"127.0.0.1", "::1"})


def open_to(request: web.Request) -> bool:
    """What needs no key: /health (the engine's, and sparkctl's view of it), and the gateway's own
    metrics asked from the head itself (sparkctl's hold probe there; root on the head holds the
    admin socket anyway). Prometheus elsewhere sends the key."""
    path = request.path
    return path in OPEN_PATHS or path == ENGINE_PATH + "/health" or (path == METRICS_PATH and request.remote in LOOPBACK)


@web.middleware
async def origin_form(request: web.Request, handler) -> web.StreamResponse:
    """Only a path is a target here (RFC 9112 3.2.1 origin-form): an absolute URL (a client taking
    the gateway for a forward proxy, or a probe) or `*` is a 400, not a 500 and a traceback."""
    if not request.raw_path.startswith("/"):
        body = {
            "error": {
                "message": "The request target must be a path (/v1/...).",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        }
        return web.json_response(body, status=400)
    return await handler(request)


def key_check(keys: Keys, engine_key: str | None):
    """Every request shows a key before anything else is done for it (read, held, queued, counted,
    sent on): a client without one costs a header parse. What goes upstream carries the engine's
    own key in place of the client's."""

    @web.middleware
    async def check(request: web.Request, handler) -> web.StreamResponse:
        if not open_to(request) and not keys.allows(request.headers.get("Authorization")):
            return web.Response(
                status=401,
                body=unauthorized_body(request.path),
                headers={"Content-Type": "application/json", "WWW-Authenticate": "Bearer"},
            )
        if engine_key:  # replaces every Authorization the client sent, whatever its case
            headers = request.headers.copy()  # a case-insensitive multidict of its own
            headers["Authorization"] = f"Bearer {engine_key}"
            request = request.clone(headers=headers)
        return await handler(request)

    return check


def open_files(hold_queue: int) -> int:
    """Raise this process's soft open-file limit to its hard one (no privilege needed): each held
    request is a client socket, and its release an engine socket more; Python starts at the soft
    limit, often 1024. Returns the limit, and says when a full hold would not fit in it."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as e:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, hard, e)
    if soft != resource.RLIM_INFINITY and soft < 2 * hold_queue + 256:
        log.warning(
            "open-file limit %d is below 2 x hold_queue (%d) + 256: a full hold may run out of files (set gateway.open_files)",
            soft,
            hold_queue,
        )
    return soft


async def run(s: Settings) -> None:
    nofile = open_files(s.hold_queue)
    m = Metrics()
    m.info.info({"upstream": s.upstream, "hold_s": f"{s.hold_s:g}", "hold_max_s": f"{s.hold_max_s:g}"})
    # no pool limit by default (the engine's own queue decides); bytes pass through as the engine sent them
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=s.upstream_connections, force_close=False),
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept-Encoding"),
        # sock_connect, not connect: a request waiting for one of upstream_connections is not an engine
        # that refuses (connect counts the wait for a pooled connection); sock_read: a silent engine
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=s.connect_timeout_s, sock_read=s.upstream_idle_s),
    )

    async def probe() -> bool:
        try:
            async with session.get(s.upstream + "/health", timeout=aiohttp.ClientTimeout(total=2)) as r:
                return r.status == 200
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return False

    async def tokenize(path: str, ask: dict) -> int | None:
        """The engine's count of a prompt: /tokenize's `count`, /v1/messages/count_tokens' `input_tokens`."""
        try:
            async with session.post(s.upstream + path, json=ask, timeout=aiohttp.ClientTimeout(total=30)) as r:
                if r.status != 200:
                    return None
                doc = await r.json()
                count = doc.get("count", doc.get("input_tokens"))
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

    async def engine_direct(request: web.Request) -> web.StreamResponse:
        """sparkctl's own checks of the engine (its /health, /metrics, smoke completion), which listens
        on loopback only: sent at once, never held (a hold must not hide the engine's state from
        them), and behind the key like everything else."""
        tail = request.match_info["tail"]
        query = f"?{request.query_string}" if request.query_string else ""
        url = URL(f"{s.upstream}/{tail}{query}", encoded=True)
        body = await request.read()
        try:
            up = await session.request(
                request.method, url, headers=forward_headers(request.headers), data=body, allow_redirects=False
            )
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            return web.json_response({"error": {"message": f"the engine does not answer: {e}", "code": 502}}, status=502)
        try:
            return await proxy._relay(request, up, b"", None)
        finally:
            up.close()

    bounds = Bounds(s.max_body_bytes, s.max_buffered_bytes, s.body_timeout_s, m)
    # the key first: a client without one is turned away before its body is read or counted
    checks = [origin_form, key_check(Keys(list(s.api_keys)), s.engine_api_key), bounds.middleware()]
    public = web.Application(client_max_size=s.max_body_bytes, middlewares=checks)
    public.router.add_get(METRICS_PATH, own_metrics)
    public.router.add_route("*", ENGINE_PATH + "/{tail:.*}", engine_direct)
    public.router.add_route("*", "/{tail:.*}", proxy.handle)
    # handler_cancellation: a client that goes away cancels its request here, and so upstream
    # keepalive_timeout: aiohttp closes a connection that has not begun a request by then, from its
    # start or its last answer, so headers that never end (slowloris) hold a socket that long at most
    pub_runner = web.AppRunner(
        public,
        handler_cancellation=True,
        access_log=None,
        shutdown_timeout=s.shutdown_timeout_s,
        keepalive_timeout=s.header_timeout_s,
    )
    adm_runner = web.AppRunner(admin.app(gate, lc, m, s.upstream, lambda: proxy.in_flight), access_log=None)
    await pub_runner.setup()
    await adm_runner.setup()
    await admin.listen_on_socket(adm_runner, s.admin_socket)  # 0600: only root may hold or release
    await web.TCPSite(pub_runner, s.host, s.port, backlog=1024, reuse_address=True).start()
    log.info(
        "gateway on %s:%d -> %s, admin on %s, hold_s %g, long_context %s, %s",
        s.host,
        s.port,
        s.upstream,
        s.admin_socket,
        s.hold_s,
        f"> {s.long_context_tokens} tokens: {s.long_context_max_concurrent} at once" if lc.enabled else "off",
        f"{len(s.api_keys)} key(s) asked" if s.api_keys else "NO key asked: open to anyone who reaches it",
    )
    log.info(
        "bounds: bodies <= %d bytes, %d bytes of them at once, open files %s", s.max_body_bytes, s.max_buffered_bytes, nofile
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("stopping: in-flight requests have %g s to finish", s.shutdown_timeout_s)
    gate.release()  # a hold ends: what can go on, goes on
    gate.stop()  # what is still held (the engine is down) is answered 503, not cut by the shutdown
    await adm_runner.cleanup()
    await pub_runner.cleanup()
    await session.close()
    try:
        os.unlink(s.admin_socket)
    except OSError:
        pass
