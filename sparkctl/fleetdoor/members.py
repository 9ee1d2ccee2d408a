"""The members as the front door sees them, and the probe that keeps their state current.

A member is `drained` (told so over the admin socket), `failing` (its engine's /health is not 200,
or it refused a connection: until a probe finds it up again), `holding` (its gateway's metrics say
a hold is in place, or it answered a request 503: until a probe finds no hold) or `passing`. Only a
passing member gets new requests.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Optional

import aiohttp

from .metrics import STATES, Metrics
from .settings import MemberSpec

log = logging.getLogger("sparkctl.fleetdoor")
GATEWAY_METRICS = "/gateway/metrics"
HOLDING = "sparkctl_gateway_holding"  # sparkctl/gateway/metrics.py: 1 per cause while it holds


class Member:
    def __init__(self, spec: MemberSpec, metrics: Metrics, on_change) -> None:
        self.name, self.public_url, self.health_url = spec.name, spec.public_url, spec.health_url
        self.m, self._on_change = metrics, on_change
        self.drained = False
        self.failing: Optional[str] = "not probed yet"  # why it is failing, None when it is not
        self.holding: Optional[str] = None  # why it is holding
        self.outstanding = 0
        self.requests = 0
        self.errors = 0
        self.since = time.monotonic()  # when its state last changed
        self.gone = asyncio.Event()  # set when it turns failing: requests still waiting for its answer go elsewhere
        self.idle = asyncio.Event()  # set while nothing is in flight on it (drain waits for it)
        self.idle.set()
        self._publish()

    @property
    def state(self) -> str:
        if self.drained:
            return "drained"
        if self.failing:
            return "failing"
        return "holding" if self.holding else "passing"

    def status(self) -> dict:
        return {
            "state": self.state,
            "outstanding": self.outstanding,
            "requests": self.requests,
            "errors": self.errors,
            "reason": self.failing or self.holding or ("drained at the front door" if self.drained else ""),
            "for_s": round(time.monotonic() - self.since, 1),
            "public_url": self.public_url,
            "health_url": self.health_url,
        }

    # -- state changes ----------------------------------------------------------------------------

    def set(self, *, drained: Optional[bool] = None, failing: object = ..., holding: object = ...) -> None:
        before = self.state
        if drained is not None:
            self.drained = drained
        if failing is not ...:
            if failing and not self.failing:
                self.gone.set()
            elif not failing and self.failing:
                self.gone = asyncio.Event()
            self.failing = failing  # type: ignore[assignment]
        if holding is not ...:
            self.holding = holding  # type: ignore[assignment]
        if self.state != before:
            self.since = time.monotonic()
            log.info("member %s: %s -> %s %s", self.name, before, self.state, self.failing or self.holding or "")
            self._publish()
            self._on_change()

    def _publish(self) -> None:
        for s in STATES:
            self.m.state.labels(self.name, s).set(1 if s == self.state else 0)

    def count(self, n: int) -> None:
        self.outstanding += n
        if n > 0:
            self.requests += 1
            self.m.requests.labels(self.name).inc()
        self.m.outstanding.labels(self.name).set(self.outstanding)
        if self.outstanding:
            self.idle.clear()
        else:
            self.idle.set()

    def error(self, kind: str) -> None:
        self.errors += 1
        self.m.errors.labels(self.name, kind).inc()


async def probe(member: Member, session: aiohttp.ClientSession) -> None:
    """Read the engine's /health and the gateway's hold once; update the member's state."""
    t = aiohttp.ClientTimeout(total=2)
    try:
        async with session.get(member.health_url + "/health", timeout=t) as r:
            failing = None if r.status == 200 else f"its engine's /health answers {r.status}"
    except (aiohttp.ClientError, asyncio.TimeoutError) as e:
        failing = f"its engine's /health: {type(e).__name__}"
    holding = None
    if failing is None:
        try:
            async with session.get(member.public_url + GATEWAY_METRICS, timeout=t) as r:
                if r.status == 200:
                    holding = holding_cause(await r.text())
                elif r.status != 404:  # 404: no gateway in front of this engine, nothing holds
                    holding = f"its gateway's metrics answer {r.status}"
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            failing = f"its public URL: {type(e).__name__}"
    member.set(failing=failing, holding=holding)


def holding_cause(text: str) -> Optional[str]:
    """Why the gateway holds (its `sparkctl_gateway_holding{cause}` samples at 1), None when it does not."""
    from prometheus_client.parser import text_string_to_metric_families

    causes = [
        s.labels.get("cause", "?")
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == HOLDING and s.value > 0
    ]
    return f"its gateway holds ({', '.join(causes)})" if causes else None


async def probe_forever(member: Member, session: aiohttp.ClientSession, interval_s: float) -> None:
    while True:
        started = time.monotonic()
        try:
            await probe(member, session)
        except Exception:  # a probe must never stop: log it, try again next time
            log.exception("probe of %s", member.name)
        await asyncio.sleep(max(0.0, interval_s - (time.monotonic() - started)))
