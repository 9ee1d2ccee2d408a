"""Checks between the members of a fleet (`sparkctl fleet doctor`, docs/checks.md "Fleet checks"):
in the one check registry (checks/base.py `fleet_check`), with stable names, fix and runbook like
every check. They read the fleet's context below, never a host: fleet/doctor.py gathers it (the
door seen from here, the members seen from the door's host)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from sparkctl.checks.base import fail, fleet_check, ok, skipped, warn

if TYPE_CHECKING:
    from sparkctl.fleet.model import Fleet

READS: set[str] = set()  # no host's facts: a cluster's doctor never runs these
FLEET_HOST = "fleet"  # the "host" column of fleet checks about the whole fleet


@dataclass
class FleetContext:
    """What the fleet checks read: the fleet, the door seen from here and the members seen from the door."""

    fleet: Fleet
    door: dict[str, Any] = field(default_factory=dict)  # status.door_view: url, answering, error, members (states) or None
    reach: dict[str, Optional[str]] = field(default_factory=dict)  # member -> its /health HTTP code from the door's host
    reach_error: Optional[str] = None  # the door's host could not be asked at all


@fleet_check("fleet.front_door", "The fleet's front door (vllm-router) answers its clients' URL (its /liveness).")
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
        why = (ctx.door.get("reasons") or {}).get(m.name)
        seen = f" (at the front door: {state}{': ' + why if why else ''})" if state else ""
        if ctx.reach_error is not None:
            yield m.name, skipped(f"the door's host {where} could not be asked: {ctx.reach_error}")
            continue
        code = ctx.reach.get(m.name)
        if code == "200" and state in (None, "passing"):
            yield m.name, ok(f"{url} answers 200 from {where}{seen}", target=m.name)
        elif code == "200":
            yield (
                m.name,
                warn(
                    f"{url} answers 200 from {where}, but the front door has it {state}{': ' + why if why else ''}",
                    "drained while a change runs is expected; otherwise `sparkctl fleet up` puts a "
                    "drained member that serves back; "
                    f"`sparkctl fleet status` and the member's `sparkctl status -i {m.inventory_path}`",
                    target=m.name,
                ),
            )
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
