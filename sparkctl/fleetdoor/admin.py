"""The admin interface, on a unix socket only (never a TCP port): sparkctl reaches it over SSH
(`python -m sparkctl.fleetdoor.ctl` inside the front door's container).

    POST /drain    {"member": NAME, "wait_s": 600}  new requests go to the others; answers once NAME
                   has nothing in flight at the door (409 naming how many are, after wait_s)
    POST /undrain  {"member": NAME}
    GET  /status
    GET  /metrics
"""

from __future__ import annotations

import asyncio
import json
import time

from aiohttp import web

from .metrics import Metrics
from .proxy import Door


def _error(cls, message: str, **extra):
    return cls(text=json.dumps({"error": message, **extra}), content_type="application/json")


def app(door: Door, metrics: Metrics) -> web.Application:
    def status() -> dict:
        members = {name: m.status() for name, m in door.members.items()}
        return {
            "members": members,
            "eligible": [m.name for m in door.eligible()],
            "outstanding": sum(m.outstanding for m in door.members.values()),
        }

    async def body_of(request: web.Request) -> dict:
        raw = await request.read()
        try:
            body = json.loads(raw) if raw.strip() else {}
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise _error(web.HTTPBadRequest, "the body must be a JSON object")
        return body

    def member_of(body: dict):
        name = body.get("member")
        if name not in door.members:
            raise _error(web.HTTPNotFound, f"no member {name!r}; members: {', '.join(door.members)}")
        return door.members[name]

    async def drain(request: web.Request) -> web.Response:
        body = await body_of(request)
        m = member_of(body)
        wait_s = body.get("wait_s", 600)
        if isinstance(wait_s, bool) or not isinstance(wait_s, (int, float)) or wait_s < 0:
            raise _error(web.HTTPBadRequest, "wait_s must be a number >= 0 (seconds)")
        m.set(drained=True)
        t0 = time.monotonic()
        try:
            await asyncio.wait_for(m.idle.wait(), wait_s)
        except asyncio.TimeoutError:
            raise _error(
                web.HTTPConflict,
                f"member {m.name} is drained but {m.outstanding} request(s) are still in flight on it after {wait_s:g} s",
                in_flight=m.outstanding,
                **status(),
            ) from None
        return web.json_response({**status(), "drained": m.name, "waited_s": round(time.monotonic() - t0, 3)})

    async def undrain(request: web.Request) -> web.Response:
        m = member_of(await body_of(request))
        m.set(drained=False)
        return web.json_response({**status(), "undrained": m.name})

    async def get_status(_request: web.Request) -> web.Response:
        return web.json_response(status())

    async def get_metrics(_request: web.Request) -> web.Response:
        body, ctype = metrics.render()
        return web.Response(body=body, headers={"Content-Type": ctype})

    a = web.Application()
    a.router.add_post("/drain", drain)
    a.router.add_post("/undrain", undrain)
    a.router.add_get("/status", get_status)
    a.router.add_get("/metrics", get_metrics)
    return a
