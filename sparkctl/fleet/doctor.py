"""`sparkctl fleet doctor`: every member's doctor at once (sparkctl/checks/doctor.py, itself
parallel over the member's hosts), so a fleet takes about one cluster's time, not the sum; then
the checks between members (the `fleet.*` checks, sparkctl/checks/fleet.py, in the one check
registry), with stable names, fix and runbook like every check. A member whose doctor could not run is one `fleet.member` failure, not a traceback.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

from sparkctl.checks.base import STATUSES, CheckResult
from sparkctl.checks.fleet import FleetContext, public_health_url

GROUP = "fleet"
PROBE_DEADLINE_S = 3  # each member's /health from the door's host


def fleet_checks() -> dict:
    """The fleet checks of the one registry (sparkctl/checks/fleet.py), by name, in its order."""
    from sparkctl.checks import REGISTRY

    return {name: c for name, c in REGISTRY.items() if c.fleet}


def probe_command(fleet) -> str:
    """One shell command for the door's host: each member's /health code, a line `NAME CODE` each, at once."""
    lines = [
        "p() { if command -v curl >/dev/null; then curl -s -o /dev/null -w '%{http_code}' --max-time "
        f'{PROBE_DEADLINE_S} "$1"; else wget -q -T {PROBE_DEADLINE_S} -O /dev/null "$1" && echo 200 || echo 000; fi; }}'
    ]
    for m in fleet.members:
        lines.append(f"( echo {shlex.quote(m.name)} $(p {shlex.quote(public_health_url(m))}) ) &")
    lines.append("wait")
    return "\n".join(lines)


def probe_from_door(fleet) -> dict[str, Optional[str]]:
    """member -> the HTTP code its /health gives from the door's host (over SSH, with a deadline).
    A door on a host of its own is asked through its own SSH settings (fleet/router_host.py)."""
    from sparkctl.fleet.router_host import door_session
    from sparkctl.transport.guard import check_address

    for m in fleet.members:
        check_address(m.head_address, f"member {m.name}'s front door")
    with door_session(fleet) as (sessions, host):
        r = sessions[host].run(probe_command(fleet), timeout=PROBE_DEADLINE_S + 10)
    codes: dict[str, Optional[str]] = {m.name: None for m in fleet.members}
    for line in r.stdout.splitlines():
        name, _, code = line.strip().partition(" ")
        if name in codes:
            codes[name] = code.strip() or None
    return codes


@dataclass
class FleetReport:
    """The members' doctor reports (or why one could not run) and the fleet checks' results."""

    fleet: str
    members: dict[str, Any]  # name -> checks.doctor.Report, or None when it could not run
    errors: dict[str, Any]  # name -> SparkctlError that stopped its doctor
    fleet_results: list[CheckResult]
    seconds: float = 0.0
    member_seconds: dict[str, float] = field(default_factory=dict)

    def member_failures(self) -> list[CheckResult]:
        return [
            CheckResult(
                "fleet.member", GROUP, name, "failed", f"doctor could not run: {err.message}", err.fix or "see the message"
            )
            for name, err in self.errors.items()
        ]

    def all_results(self) -> list[tuple[str, CheckResult]]:
        """(member, result) for every finding; fleet-wide ones under FLEET_HOST."""
        out = [(name, r) for name, rep in self.members.items() if rep is not None for r in rep.results]
        out += [(r.host, r) for r in self.member_failures()]
        out += [(r.host, r) for r in self.fleet_results]
        return out

    @property
    def failed(self) -> bool:
        return any(r.status == "failed" for _, r in self.all_results())

    def summary(self) -> dict:
        from collections import Counter

        counts = Counter(r.status for _, r in self.all_results())
        return {
            **{s: counts[s] for s in STATUSES},
            "failed_checks": sorted({f"{m}: {r.name}" for m, r in self.all_results() if r.status == "failed"}),
            "members": list(self.members),
        }

    def to_dict(self) -> dict:
        from sparkctl.checks.base import SCHEMA_VERSION

        return {
            "schema_version": SCHEMA_VERSION,
            "fleet": self.fleet,
            "members": {
                name: {
                    **(rep.to_dict() if rep is not None else {"checks": []}),
                    "error": self.errors[name].to_dict() if name in self.errors else None,
                }
                for name, rep in self.members.items()
            },
            "fleet_checks": [r.to_dict() for r in self.fleet_results + self.member_failures()],
            "summary": self.summary(),
            "seconds": round(self.seconds, 3),
            "member_seconds": {m: round(s, 3) for m, s in self.member_seconds.items()},
        }


def split_only(only: Optional[Iterable[str]]) -> tuple[Optional[list[str]], bool]:
    """--only's groups for the members' doctors (None: all) and whether the fleet checks run."""
    groups = [p.strip() for v in only or [] for p in v.split(",") if p.strip()]
    if not groups:
        return None, True
    member_groups = [g for g in groups if g != GROUP]
    return member_groups, GROUP in groups


def fleet_doctor(
    fleet,
    only=None,
    ignore=None,
    deep: bool = False,
    allow_loading: bool = False,
    progress: Callable[[str], None] = lambda text: None,
) -> FleetReport:
    """Every member's doctor at once, the door's view beside them, then the fleet checks."""
    import threading

    from sparkctl.checks.doctor import doctor, select
    from sparkctl.fleet.each import each_member
    from sparkctl.fleet.status import door_view

    start = time.monotonic()
    member_groups, with_fleet = split_only(only)
    ignored = [p.strip() for v in ignore or [] for p in v.split(",") if p.strip()]
    fleet_ignored = {n for n in ignored if n.startswith(GROUP + ".")}
    member_ignored = [n for n in ignored if n not in fleet_ignored]
    unknown = [n for n in fleet_ignored if n not in fleet_checks()]
    if unknown:
        from sparkctl.checks.doctor import _unknown

        raise _unknown("check name", unknown, fleet_checks())
    select(member_groups or None, member_ignored, deep)  # an unknown group or name: exit 2 before any host
    ctx = FleetContext(fleet)

    def fleet_view() -> None:
        try:
            ctx.door.update(door_view(fleet))
        except Exception as err:  # noqa: BLE001 - said by fleet.front_door
            ctx.door.update(url=fleet.front_door_url, answering=False, error=getattr(err, "message", None) or str(err))
        try:
            ctx.reach.update(probe_from_door(fleet))
        except Exception as err:  # noqa: BLE001 - said by fleet.members_reachable
            ctx.reach_error = getattr(err, "message", None) or f"{type(err).__name__}: {err}"

    side = threading.Thread(target=fleet_view, name="sparkctl-fleet-view", daemon=True) if with_fleet else None
    if side is not None:
        side.start()
    reports: dict[str, Any] = {}
    errors: dict[str, Any] = {}
    seconds: dict[str, float] = {}
    if member_groups is None or member_groups:
        progress(f"doctor on {', '.join(m.name for m in fleet.members)} at once")

        def one(m):
            t0 = time.monotonic()
            try:
                return doctor(m.inventory, only=member_groups, ignore=member_ignored, deep=deep, allow_loading=allow_loading)
            finally:
                seconds[m.name] = time.monotonic() - t0

        for name, o in each_member(fleet.members, one).items():
            reports[name] = o.value
            if not o.ok:
                errors[name] = o.error
    else:
        reports = {m.name: None for m in fleet.members}
    results: list[CheckResult] = []
    if side is not None:
        side.join(60)
        for c in fleet_checks().values():
            if c.name not in fleet_ignored:
                results += c.run(ctx)
    return FleetReport(fleet.name, reports, errors, results, time.monotonic() - start, seconds)
