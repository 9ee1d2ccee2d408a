"""`sparkctl reload --config NEW`, `restart`, `rollback`, `history`: change a serving cluster safely."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from sparkctl.cli.options import CheckOpt, InventoryOpt, JsonOpt, VerboseOpt, check_seconds, require_inventory
from sparkctl.cli.unlock import LockWaitOpt

YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation (needed off a terminal).")]
DeadlineOpt = Annotated[
    Optional[float],
    typer.Option("--deadline", help="Seconds the new runtime has to serve before it is rolled back (default 1800)."),
]
# a restart's config is the last good one: a failed restart is not rolled back (reload.py), so its
# two gates say "fails", where reload's and rollback's say "rolled back"
RestartDeadlineOpt = Annotated[
    Optional[float],
    typer.Option(
        "--deadline",
        help="Seconds the restarted runtime has to serve before the restart fails (default 1800; "
        "not rolled back: its config is the last good one).",
    ),
]
RestartRatioOpt = Annotated[
    Optional[float],
    typer.Option(
        "--min-throughput-ratio",
        help="Fail the restart (exit 1) unless decode tok/s after it is at least R x the last recorded "
        "(e.g. 0.8): names a silent kernel fallback. Not rolled back: its config is the last good one.",
        min=0.0,
        max=10.0,
    ),
]
RatioOpt = Annotated[
    Optional[float],
    typer.Option(
        "--min-throughput-ratio",
        help="Roll back unless decode tok/s after the restart is at least R x the last recorded (e.g. 0.8): "
        "catches a silent kernel fallback that serves fine at half speed.",
        min=0.0,
        max=10.0,
    ),
]


def _run(kind: str, inventory, new_path, check, json_out, yes, deadline, ratio, wait, verbose, resume=False, to=0):
    import sys

    from sparkctl.cli.output import answer, diagnostics, print_json
    from sparkctl.cli.steps_output import LiveReport
    from sparkctl.errors import InputError
    from sparkctl.inventory.loader import load_inventory
    from sparkctl.reload import run_reload

    check_seconds("--deadline", deadline, low=1, high=86400, example="1800")
    current = load_inventory(require_inventory(inventory), control_machine=True)
    new = load_inventory(new_path, control_machine=True) if new_path is not None else None
    c = answer()

    def confirm(plan) -> bool:
        if not json_out:
            for line in plan.lines():
                live.print(line, soft_wrap=True, highlight=False, markup=False)
        if yes:
            return True
        if not sys.stdin.isatty():
            raise InputError(f"`sparkctl {kind}` changes a serving cluster and asks first", fix="pass --yes to confirm")
        return typer.confirm(f"{kind} now?", default=False, err=True)  # the prompt is not the answer

    say = (lambda msg: None) if json_out else (lambda msg: diagnostics().print(f"[yellow]{msg}[/]", soft_wrap=True))
    live = LiveReport(quiet=json_out, hosts=list(current.hosts), verbose=verbose)
    with live:
        report = run_reload(
            kind,
            current,
            new,
            check=check,
            resume=resume,
            to=to,
            deadline=deadline,
            min_ratio=ratio,
            wait=wait,
            confirm=confirm,
            progress=live.progress,
            on_result=live.result,
            say=say,
        )
    if json_out:
        print_json(report.to_dict())
    else:
        _print(c, report, check)
    raise typer.Exit(1 if report.failed else 0)


def _print(c, report, check: bool) -> None:
    if check:
        for line in report.plan.lines():
            c.print(line, soft_wrap=True, highlight=False, markup=False)
        _print_notes(c, report.notes)
        c.print("[dim](--check: nothing was changed)[/]")
        return
    style = "green" if not report.failed else "bold red"
    c.print(f"[{style}]{report.outcome}[/]" + (f": {report.reason}" if report.reason else ""), soft_wrap=True)
    if report.downtime is not None:
        c.print(f"downtime (the engine served no completion): {report.downtime:.2f} s")
    if report.drain:
        d = report.drain
        c.print(f"drain: {d['in_flight']} request(s) in flight, {d['finished']} finished, {d['cut']} cut")
    if report.runtime_start:
        c.print(f"start: {report.runtime_start.cache} in {report.runtime_start.seconds} s")
    if report.timeline:
        c.print("timeline: " + ", ".join(f"{t.phase} {t.start:.1f}-{(t.end or t.start):.1f} s" for t in report.timeline))
    for h, st in report.hosts_state.items():
        runs = ", ".join(f"{x.name} {x.state} (config {x.config_hash})" for x in st.containers) or "no container"
        c.print(f"  {h}: {st.error or runs}", soft_wrap=True)
    _print_notes(c, report.notes)


def _print_notes(c, notes: list[str]) -> None:
    """What the run found beside its plan (a journal it cannot read, an interrupted reload, what a
    failed run left and how to undo it): the same lines --json gives as `notes`."""
    for note in notes:
        c.print(f"note: {note}", soft_wrap=True, highlight=False, markup=False)


def reload(
    config: Annotated[Path, typer.Option("--config", help="The full new inventory of the same cluster.")],
    inventory: InventoryOpt = None,
    check: CheckOpt = False,
    json_out: JsonOpt = False,
    yes: YesOpt = False,
    deadline: DeadlineOpt = None,
    ratio: RatioOpt = None,
    resume: Annotated[bool, typer.Option("--resume", help="Finish a reload that was interrupted (same --config).")] = False,
    wait: LockWaitOpt = 0,
    verbose: VerboseOpt = False,
) -> None:
    """Change a serving cluster's config, restarting only what must.

    Validate, pre-stage while the old config serves, drain, restart health-gated, and roll back by
    itself when the new config does not serve. -i is the current inventory (the last good config: it is where a failed reload rolls back to, and
    where secrets the record keeps only as digests come from). --check prints the plan: which fields
    change, which containers restart, warm or cold. Exit 1 when the new config was rolled back.

    Examples:
      # which fields change, what restarts, warm or cold
      sparkctl reload --config new.yaml --check
      # change it; roll back unless decode speed stays at 80% or more
      sparkctl reload --config new.yaml --min-throughput-ratio 0.8
    """
    _run("reload", inventory, config, check, json_out, yes, deadline, ratio, wait, verbose, resume=resume)


def restart(
    inventory: InventoryOpt = None,
    check: CheckOpt = False,
    json_out: JsonOpt = False,
    yes: YesOpt = False,
    deadline: RestartDeadlineOpt = None,
    ratio: RestartRatioOpt = None,
    wait: LockWaitOpt = 0,
    verbose: VerboseOpt = False,
) -> None:
    """Restart the recorded config, drained and health-gated.

    In order: drafter, worker, head. For a runtime that crashed or hangs.

    Examples:
      # what would restart, in which order
      sparkctl restart --check
      # restart without asking
      sparkctl restart --yes
    """
    _run("restart", inventory, None, check, json_out, yes, deadline, ratio, wait, verbose)


def rollback(
    inventory: InventoryOpt = None,
    to: Annotated[int, typer.Option("--to", help="Go back N configs in `sparkctl history` (0: the last good one).", min=0)] = 0,
    check: CheckOpt = False,
    json_out: JsonOpt = False,
    yes: YesOpt = False,
    deadline: DeadlineOpt = None,
    wait: LockWaitOpt = 0,
    verbose: VerboseOpt = False,
) -> None:
    """Restore the last good config, or an earlier one with --to N.

    The way out of an interrupted or failed reload.

    Examples:
      # back to the last good config
      sparkctl rollback
      # two configs further back in `sparkctl history`
      sparkctl rollback --to 2 --check
    """
    _run("rollback", inventory, None, check, json_out, yes, deadline, None, wait, verbose, to=to)


def history(
    inventory: InventoryOpt = None,
    json_out: JsonOpt = False,
    last: Annotated[int, typer.Option("--last", "-n", help="Show the newest N events (0: all the head keeps).", min=0)] = 20,
) -> None:
    """Show the configs, reloads, restarts and rollbacks applied here.

    Each with its time, config, who, outcome, warm or cold, and downtime.

    Examples:
      # the newest 20 events
      sparkctl history
      # every event the head keeps, as JSON
      sparkctl history -n 0 --json
    """
    from rich.table import Table

    from sparkctl.cli.output import answer, print_json
    from sparkctl.history import read_history
    from sparkctl.inventory.loader import load_inventory

    inv = load_inventory(require_inventory(inventory), control_machine=True)
    history = read_history(inv, last)
    if json_out:
        print_json(history.to_dict())
        return
    c = answer()
    t = Table(title=f"cluster {inv.cluster.name}: last good config {history.last_good or '(none)'}", title_justify="left")
    for col in ("at", "command", "outcome", "config", "by", "start", "downtime"):
        t.add_column(col, overflow="fold")
    for e in history.events:
        start = f"{e.cache or '-'} {e.start_seconds:.1f} s" if e.start_seconds else (e.cache or "-")
        down = f"{e.downtime_seconds:.2f} s" if e.downtime_seconds is not None else "-"
        command = e.command or "?"
        if e.trigger == "keeper":  # an automatic recovery: what it recovered from
            command += f" (keeper: {e.cause.kind if e.cause else 'gone'})"
        t.add_row(e.at or "?", command, e.outcome or "?", (e.config_hash or "?")[:16], e.by or "?", start, down)
    c.print(t)
    if history.rollback_targets:
        c.print(
            "rollback targets: "
            + ", ".join(f"--to {r.n}: {r.config_hash} ({r.applied_at})" for r in reversed(history.rollback_targets))
        )
    if history.unreadable:
        c.print(f"unreadable records (never a rollback target): {', '.join(history.unreadable)}", soft_wrap=True)
    if history.interrupted is not None:
        c.print(
            f"[bold red]{history.interrupted.interrupted()}[/]: `sparkctl reload --resume --config NEW` or `sparkctl rollback`"
        )
