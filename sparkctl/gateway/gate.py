"""Whether a request may go to the engine now, and the queue of those that may not yet.

The gate is closed while sparkctl holds it (admin `hold`, before the engine gets SIGTERM), while
the upstream refuses connections or says it is dead (it died, or is starting), and while it drains
without sparkctl having said so (a `docker restart`, a reboot: vLLM 0.33 answers each new request 200
with an empty `abort` and its /health stays 200 until it exits). A draining engine never serves again
(its EngineCore rejects every new request until it exits), so one held request at a time is let
through as a trial every probe interval: the first one served opens the gate, and an engine that
stops answering /health turns the drain into "down" (when /health answers again, a trial goes first
then too). Requests wait in arrival order and are
let through in that order when it opens. A request never waits past its arrival + hold_s: it is
answered 503 with Retry-After instead, at once when the hold's expected end is already beyond that.
A hold nobody releases ends by itself at hold_max_s.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import logging
import time
from dataclasses import dataclass
from typing import Awaitable, Callable

from .metrics import GATEWAY_STOPPING, HELD_TOO_LONG, HOLD_QUEUE_FULL, HOLD_TOO_LONG, Metrics
from .rejection import Rejected

log = logging.getLogger("sparkctl.gateway")


@dataclass
class Hold:
    reason: str
    since: float
    expected_end: float | None  # when sparkctl expects the new engine to serve
    expires_at: float


class Gate:
    def __init__(
        self,
        hold_s: float,
        hold_max_s: float,
        hold_queue: int,
        probe_interval_s: float,
        probe: Callable[[], Awaitable[bool]],
        metrics: Metrics,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.hold_s, self.hold_max_s, self.hold_queue = hold_s, hold_max_s, hold_queue
        self.probe_interval_s, self._probe = probe_interval_s, probe
        self.m, self.clock = metrics, clock
        self.hold: Hold | None = None
        self.stopping = False  # SIGTERM: whatever is still held is answered, not left to the shutdown
        self.down_since: float | None = None  # the upstream refused a connection, and has not answered /health since
        self.draining_since: float | None = None  # it aborted a request empty outside a hold, and has served none since
        self._trial = False  # while draining: one held request may go as a trial
        # an unannounced drain was seen and no trial served since: an engine back on /health is tried
        # with one request first (a /health slow to answer may have taken the same draining engine for down)
        self._drained = False
        self.last_expired: float | None = None
        self.epoch = 0  # counts the times the gate closed: a request compares it before and after it went upstream
        self._waiters: list[tuple[float, int, asyncio.Future]] = []  # sorted by (arrival, seq)
        self._seq = itertools.count()
        self._expiry: asyncio.TimerHandle | None = None
        self._prober: asyncio.Task | None = None
        # read at each scrape: the hold's age and what is left of it, as /status says them
        metrics.hold_age.set_function(lambda: self.clock() - self.hold.since if self.hold else 0.0)
        metrics.hold_expires_in.set_function(lambda: max(0.0, self.hold.expires_at - self.clock()) if self.hold else 0.0)
        metrics.hold_overrun.set_function(
            lambda: max(0.0, self.clock() - self.hold.expected_end) if self.hold and self.hold.expected_end is not None else 0.0
        )
        metrics.hold_expired_ago.set_function(lambda: self.clock() - self.last_expired if self.last_expired is not None else -1.0)
        metrics.upstream_down_for.set_function(lambda: self.clock() - self.down_since if self.down_since is not None else 0.0)

    @property
    def closed(self) -> bool:
        return self.hold is not None or self.down_since is not None or self.draining_since is not None

    def _take_trial(self) -> bool:
        """While the engine only drains (no hold, not down): one request goes, to see whether it serves."""
        if self._trial and self.hold is None and self.down_since is None and self.draining_since is not None:
            self._trial = False
            return True
        return False

    # ---- requests ----
    async def wait(self, arrival: float) -> None:
        """Return when the request may go upstream; raise Rejected when it may not within its hold_s."""
        waited_from = None
        try:
            while self.closed and not self._take_trial():
                now = self.clock()
                if self.stopping:
                    raise Rejected(
                        503,
                        GATEWAY_STOPPING,
                        "The gateway is restarting; retry after Retry-After seconds.",
                        self._retry_after(now),
                    )
                left = arrival + self.hold_s - now
                # its own budget first: a hold that overran expects "0 s" more, which is not "beyond"
                if left <= 0:
                    raise Rejected(
                        503,
                        HELD_TOO_LONG,
                        f"The server did not come back within {self.hold_s:g} s; retry after Retry-After seconds.",
                        self._retry_after(now),
                    )
                expected = self._expected_remaining(now)
                if expected is not None and expected > left:
                    # the hold will outlast this request's budget: say so now, not at its end
                    # (a request that has waited may have less than hold_s left: say which bound it is)
                    bound = (
                        f"the gateway's hold of {self.hold_s:g} s"
                        if expected > self.hold_s
                        else (f"the {max(left, 0):.0f} s this request may still be held (hold_s {self.hold_s:g} s)")
                    )
                    # a hold whose reason explains itself ("WHO: WHY", the keeper's "keeper gave up: ...")
                    # is told to clients as it is
                    said = (
                        f"The server is down: {self.hold.reason}"
                        if self.hold is not None and ": " in self.hold.reason
                        else f"The server is restarting (expected back in {expected:.0f} s, beyond {bound})"
                    )
                    raise Rejected(503, HOLD_TOO_LONG, f"{said}; retry after Retry-After seconds.", expected)
                if len(self._waiters) >= self.hold_queue:
                    raise Rejected(
                        503,
                        HOLD_QUEUE_FULL,
                        f"{self.hold_queue} requests are held already; retry after Retry-After seconds.",
                        self._retry_after(now),
                    )
                if waited_from is None:
                    waited_from = now
                fut = asyncio.get_running_loop().create_future()
                entry = (arrival, next(self._seq), fut)
                bisect.insort(self._waiters, entry)
                self.m.held.set(len(self._waiters))
                try:
                    await asyncio.wait_for(asyncio.shield(fut), timeout=left)
                except asyncio.TimeoutError:
                    pass  # the loop answers it
                finally:
                    if entry in self._waiters:
                        self._waiters.remove(entry)
                    self.m.held.set(len(self._waiters))
        except Rejected:
            if waited_from is not None:
                self.m.hold_seconds.labels("rejected").observe(self.clock() - waited_from)
            raise
        except asyncio.CancelledError:  # the client went away while held
            if waited_from is not None:
                self.m.hold_seconds.labels("gone").observe(self.clock() - waited_from)
            raise
        if waited_from is not None:
            self.m.hold_seconds.labels("sent").observe(self.clock() - waited_from)

    def _expected_remaining(self, now: float) -> float | None:
        if self.hold is None or self.hold.expected_end is None:
            return None
        return max(0.0, self.hold.expected_end - now)

    def _retry_after(self, now: float) -> float:
        expected = self._expected_remaining(now)
        return expected if expected else self.hold_s

    def _wake(self) -> None:
        """Every waiter looks again, in arrival order (futures' callbacks run in the order they are set)."""
        waiters, self._waiters = self._waiters, []
        for _, _, fut in waiters:
            if not fut.done():
                fut.set_result(None)
        self.m.held.set(0)

    # ---- admin ----
    def start_hold(self, reason: str = "", expected_s: float | None = None, ttl_s: float | None = None) -> None:
        now = self.clock()
        ttl = min(ttl_s or self.hold_max_s, self.hold_max_s)
        if self.hold is None:
            self.epoch += 1
        since = self.hold.since if self.hold else now  # a hold renewed (rollback) keeps its start
        if self.hold is not None:
            self.m.hold_info.remove(self.hold.reason)
        self.hold = Hold(reason or "admin", since, now + expected_s if expected_s is not None else None, now + ttl)
        self.m.hold_info.labels(self.hold.reason).set(1)
        if self._expiry:
            self._expiry.cancel()
        self._expiry = asyncio.get_running_loop().call_later(ttl, self._expire)
        self.m.holding.labels("admin").set(1)
        log.info(
            "hold: %s (expected %s, ends by itself in %.0f s)",
            self.hold.reason,
            f"{expected_s:g} s" if expected_s is not None else "unknown",
            ttl,
        )
        self._wake()  # waiters re-check against the new expectation

    def stop(self) -> None:
        """The gateway stops (SIGTERM): what the gate still holds is answered 503 with Retry-After
        at once; what it lets through (a released hold, an engine that serves) goes on."""
        self.stopping = True
        self._wake()

    def release(self) -> int:
        n = len(self._waiters)
        if self.hold:
            log.info("release: %d held request(s) go on, in arrival order", n)
        self._end_hold()
        return n

    def _expire(self) -> None:
        if self.hold is None:
            return
        log.warning(
            "hold %r expired after %.0f s without a release (did sparkctl die mid-change?)",
            self.hold.reason,
            self.clock() - self.hold.since,
        )
        self.last_expired = self.clock()
        self.m.holds_expired.inc()
        self._end_hold()

    def _end_hold(self) -> None:
        if self.hold is not None:
            self.m.hold_info.remove(self.hold.reason)
        self.hold = None
        if self._expiry:
            self._expiry.cancel()
            self._expiry = None
        self.m.holding.labels("admin").set(0)
        self._wake()

    # ---- the upstream ----
    def upstream_down(self, error: str) -> None:
        """A connection to the engine failed before the request reached it: hold until /health answers."""
        if self.draining_since is not None:
            self._end_draining()  # the drain is over: the engine is gone (the gate stays closed)
            self.down_since = self.clock()
            self.m.holding.labels("upstream_down").set(1)
            log.warning("upstream down after draining (%s): holding requests until its /health answers 200", error)
        if self.down_since is None:
            self.epoch += 1
            self.down_since = self.clock()
            self.m.holding.labels("upstream_down").set(1)
            log.warning("upstream down (%s): holding requests until its /health answers 200", error)
        if self._prober is None or self._prober.done():
            self._prober = asyncio.get_running_loop().create_task(self._probe_until_up())

    def upstream_draining(self, error: str) -> None:
        """The engine ended a request empty (`abort`) with no hold on: it is going away. Hold until a
        trial request is served, or until it is down and answers /health again."""
        if self.down_since is not None or self.draining_since is not None:
            return
        self.epoch += 1
        self.draining_since = self.clock()
        self._drained = True
        self.m.holding.labels("upstream_draining").set(1)
        log.warning("upstream draining (%s) with no hold from sparkctl: holding requests until it serves again", error)
        if self._prober is None or self._prober.done():
            self._prober = asyncio.get_running_loop().create_task(self._probe_until_up())

    def upstream_serving(self) -> None:
        """A request was served: a drain the gate was holding for is over (the engine was not going away)."""
        if self.draining_since is None:
            return
        self._drained = False
        log.info("upstream serving again after %.1f s of draining", self.clock() - self.draining_since)
        self._end_draining()
        self._wake()

    def _end_draining(self) -> None:
        self.draining_since = None
        self._trial = False
        self.m.holding.labels("upstream_draining").set(0)

    async def probe(self) -> bool:
        """Whether the engine answers /health 200 now."""
        return await self._probe()

    async def _probe_until_up(self) -> None:
        while self.down_since is not None or self.draining_since is not None:
            await asyncio.sleep(self.probe_interval_s)
            healthy = await self._probe()
            if self.draining_since is not None and self.down_since is None:
                if healthy:
                    self._trial = True  # still draining, or serving again: one held request finds out
                    self._wake()
                    continue
                # the drain ended the way drains end: the engine went away
                log.warning("upstream down after %.1f s of draining", self.clock() - self.draining_since)
                self._end_draining()
                self.down_since = self.clock()
                self.m.holding.labels("upstream_down").set(1)
                continue
            if self.down_since is not None and healthy:
                log.info("upstream up again after %.1f s", self.clock() - self.down_since)
                self.down_since = None
                self.m.holding.labels("upstream_down").set(0)
                if self._drained:  # after a drain: one trial request first, the gate opens when it is served
                    self.draining_since = self.clock()
                    self.m.holding.labels("upstream_draining").set(1)
                    self._trial = True
                self._wake()

    def status(self) -> dict:
        now = self.clock()
        h = self.hold
        return {
            "state": "holding" if self.closed else "passing",
            "hold": None
            if h is None
            else {
                "reason": h.reason,
                "held_for_s": round(now - h.since, 3),
                "expected_remaining_s": None if h.expected_end is None else round(max(0.0, h.expected_end - now), 3),
                "expires_in_s": round(h.expires_at - now, 3),
            },
            "upstream_down_for_s": None if self.down_since is None else round(now - self.down_since, 3),
            "upstream_draining_for_s": None if self.draining_since is None else round(now - self.draining_since, 3),
            "held_requests": len(self._waiters),
            "last_hold_expired_s_ago": None if self.last_expired is None else round(now - self.last_expired, 3),
            "hold_s": self.hold_s,
            "hold_max_s": self.hold_max_s,
        }
