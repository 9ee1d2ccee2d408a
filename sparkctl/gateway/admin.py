"""The admin interface, on a unix socket only (never a TCP port): sparkctl reaches it over its SSH
session to the head (`python -m sparkctl.gateway.ctl` inside the gateway's container).

    POST /hold     {"expected_s": 12, "ttl_s": 900, "reason": "reload"}  (every field optional)
    POST /release
    GET  /status
    GET  /metrics
"""

from __future__ import annotations

import json
import math
import os
import stat

from aiohttp import web

from .admission import LongContext
from .gate import Gate
from .metrics import Metrics


def _number(body: dict, key: str) -> float | None:
    v = body.get(key)
    if v is None:
        return None
    # NaN is not < 0 and Infinity is: neither is a number of seconds (a NaN ttl never ends)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise web.HTTPBadRequest(
            text=json.dumps({"error": f"{key} must be a finite number >= 0 (seconds)"}), content_type="application/json"
        )
    return float(v)


def app(gate: Gate, long_context: LongContext, metrics: Metrics, upstream: str, in_flight) -> web.Application:
    def status() -> dict:
        return {**gate.status(), "upstream": upstream, "in_flight": in_flight(), "long_context": long_context.status()}

    async def hold(request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw.strip() else {}
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise web.HTTPBadRequest(
                text=json.dumps({"error": "the body must be a JSON object"}), content_type="application/json"
            )
        gate.start_hold(str(body.get("reason") or "admin"), _number(body, "expected_s"), _number(body, "ttl_s"))
        return web.json_response(status())

    async def release(_request: web.Request) -> web.Response:
        n = gate.release()
        return web.json_response({**status(), "released": n})

    async def get_status(_request: web.Request) -> web.Response:
        return web.json_response(status())

    async def get_metrics(_request: web.Request) -> web.Response:
        body, ctype = metrics.render()
        return web.Response(body=body, headers={"Content-Type": ctype})

    a = web.Application()
    a.router.add_post("/hold", hold)
    a.router.add_post("/release", release)
    a.router.add_get("/status", get_status)
    a.router.add_get("/metrics", get_metrics)
    return a


async def listen_on_socket(runner: web.AppRunner, path: str) -> None:
    """Serve `runner` on the unix socket `path`: its directory 0700, the socket 0600 (only its owner,
    root, may act), replacing a socket a killed process left behind."""
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    if os.path.exists(path) and stat.S_ISSOCK(os.stat(path).st_mode):
        os.unlink(path)
    old = os.umask(0o177)
    try:
        await web.UnixSite(runner, path).start()
    finally:
        os.umask(old)
