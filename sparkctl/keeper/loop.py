"""`sparkctl keeper run`: the keeper's loop on the head (docs/keeper.md).

Every `keeper.interval_s` it reads the cluster (one round trip per host, over the head's own key):
the containers the recorded config runs, the cluster lock, a reload's journal. When one of them
(the head's or a worker's engine, the drafter) is gone, and stays gone for `keeper.grace_s` while
no sparkctl command holds the lock, it reads why (exit code, the log lines that name the cause)
and recovers through `sparkctl restart`'s own code path (reload.run_reload: facts, plan, the
cluster lock, the front door's hold, the health gate and the first streamed token, the journal,
history), with the cause and the downtime since the crash in the history event. A reboot is the
same case: the containers are gone and the restart places the Engram tables again and starts
everything in order. After `keeper.max_recoveries` recoveries within `keeper.window_s` it gives
up: the front door answers 503 naming the reason, doctor, `status` and the KeeperGaveUp alert
say so, until the cluster serves again (a person's `sparkctl restart`).

Its state is written to the head (state.KEEPER) on every change, for doctor and `status`.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Callable, Optional

from sparkctl import state
from sparkctl.errors import SparkctlError
from sparkctl.inventory.models import Inventory
from sparkctl.keeper.policy import Cause, CrashLoop, Gone, Grace, cause_of, first_cause, gone
from sparkctl.records import KeeperRecord, dump
from sparkctl.reload_outcome import Outcome

if TYPE_CHECKING:
    from sparkctl.session import ClusterSession

READ_WAIT_S = 30.0  # one look at the cluster; a host past it is unreachable this time
HOLD_RETRY_S = 60.0  # after the front door did not take the give-up hold


class Keeper:
    def __init__(self, inv: Inventory, say: Callable[[str], None] = print, clock: Callable[[], float] = time.monotonic):
        self.inv = inv
        self.say = say
        self.clock = clock
        s = inv.keeper
        self.grace = Grace(s.grace_s)
        self.loop = CrashLoop(s.max_recoveries, s.window_s)
        self.head = inv.hosts_with_role("head")[0]
        self.gave_up: Optional[str] = None  # the reason, while given up
        self.hold_sent = -1e9  # when the give-up hold was last sent to the front door
        self.kept: Optional[KeeperRecord] = None  # what the state file holds now (less its time)
        self.last_line = ""
        self.away: set[str] = set()  # hosts seen unreachable while the cluster was down (a reboot)
        self.outage_cause: Optional[Cause] = None  # what took it down, kept across this outage's recoveries
        self.served_at: Optional[float] = None  # when the current recovery's head served again

    # -- the loop -----------------------------------------------------------------------------

    def run(self, stop: threading.Event, once: bool = False) -> None:
        while not stop.is_set():
            t = self.clock()
            try:
                line = self.tick()
            except SparkctlError as exc:  # a look that failed is tried again at the next tick
                line = f"could not look at the cluster: {exc.message}"
            if line != self.last_line:
                self.say(line)
                self.last_line = line
            if once:
                return
            stop.wait(max(0.0, self.inv.keeper.interval_s - (self.clock() - t)))

    def tick(self) -> str:
        """One look, and what follows from it; returns what it saw (logged when it changes)."""
        from sparkctl.session import ClusterSession

        # a fresh session per look: a host that rebooted is a new connection, never a dead one
        with ClusterSession(self.inv) as cluster:
            kinds = {h: {"containers"} for h in self.inv.hosts}
            kinds[self.head] |= {"applied", "journal", "lock"}
            found = cluster.refresh(kinds, wait=READ_WAIT_S)
            if self.head not in found:
                return f"waiting for {self.head}: {cluster.unreachable[self.head].message}"
            hf = found[self.head]
            if hf.applied is None:
                return "nothing to keep: no config is recorded on the head (`sparkctl up` records it)"
            if hf.lock is not None:
                self.grace.reset()  # never fight an operator: their command decides
                return f"not acting: {hf.lock.describe()} holds the cluster lock"
            if hf.journal:
                self.grace.reset()
                return f"not acting: {hf.journal.interrupted()} waits for a person (reload --resume or rollback)"
            expected = [(c.host, c.name) for c in hf.applied.launch.containers]
            away = sorted({h for h, _ in expected if h not in found})
            if away:
                self.away |= set(away)
                self.grace.reset()
                return f"waiting for {', '.join(away)} (unreachable: {cluster.unreachable[away[0]].message})"
            missing = gone(expected, {h: found[h].containers or [] for h in found})
            now = self.clock()
            if not missing:
                self.grace.reset()
                self.away.clear()
                self.outage_cause = None
                if self.gave_up:  # a person brought it back: their fix starts a fresh count
                    self.say(f"serving again after the keeper gave up ({self.gave_up}): watching again")
                    self.gave_up = None
                    self.loop.recoveries.clear()
                self._write(cluster, KeeperRecord(state="watching"))
                return f"watching: {len(expected)} container(s) running"
            names = ", ".join(f"{g.name} on {g.host}" for g in missing)
            if self.gave_up:
                self._hold(cluster)
                return f"gave up ({self.gave_up}): {names} stay down until a person acts"
            if not self.grace.due(True, now):
                return f"{names} gone; acting after {self.inv.keeper.grace_s:g} s of grace unless it comes back"
            down_for = now - (self.grace.since or now)
            # a failed recovery leaves its own containers behind: the outage's first cause stays the cause
            cause = self.outage_cause = self.outage_cause or self._cause(cluster, missing)
            if self.loop.exhausted(now):
                return self._give_up(cluster, cause)
        return self._recover(cause, down_for, missing)

    # -- acting -------------------------------------------------------------------------------

    def _cause(self, cluster: ClusterSession, missing: list[Gone]) -> Optional[Cause]:
        """Why they went: each gone container's exit and log lines (read before the restart removes them)."""
        lost = [g for g in missing if g.host in self.away]
        if lost:  # a host that stopped answering took its containers with it: that is the cause
            g = lost[0]
            return Cause("host lost (rebooted or unreachable)", g.host, g.name, g.container.exit_code if g.container else None)
        logs = cluster.refresh({"logs"}, hosts=sorted({g.host for g in missing if g.container}), wait=READ_WAIT_S)
        return first_cause(
            [cause_of(g, logs[g.host].logs.get(g.container.id) if g.container and g.host in logs else None) for g in missing]
        )

    def _recover(self, cause: Optional[Cause], down_for: float, missing: list[Gone]) -> str:
        from sparkctl.lock import LockHeld
        from sparkctl.reload import ReloadInterrupted, run_reload

        t0 = self.clock()
        self.served_at = None
        self.loop.recovered_at(t0)
        why = cause.summary() if cause else "gone"
        self.say(
            f"recovering: {why}; `sparkctl restart`'s path, recovery {len(self.loop.recoveries)} of at most "
            f"{self.loop.limit} in {self.loop.window:g} s"
        )

        def noted(report) -> dict:
            return {
                "trigger": "keeper",
                "cause": cause.record() if cause else None,
                # until the head served again (its runtime step), not the throughput and record after it
                "downtime_seconds": round(down_for + ((self.served_at or self.clock()) - t0), 2),
                "gone": [g.name for g in missing],
            }

        try:
            report = run_reload(
                "restart", self.inv, None, confirm=lambda plan: True, say=self.say, noted=noted, on_result=self._result
            )
        except (LockHeld, ReloadInterrupted) as exc:  # a person got there first: theirs to finish
            self.loop.recoveries.pop()
            return f"not acting: {exc.message}"
        except SparkctlError as exc:  # nothing was changed: not a recovery, tried again at the next look
            self.loop.recoveries.pop()
            return f"recovery failed before it changed anything: {exc.message}"
        if report.outcome == Outcome.NOTHING_STOPPED:
            self.loop.recoveries.pop()
        if report.failed:
            return f"recovery {report.outcome}: {report.reason}"
        return f"recovered ({why}) in {self.clock() - t0:.1f} s, {round(down_for + self.clock() - t0, 1)} s down"

    def _result(self, r) -> None:
        """The recovery's steps in the keeper's log (the unit's journal): what changed or failed."""
        if (r.step, r.host, r.status) == ("runtime", self.head, "changed"):  # it serves: the gate passed
            self.served_at = self.clock()
        if r.status in ("changed", "failed"):
            self.say(f"  {r.step} on {r.host}: {r.status}: {r.message}")

    def _give_up(self, cluster, cause: Optional[Cause]) -> str:
        why = cause.summary() if cause else "the runtime keeps going away"
        self.gave_up = (
            f"{len(self.loop.recoveries)} recoveries within {self.loop.window:g} s (keeper.max_recoveries); last: {why}"
        )
        self.say(f"giving up: {self.gave_up}")
        self._write(
            cluster,
            KeeperRecord(state="gave_up", reason=self.gave_up, cause=cause.record() if cause else None, since=state.now()),
        )
        self._hold(cluster)
        return f"gave up ({self.gave_up})"

    def _hold(self, cluster) -> None:
        """The front door answers 503 naming the reason (a hold expected past hold_s), renewed before its ttl ends."""
        g = self.inv.gateway
        if not g.enabled or self.clock() - self.hold_sent < g.hold_max_s / 2:
            return
        from sparkctl.runtime.gateway_admin import GatewayAdmin

        try:
            GatewayAdmin(cluster[self.head]).hold(g.hold_max_s, g.hold_max_s, f"keeper gave up: {self.gave_up}")
            self.hold_sent = self.clock()
        except SparkctlError as exc:  # tried again in a minute (the front door may be restarting)
            self.hold_sent = self.clock() - g.hold_max_s / 2 + HOLD_RETRY_S
            self.say(f"could not tell the front door: {exc.message}")

    def _write(self, cluster, record: KeeperRecord) -> None:
        record = record.model_copy(
            update={
                "recoveries_in_window": len(self.loop.recoveries),
                "max_recoveries": self.loop.limit,
                "window_s": self.loop.window,
            }
        )
        if record == self.kept:
            return
        state.write_json(cluster[self.head], state.KEEPER, dump(record.model_copy(update={"at": state.now()})))
        self.kept = record
