"""What a step is: facts -> plan -> apply, with results an operator can read.

A step (modelled on pyinfra's operations) declares the shell probes it needs, computes a `Plan`
for one host from the inventory and those facts (pure: testable on recorded output without a
host), and applies only that plan. An empty plan carries the reason nothing is needed
("fabric IP 10.231.100.2/24 already on enp1s0f0np0"). Steps never print: the runner owns
concurrency, progress and output.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Optional

from sparkctl.facts.probe import Section
from sparkctl.inventory.models import Inventory

Status = Literal["ok", "changed", "failed", "skipped"]


@dataclass(frozen=True)
class Change:
    """One change a step will make on a host, printable and comparable."""

    action: str  # machine-readable verb, e.g. "set-mtu"
    summary: str  # what an operator reads, e.g. "set MTU 9000 on enp1s0f0np0 (now 1500)"
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    step: str
    host: str
    changes: tuple[Change, ...] = ()
    reason: str = ""  # why nothing is needed (empty plan) or why these changes
    blocked: Optional[str] = None  # the step cannot proceed on this host (checked before applying)

    @property
    def empty(self) -> bool:
        return not self.changes


@dataclass
class StepResult:
    step: str
    host: str
    status: Status
    message: str
    changes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    fix: Optional[str] = None

    def to_dict(self) -> dict:
        return {
            "step": self.step,
            "host": self.host,
            "status": self.status,
            "message": self.message,
            "changes": self.changes,
            "seconds": round(self.seconds, 3),
            **({"fix": self.fix} if self.fix else {}),
        }


@dataclass
class RunContext:
    """What every step sees during one run: the inventory, the sessions, facts gathered once."""

    inventory: Inventory
    fleet: Any  # sparkctl.transport.ssh.Fleet
    facts: dict[str, dict[str, Section]] = field(default_factory=dict)
    check_mode: bool = False
    force: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    progress: Callable[[str, str, str], None] = lambda host, step, text: None
    shared: dict[str, Any] = field(default_factory=dict)  # values one step hands to a later one

    def section(self, host: str, key: str) -> Section:
        return self.facts.get(host, {}).get(key, Section(255, "fact not gathered"))


class Step:
    """Base class: subclasses set `name` and implement `hosts`, `probes`, `plan`, `apply`."""

    name: str = ""
    description: str = ""
    # run hosts one after another (e.g. runtime start order) instead of all at once
    sequential: bool = False
    # a gate (preflight) changes nothing and runs only when a later step is about to change something
    gate: bool = False

    def hosts(self, inv: Inventory) -> list[str]:
        return list(inv.hosts)

    def probes(self, inv: Inventory, host: str) -> dict[str, str]:
        """Shell snippets whose output `plan` needs; gathered with every other step's in one round trip."""
        return {}

    def background(self, inv: Inventory, host: str) -> set[str]:
        """Keys of `probes` that only wait (pings, nvidia-smi, docker): run alongside the others."""
        return set()

    def plan(self, ctx: RunContext, host: str) -> Plan:
        raise NotImplementedError

    def apply(self, ctx: RunContext, plan: Plan) -> "str | tuple[str, bool]":
        """Make the planned changes; return a one-line summary (or (summary, changed) when applying
        found nothing actually needed changing). Raise SparkctlError to fail."""
        raise NotImplementedError

    # helpers for subclasses
    def noop(self, host: str, reason: str) -> Plan:
        return Plan(self.name, host, (), reason)

    def changes(self, host: str, changes: list[Change], reason: str = "") -> Plan:
        return Plan(self.name, host, tuple(changes), reason or "; ".join(c.summary for c in changes))


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.monotonic()
    value = fn()
    return value, time.monotonic() - start
