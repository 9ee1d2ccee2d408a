"""`sparkctl fleet doctor`: every member's doctor at once (sparkctl/checks/doctor.py, itself
parallel over the member's hosts), so a fleet takes about one cluster's time, not the sum; then
the checks between members (the `fleet.*` checks below), with stable names, fix and runbook like
every check. A member whose doctor could not run is one `fleet.member` failure, not a traceback.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

from sparkctl.checks.base import STATUSES, CheckResult, Finding, fail, ok, skipped, warn

GROUP = "fleet"
FLEET_HOST = "fleet"  # the "host" column of fleet checks about the whole fleet
PROBE_DEADLINE_S = 3  # each member's /health from the door's host


@dataclass
class FleetContext:
    """What the fleet checks read: the fleet, the door seen from here and the members seen from the door."""

    fleet: Any
    door: dict = field(default_factory=dict)  # status.door_view: url, answering, error, members (states) or None
    reach: dict[str, Optional[str]] = field(default_factory=dict)  # member -> its /health HTTP code from the door's host
    reach_error: Optional[str] = None  # the door's host could not be asked at all


@dataclass(frozen=True)
class FleetCheck:
    name: str
    doc: str
    fn: Callable[[FleetContext], Iterable[tuple[str, Finding]]]  # yields (member or FLEET_HOST, finding)

    @property
    def runbook_path(self) -> Optional[str]:
        from sparkctl.alerts import runbooks

        return runbooks.path(self.name) if runbooks.exists(self.name) else None

    def run(self, ctx: FleetContext) -> list[CheckResult]:
        return [
            CheckResult(self.name, GROUP, where, f.status, f.message, f.fix, f.target,
                        self.runbook_path if f.status in ("failed", "warn") else None, dict(f.data))
            for where, f in self.fn(ctx)
        ]  # fmt: skip


FLEET_CHECKS: dict[str, FleetCheck] = {}


def fleet_check(name: str, doc: str) -> Callable:
    def register(fn):
        FLEET_CHECKS[name] = FleetCheck(name, doc, fn)
        return fn

    return register


@fleet_check("fleet.front_door", "The fleet's front door answers its clients' URL (its own metrics page).")
def _front_door(ctx: FleetContext):
    d, where = ctx.door, door_place(ctx.fleet)
    url = d.get("url") or ctx.fleet.front_door_url
    if d.get("answering"):
        yield FLEET_HOST, ok(f"{url} answers", target=url)
    else:
        yield (
            FLEET_HOST,
            fail(
                f"{url} does not answer: {d.get('error') or 'no answer'}",
                f"`sparkctl fleet up` deploys it; if it runs, `docker logs sparkctl-fleet-door` on {where}",
                target=url,
            ),
        )


@fleet_check("fleet.members_reachable", "From the front door's host, every member's front door (runtime.port) answers /health.")
def _members_reachable(ctx: FleetContext):
    states = ctx.door.get("members") or {}
    where = door_place(ctx.fleet)
    for m in ctx.fleet.members:
        url = public_health_url(m)
        state = states.get(m.name)
        seen = f" (at the front door: {state})" if state else ""
        if ctx.reach_error is not None:
            yield m.name, skipped(f"the door's host {where} could not be asked: {ctx.reach_error}")
            continue
        code = ctx.reach.get(m.name)
        if code == "200" and state in (None, "passing"):
            yield m.name, ok(f"{url} answers 200 from {where}{seen}", target=m.name)
        elif code == "200":
            yield m.name, warn(f"{url} answers 200 from {where}, but the front door has it {state}",
                               "drained or holding while a change runs is expected; otherwise "
                               f"`sparkctl fleet status` and the member's `sparkctl status -i {m.inventory_path}`",
                               target=m.name)  # fmt: skip
        else:
            answer = "no answer" if code in (None, "", "000") else f"HTTP {code}"
            yield (
                m.name,
                fail(
                    f"{url} from {where}: {answer}{seen}: the front door cannot send it requests",
                    f"`sparkctl doctor -i {m.inventory_path}` (is its engine serving?), and the management network "
                    f"between {where} and {m.head_address}",
                    target=m.name,
                ),
            )


@fleet_check("fleet.same_model", "Every member serves the same model name (clients ask the front door for one).")
def _same_model(ctx: FleetContext):
    names = {m.name: m.inventory.runtime.served_model_name for m in ctx.fleet.members}
    first = ctx.fleet.members[0].name
    for member, served in names.items():
        if served == names[first]:
            yield member, ok(f"serves {served!r}", target=member)
        else:
            yield (
                member,
                fail(
                    f"serves {served!r}, member {first} serves {names[first]!r}: requests for one would fail on the other",
                    f"set runtime.served_model_name to {names[first]!r} in {ctx.fleet.member(member).inventory_path} "
                    "and roll it out: `sparkctl fleet reload --config-dir DIR`",
                    target=member,
                ),
            )


def door_place(fleet) -> str:
    return (
        f"{fleet.front_door.member}'s head ({fleet.front_door_address})" if fleet.front_door.member else fleet.front_door_address
    )


def public_health_url(member) -> str:
    """What the front door sends requests to: the member's own front door (runtime.port)."""
    return f"http://{member.head_address}:{member.inventory.runtime.port}/health"


def probe_command(fleet) -> str:
    """One shell command for the door's host: each member's /health code, a line `NAME CODE` each, at once."""
    lines = ["p() { if command -v curl >/dev/null; then curl -s -o /dev/null -w '%{http_code}' --max-time "
             f"{PROBE_DEADLINE_S} \"$1\"; else wget -q -T {PROBE_DEADLINE_S} -O /dev/null \"$1\" && echo 200 || echo 000; fi; }}"]  # fmt: skip
    for m in fleet.members:
        lines.append(f"( echo {shlex.quote(m.name)} $(p {shlex.quote(public_health_url(m))}) ) &")
    lines.append("wait")
    return "\n".join(lines)


def probe_from_door(fleet) -> dict[str, Optional[str]]:
    """member -> the HTTP code its /health gives from the door's host (over SSH, with a deadline).
    A door on a host of its own is asked through its own SSH settings (fleet/door_host.py)."""
    from sparkctl.fleet.door_host import door_session
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
        return [CheckResult("fleet.member", GROUP, name, "failed", f"doctor could not run: {err.message}",
                            err.fix or "see the message") for name, err in self.errors.items()]  # fmt: skip

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
        return {**{s: counts[s] for s in STATUSES},
                "failed_checks": sorted({f"{m}: {r.name}" for m, r in self.all_results() if r.status == "failed"}),
                "members": list(self.members)}  # fmt: skip

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


def fleet_doctor(fleet, only=None, ignore=None, deep: bool = False, allow_loading: bool = False,
                 progress: Callable[[str], None] = lambda text: None) -> FleetReport:  # fmt: skip
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
    unknown = [n for n in fleet_ignored if n not in FLEET_CHECKS]
    if unknown:
        from sparkctl.checks.doctor import _unknown

        raise _unknown("check name", unknown, FLEET_CHECKS)
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
        for c in FLEET_CHECKS.values():
            if c.name not in fleet_ignored:
                results += c.run(ctx)
    return FleetReport(fleet.name, reports, errors, results, time.monotonic() - start, seconds)
