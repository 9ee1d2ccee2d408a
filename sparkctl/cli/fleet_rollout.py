"""`sparkctl fleet reload --config-dir DIR | restart | rollback`: a change rolled across the fleet's
members one at a time, each drained at the fleet's front door while it changes (docs/fleets.md).

The command functions are registered on the `fleet` group by sparkctl/cli/fleet.py."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from sparkctl.cli.options import CheckOpt, FleetOpt, JsonOpt
from sparkctl.cli.reload import DeadlineOpt, RatioOpt, RestartDeadlineOpt, RestartRatioOpt, YesOpt

MemberOpt = Annotated[
    Optional[str], typer.Option("--member", help="Only this member (its cluster.name); the others are left as they are.")
]
DrainWaitOpt = Annotated[
    float,
    typer.Option("--drain-wait", help="Seconds a member's requests in flight at the front door get to finish before its change."),
]


def _run(kind: str, fleet_file, config_dir, check, json_out, yes, deadline, ratio, drain_wait, only=None, to=0):
    import sys

    from sparkctl.cli.options import check_seconds
    from sparkctl.cli.output import answer, diagnostics, print_json
    from sparkctl.errors import InputError
    from sparkctl.fleet import keys
    from sparkctl.fleet.model import fleet_path, load_fleet
    from sparkctl.fleet.rollout import plan_rollout, run_rollout

    check_seconds("--deadline", deadline, low=1, high=86400, example="1800")
    check_seconds("--drain-wait", drain_wait, low=0, high=3600, example="120")
    fleet = load_fleet(fleet_path(fleet_file))
    keys.authorize(fleet)  # the drain's reads of a keyed member's engine send its key
    err = diagnostics()
    plan = plan_rollout(fleet, kind, config_dir, only=only, to=to)
    c = answer()
    if check:
        if json_out:
            print_json(plan.to_dict())
        else:
            for line in plan.lines():
                c.print(line, soft_wrap=True, highlight=False, markup=False)
            c.print("[dim](--check: nothing was changed)[/]")
        raise typer.Exit(0)
    if not plan.changing:
        if json_out:
            print_json({"outcome": "nothing to do", "plan": plan.to_dict(), "members": [], "notes": []})
        else:
            for line in plan.lines():
                c.print(line, soft_wrap=True, highlight=False, markup=False)
            c.print("nothing to do")
        raise typer.Exit(0)
    if not json_out:
        for line in plan.lines():
            c.print(line, soft_wrap=True, highlight=False, markup=False)
    if not yes:
        if not sys.stdin.isatty():
            raise InputError(f"`sparkctl fleet {kind}` changes serving clusters and asks first", fix="pass --yes to confirm")
        if not typer.confirm(f"fleet {kind} now?", default=False, err=True):
            raise InputError("not confirmed: nothing was changed", fix="pass --yes to skip the question")

    width = max(len(m.name) for m in fleet.members)

    def say(member: str, msg: str) -> None:
        err.print(f"{member:<{width}} {msg}", soft_wrap=True, highlight=False, markup=False)

    def on_result(member: str, r) -> None:
        from sparkctl.transport.redact import redact

        say(member, f"{r.status:>7} {r.host:<9} {r.step:<8} {redact(r.message)}")
        if r.fix and r.status == "failed":
            say(member, f"{'':>7} {'':<9} {'':<8} fix: {redact(r.fix)}")

    report = run_rollout(fleet, plan, deadline=deadline, min_ratio=ratio, drain_wait=drain_wait, say=say, on_result=on_result)
    if json_out:
        print_json(report.to_dict())
    else:
        _print(c, report)
    raise typer.Exit({"ok": 0, "interrupted": 130}.get(report.outcome, 1))


def _print(c, report) -> None:
    """The per-member table: which member runs which config now, and where it is at the door."""
    from rich.table import Table

    style = "green" if report.outcome == "ok" else "bold red"
    c.print(f"[{style}]{report.outcome}[/]" + (f": {report.reason}" if report.reason else ""), soft_wrap=True, highlight=False)
    t = Table(title=f"fleet {report.plan.fleet}: {report.plan.kind}", title_justify="left")
    for col in ("member", "outcome", "config now", "old", "new", "front door", "reason"):
        t.add_column(col, overflow="fold")
    for m in report.members:
        t.add_row(m.member, m.outcome, m.now or "unknown", m.old or "-", m.new or "-", m.door or "-", m.reason or "")
    c.print(t)
    for note in report.notes:
        c.print(note, soft_wrap=True, highlight=False, markup=False)


def reload(
    config_dir: Annotated[
        Path, typer.Option("--config-dir", help="A folder with <member name>.yaml: each member's full new inventory.")
    ],
    fleet: FleetOpt = None,
    check: CheckOpt = False,
    json_out: JsonOpt = False,
    yes: YesOpt = False,
    deadline: DeadlineOpt = None,
    ratio: RatioOpt = None,
    drain_wait: DrainWaitOpt = 120.0,
) -> None:
    """Roll a config change across the fleet, one member at a time.

    Each member in turn is drained at the front door, reloaded (prestage, health gate, automatic
    rollback) and put back. A member without a file in DIR is left as it is. Exit 1 when a member
    failed (it is rolled back; the rollout stops there).

    Examples:
      # the plan: member by member, warm or cold
      sparkctl fleet reload --config-dir next/ --check
      sparkctl fleet reload --config-dir next/ --min-throughput-ratio 0.8
    """
    _run("reload", fleet, config_dir, check, json_out, yes, deadline, ratio, drain_wait)


def restart(
    fleet: FleetOpt = None,
    member: MemberOpt = None,
    check: CheckOpt = False,
    json_out: JsonOpt = False,
    yes: YesOpt = False,
    deadline: RestartDeadlineOpt = None,
    ratio: RestartRatioOpt = None,
    drain_wait: DrainWaitOpt = 120.0,
) -> None:
    """Restart each member's recorded config, one member at a time.

    Each is drained at the front door and health-gated.

    Examples:
      sparkctl fleet restart --check
      # one member only
      sparkctl fleet restart --member lab-2
    """
    _run("restart", fleet, None, check, json_out, yes, deadline, ratio, drain_wait, only=member)


def rollback(
    fleet: FleetOpt = None,
    member: MemberOpt = None,
    to: Annotated[
        int, typer.Option("--to", help="Go back N configs in each member's `sparkctl history` (0: its last good one).", min=0)
    ] = 0,
    check: CheckOpt = False,
    json_out: JsonOpt = False,
    yes: YesOpt = False,
    deadline: DeadlineOpt = None,
    drain_wait: DrainWaitOpt = 120.0,
) -> None:
    """Roll members back to their last good config, one at a time.

    Each member (or --member NAME) back to its last good config (or --to N back): also the way out
    of an interrupted rollout, and it puts a member left drained back at the door.

    Examples:
      sparkctl fleet rollback --check
      sparkctl fleet rollback --member lab-2
    """
    _run("rollback", fleet, None, check, json_out, yes, deadline, None, drain_wait, only=member, to=to)
