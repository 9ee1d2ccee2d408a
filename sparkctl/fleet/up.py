"""`sparkctl fleet up`: every member converged at once, then the fleet's front door.

Each member runs exactly the steps `sparkctl up -i MEMBER.yaml` runs (sparkctl/cli/up.py
`converge`: the same playbook, lock and options) in a thread of its own; its progress is one line
per phase and per finished step on stderr, prefixed with the member's name (interleaved lines of
several members stay readable: a live block per member would not). A member's failure never stops
the others; the front door comes after every member's run (it routes around a member that fails).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from sparkctl.records import JournalRecord, RuntimeStart, dump
from sparkctl.steps.transfer import Phase

Say = Callable[[str], None]


class MemberLines:
    """The runner's callbacks (progress, result, note) for one member: plain prefixed lines."""

    def __init__(self, member: str, say: Say):
        self.member, self.say = member, say
        self._last: dict[tuple[str, str], str] = {}

    def progress(self, host: str, step: str, text: Phase) -> None:
        if self._last.get((host, step)) != str(text):  # a phase repeated (a wait's tick) is said once
            self._last[(host, step)] = str(text)
            self.say(f"{self.member}: {host} {step}: {text}")

    def result(self, r) -> None:
        line = f"{self.member}: {r.status:>7} {r.host} {r.step} {r.message}"
        if r.fix:
            line += f" (fix: {r.fix})"
        self.say(line)

    def note(self, text: str) -> None:
        self.say(f"{self.member}: {text}")


def locked_say(write: Callable[[str], None]) -> Say:
    """`write` for several threads: one whole line at a time."""
    lock = threading.Lock()

    def say(line: str) -> None:
        with lock:
            write(line)

    return say


@dataclass
class MemberUp:
    member: str
    recap: Any = None  # the runner's Recap (None when the run could not start)
    error: Any = None  # SparkctlError that stopped it before or outside the steps
    runtime_start: Optional[RuntimeStart] = None
    interrupted_reload: Optional[JournalRecord] = None

    @property
    def failed(self) -> bool:
        return self.error is not None or (self.recap is not None and self.recap.failed)

    @property
    def changed(self) -> int:
        return self.recap.count("changed") if self.recap is not None else 0

    def to_dict(self) -> dict:
        return {
            "member": self.member,
            "failed": self.failed,
            "changed": self.changed,
            "error": self.error.to_dict() if self.error is not None else None,
            "recap": self.recap.to_dict() if self.recap is not None else None,
            "runtime_start": dump(self.runtime_start) if self.runtime_start else None,
            "interrupted_reload": dump(self.interrupted_reload) if self.interrupted_reload else None,
        }


@dataclass
class FleetUp:
    fleet: str
    check: bool
    members: list[MemberUp] = field(default_factory=list)
    front_door: dict = field(default_factory=dict)  # {"status": ok|changed|failed|skipped, "message": ..., ...}
    put_back: dict = field(default_factory=dict)  # {member: put back | would put back | why left drained}

    @property
    def failed_members(self) -> list[str]:
        return [m.member for m in self.members if m.failed]

    @property
    def failed(self) -> bool:
        return bool(self.failed_members) or self.front_door.get("status") == "failed"

    @property
    def changed(self) -> bool:
        return (
            any(m.changed for m in self.members)
            or self.front_door.get("status") == "changed"
            or any(v.startswith(("put back", "would put")) for v in self.put_back.values())
        )

    def verdict(self) -> str:
        if self.failed:
            parts = [f"member {', '.join(self.failed_members)} failed"] if self.failed_members else []
            if self.front_door.get("status") == "failed":
                parts.append("the front door failed")
            return "FAILED: " + "; ".join(parts)
        if not self.changed:
            return "nothing to change"
        return "changes planned (nothing applied: --check)" if self.check else "converged"

    def to_dict(self) -> dict:
        return {
            "fleet": self.fleet,
            "check": self.check,
            "outcome": self.verdict(),
            "failed": self.failed,
            "changed": self.changed,
            "failed_members": self.failed_members,
            "members": [m.to_dict() for m in self.members],
            "front_door": self.front_door,
            "put_back": self.put_back,
        }


def up_member(member, check: bool, say: Say, force: bool = False, wait: float = 0, **options) -> MemberUp:
    """One member's `sparkctl up`, its progress through `say`."""
    from sparkctl.converge import converge
    from sparkctl.steps.base import RunOptions
    from sparkctl.transport.ssh import Fleet as HostFleet

    inv = member.inventory
    with HostFleet(inv).connect_early() as hosts:
        recap, ctx = converge(
            inv, hosts, "up", check, live=MemberLines(member.name, say), force=force, wait=wait, options=RunOptions(**options)
        )
    head = ctx.facts.get(inv.hosts_with_role("head")[0])
    return MemberUp(
        member.name,
        recap=recap,
        runtime_start=ctx.outputs.runtime_start or None,
        interrupted_reload=head.journal if head is not None else None,
    )


def front_door_step(fleet, check: bool, say: Say) -> dict:
    """The fleet's front door (vllm-router in container sparkctl-fleet-door on its host: fleet/router_host.py),
    by its deploy step (sparkctl/fleet/router_step.py): {status: ok|changed|failed|skipped, message, plan, recap}."""
    from sparkctl.fleet.router_step import ensure_front_door, plan_lines

    recap = ensure_front_door(fleet, check=check, progress=lambda host, step, text: say(f"front door: {host} {step}: {text}"))
    return door_result(recap, plan_lines(recap))


def door_result(recap, plan: list[str]) -> dict:
    """The door step's recap as fleet up reports it: one status, the results' messages, its plan."""
    status = "failed" if recap.failed else ("changed" if recap.count("changed") else "ok")
    shown = [r for r in recap.results if r.status != "skipped"] or recap.results
    message = "; ".join(f"{r.host}: {r.message}" for r in shown)
    fix = next((r.fix for r in recap.results if r.fix), None)
    return {"status": status, "message": message, "fix": fix, "plan": plan, "recap": recap.to_dict()}


def fleet_up(fleet, check: bool, say: Say, **options) -> FleetUp:
    """Every member's up at once, then the front door (when its member's run did not fail)."""
    from sparkctl.fleet.each import each_member

    outcomes = each_member(fleet.members, lambda m: up_member(m, check, say, **options))
    report = FleetUp(fleet.name, check)
    for name, o in outcomes.items():
        report.members.append(o.value if o.error is None else MemberUp(name, error=o.error))
        if o.error is not None:
            say(f"{name}: failed: {o.error.message}" + (f" (fix: {o.error.fix})" if o.error.fix else ""))
    door_member = fleet.front_door.member
    if door_member and door_member in report.failed_members:
        report.front_door = {"status": "skipped", "message": f"not deployed: its member {door_member} failed"}
    else:
        try:
            report.front_door = front_door_step(fleet, check, say)
        except Exception as err:  # noqa: BLE001 - one document still says what every member did
            from sparkctl.errors import SparkctlError

            message = err.message if isinstance(err, SparkctlError) else f"{type(err).__name__}: {err}"
            report.front_door = {"status": "failed", "message": message, "fix": getattr(err, "fix", None)}
    say(f"front door: {report.front_door['status']} {report.front_door.get('message', '')}".rstrip())
    if report.front_door.get("status") in ("ok", "changed"):
        # a member a killed rollout left drained at the door: back in, once it serves and nothing changes it
        from sparkctl.fleet.rollout import put_back_drained

        report.put_back = put_back_drained(fleet, say=lambda member, msg: say(f"{member}: {msg}"), check=check)
    return report
