"""What the keeper decides, from facts alone (no host, no clock of its own): which of the cluster's
containers are gone, why (the cause history records), when the grace period is over, and when
recoveries have become a crash loop it must stop.

The keeper's loop (keeper/loop.py) reads the facts, asks these, and acts through `sparkctl
restart`'s own code path (sparkctl/reload.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Optional

from sparkctl.records import CauseRecord

if TYPE_CHECKING:
    from sparkctl.facts.docker import ContainerFact
    from sparkctl.facts.logs import LogFacts

# what the log lines name, most causal first (facts/logs.py LogFacts fields -> the words history shows)
LOG_CAUSES = (
    ("device_assert", "device-side assert"),
    ("oom", "OOM"),
    ("peer_lost", "NCCL error"),
    ("worker_died", "worker lost"),
    ("engine_fatal", "engine fatal error"),
)
LINES_KEPT = 3  # log lines of the cause kept in history (each capped)
LINE_CHARS = 300


@dataclass(frozen=True)
class Gone:
    """A container the recorded config runs that does not run now."""

    host: str
    name: str
    container: Optional[ContainerFact]  # None: no such container at all (removed, or a host that rebooted)


@dataclass(frozen=True)
class Cause:
    """Why a container went, in the words on-call reads: what the log names, else how it ended."""

    # device-side assert | OOM | NCCL error | worker lost | engine fatal error | host lost | killed | exited | removed
    kind: str
    host: str
    container: str
    exit_code: Optional[int] = None
    lines: tuple[str, ...] = ()

    def summary(self) -> str:
        code = f", exit {self.exit_code}" if self.exit_code is not None else ""
        return f"{self.container} on {self.host}: {self.kind}{code}"

    def record(self) -> CauseRecord:
        """As the keeper's state and the recovery's event keep it."""
        return CauseRecord(
            kind=self.kind, host=self.host, container=self.container, exit_code=self.exit_code, lines=list(self.lines)
        )


def gone(expected: Iterable[tuple[str, str]], containers: dict[str, list[ContainerFact]]) -> list[Gone]:
    """The expected (host, container name) pairs not running, from each host's `containers` fact."""
    out = []
    for host, name in expected:
        c = next((c for c in containers.get(host, []) if c.name == name), None)
        if c is None or not c.running:
            out.append(Gone(host, name, c))
    return out


def cause_of(g: Gone, logs: Optional[LogFacts]) -> Cause:
    """The cause of one container's end: the first log kind that names one (its lines kept), else
    its exit: 137 without the OOM killer is a SIGKILL (`docker kill`, or a stop past its timeout)."""
    c = g.container
    if c is None:
        return Cause("removed", g.host, g.name)
    code = c.exit_code
    if logs is not None:
        for kind, words in LOG_CAUSES:
            lines = getattr(logs, kind)
            if lines:
                return Cause(words, g.host, g.name, code, tuple(ln[:LINE_CHARS] for ln in lines[:LINES_KEPT]))
    if c.oom_killed:
        return Cause("OOM", g.host, g.name, code, (c.error[:LINE_CHARS],) if c.error else ())
    if code == 137:
        return Cause("killed", g.host, g.name, code)
    return Cause("exited", g.host, g.name, code, (c.error[:LINE_CHARS],) if c.error else ())


# what an engine logs when another container of the group ended under it (the worker's rank, the
# drafter, the collective's peer): an echo, so a kill of that other container is the cause
ECHO_KINDS = ("NCCL error", "worker lost", "engine fatal error")
# how telling each way of ending is, the first wins: what the log or the OOM killer names of the
# container itself, then a kill, then another's echo, a plain exit, a container simply not there
CAUSE_RANK = ("device-side assert", "OOM", "killed", *ECHO_KINDS, "exited", "removed")


def first_cause(causes: list[Cause]) -> Optional[Cause]:
    """The cause history leads with (the first of equals): a killed head takes its headless worker
    down with exit 1, a killed worker or drafter makes the head log `worker lost` or a fatal error
    and exit 1: the kill is the cause, the others' ends its echo."""
    if not causes:
        return None
    return min(causes, key=lambda c: CAUSE_RANK.index(c.kind) if c.kind in CAUSE_RANK else 0)


@dataclass
class Grace:
    """A container gone must stay gone for `seconds` before the keeper acts (docker, or an engine
    restarting by itself, may bring it back): `due` says when that is over."""

    seconds: float
    since: Optional[float] = None  # when the current absence was first seen

    def due(self, absent: bool, now: float) -> bool:
        if not absent:
            self.since = None
            return False
        if self.since is None:
            self.since = now
        return now - self.since >= self.seconds

    def reset(self) -> None:
        self.since = None


@dataclass
class CrashLoop:
    """systemd's StartLimitBurst for recoveries: at most `limit` within `window` seconds; one more
    would be a loop, and the keeper gives up instead (until the cluster serves again)."""

    limit: int
    window: float
    recoveries: list[float] = field(default_factory=list)  # when each recovery began

    def recovered_at(self, now: float) -> None:
        self.recoveries.append(now)
        self._trim(now)

    def exhausted(self, now: float) -> bool:
        self._trim(now)
        return len(self.recoveries) >= self.limit

    def _trim(self, now: float) -> None:
        self.recoveries = [t for t in self.recoveries if now - t < self.window]
