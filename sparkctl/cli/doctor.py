"""`sparkctl doctor`: every named check on all hosts in parallel, with the fix for each failure.

Human output (stdout; the spinner while facts are gathered is on stderr), for a person: one line per check group with each host's counts, then
only what is not ok, expanded (message, fix, runbook; the same finding on several hosts once),
then the totals. `-v`: one table per host with every row. Nothing breaks a check name at 80 columns.
`--json`: one document {"checks": [...], "summary": {...}, "seconds": ...} on stdout.
Exit 0 when nothing fails, 1 when a check fails, 2 on bad input.
"""

from __future__ import annotations

from collections import Counter
from functools import partial
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from sparkctl.cli.options import InventoryOpt, JsonOpt, require_inventory

if TYPE_CHECKING:  # rich is imported where it draws: doctor --json never loads it
    from rich.text import Text

STYLE = {"ok": "green", "warn": "yellow", "failed": "bold red", "skipped": "dim"}
MARK = {"ok": "✓", "warn": "!", "failed": "✗", "skipped": "–"}
HOSTS_PER_LINE = 4  # host columns of the group summary that fit 80 columns


def doctor(
    inventory: InventoryOpt = None,
    json_out: JsonOpt = False,
    only: Annotated[
        Optional[list[str]],
        typer.Option(
            "--only",
            help="Run only these check groups (comma-separated or repeated): "
            "ssh, host, gpu, fabric, env, images, caches, engram, weights, runtime, gateway, state, keeper.",
        ),
    ] = None,
    ignore: Annotated[
        Optional[list[str]],
        typer.Option("--ignore", help="Skip these checks by name (comma-separated or repeated), e.g. host.disk."),
    ] = None,
    hosts: Annotated[
        Optional[list[str]],
        typer.Option("--hosts", help="Look only at these hosts (comma-separated or repeated)."),
    ] = None,
    deep: Annotated[
        bool,
        typer.Option(
            "--deep",
            help="Measure longer: iperf3 over every rail for 3 s (1 s without); re-hash the Engram tables in RAM "
            "and every model file on every node (minutes for the ~167 GB checkpoint).",
        ),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option("-v", "--verbose", help="Print every row (one table per host), not only what is not ok."),
    ] = False,
    allow_loading: Annotated[
        bool,
        typer.Option("--allow-loading", help="A runtime still loading is a warning, not a failure (exit 0)."),
    ] = False,
) -> None:
    """Run every named check on all hosts, with each failure's fix.

    The hosts are checked in parallel. Groups: ssh, host, gpu, fabric, env, images, caches, engram,
    weights, runtime, gateway, state, keeper. docs/checks.md lists every check. Exit 0 when nothing
    fails, 1 when a check fails, 2 on bad input.

    Examples:
      # every check on every host; failures with their fix and runbook
      sparkctl doctor -i my-cluster.yaml
      # only the fabric checks, measuring the rails longer
      sparkctl doctor --only fabric --deep
      # every row, one table per host
      sparkctl doctor -v
    """
    from sparkctl.checks.doctor import doctor as run_doctor
    from sparkctl.cli.output import diagnostics, print_json
    from sparkctl.inventory.loader import load_inventory

    inv = load_inventory(require_inventory(inventory), control_machine=True)
    run = partial(run_doctor, inv, hosts=hosts, only=only, ignore=ignore, deep=deep, allow_loading=allow_loading)
    base = inv.alerts.runbook_base_url  # where the team publishes the runbooks, if it does
    if json_out:
        report = run()
        doc = report.to_dict()
        if base:
            from sparkctl import runbooks

            for check in doc["checks"]:
                if check.get("runbook"):
                    check["runbook_url"] = runbooks.link(check["runbook"], base)
        print_json(doc)
    else:
        with diagnostics().status("sparkctl doctor: gathering facts", spinner="dots") as status:
            report = run(progress=lambda t: status.update(f"sparkctl doctor: {t}"))
        (print_report if verbose else print_summary)(report, runbook_base_url=base)
    raise typer.Exit(1 if report.failed else 0)


def _short_target(target) -> str:
    # an image reference is long: its last path part names it well enough in a table (--json has it whole)
    return (target or "").rsplit("/", 1)[-1]


def print_report(report, c=None, runbook_base_url=None) -> None:
    """-v: one table per host, a row per check (and per rail/device/image)."""
    from rich.table import Table
    from rich.text import Text

    from sparkctl import runbooks
    from sparkctl.cli.output import answer
    from sparkctl.transport.redact import redact

    c = c or answer()
    for host in report.hosts:
        rows = [r for r in report.results if r.host == host]
        if not rows:
            continue
        table = Table(title=f"[bold]{host}[/]", title_justify="left", show_edge=False, pad_edge=False, expand=False)
        table.add_column("check", no_wrap=True)
        table.add_column("on", style="cyan", max_width=24, overflow="fold")
        table.add_column("status", no_wrap=True)
        table.add_column("message", overflow="fold")
        for r in rows:
            message = Text(redact(r.message))
            if r.status == "failed" and r.fix:
                message.append("\nfix: ", style="bold")
                message.append(redact(r.fix))
                if book := runbooks.for_result(r):
                    message.append(f"\nrunbook: {runbooks.link(book, runbook_base_url)}", style="dim")
            elif r.status == "warn" and r.fix:
                message.append(f"\n{redact(r.fix)}", style="dim")
            table.add_row(r.name, _short_target(r.target), Text(r.status, style=STYLE[r.status]), message)
        c.print(table)
        c.print()
    _print_totals(report, c)


def _print_totals(report, c) -> None:
    from rich.text import Text

    from sparkctl.checks.base import STATUSES

    s = report.summary()
    counts = [Text(f"{s[status]} {status}", style=STYLE[status] if s[status] else "dim") for status in STATUSES]
    line = Text("  ").join(counts)
    line.append(f"  in {report.seconds:.2f} s" + (" (--deep)" if report.deep else ""))
    c.print(line)
    if s["failed_checks"]:
        c.print(Text("failed: " + ", ".join(s["failed_checks"]), style="bold red"))


def _cell(rows) -> "Text":
    from rich.text import Text

    if not rows:
        return Text("·", style="dim")
    counts = Counter(r.status for r in rows)
    cell = Text(no_wrap=True)
    for status in ("failed", "warn", "ok", "skipped"):
        if counts[status]:
            cell.append(f"{MARK[status]} {counts[status]} ", style=STYLE[status])
    return cell


def _findings(report) -> list[tuple]:
    """Non-ok results to expand, failures first; one entry per (check, status, message, fix)
    with the hosts and targets it was seen on. Skipped rows are only counted: each says which
    other check explains it, and that one is expanded."""
    from sparkctl.checks import REGISTRY

    order = {name: i for i, name in enumerate(REGISTRY)}  # a cause (fabric.mtu) before its effect (fabric.ping)
    shown = [r for r in report.results if r.status in ("failed", "warn")]
    merged: dict[tuple, list] = {}
    for r in sorted(shown, key=lambda r: (r.status == "warn", order.get(r.name, len(order)))):
        merged.setdefault((r.name, r.status, r.message, r.fix), []).append(r)
    return list(merged.items())


def print_summary(report, c=None, runbook_base_url=None) -> None:
    """The default: a line per group with each host's counts; only what is not ok, expanded."""
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    from sparkctl import runbooks
    from sparkctl.checks import GROUPS
    from sparkctl.cli.output import answer
    from sparkctl.transport.redact import redact

    c = c or answer()
    groups = [g for g in GROUPS if any(r.group == g for r in report.results)]
    hosts = [h for h in report.hosts if any(r.host == h for r in report.results)]
    for start in range(0, len(hosts), HOSTS_PER_LINE):
        chunk = hosts[start : start + HOSTS_PER_LINE]
        t = Table(box=None, pad_edge=False, show_edge=False, padding=(0, 2, 0, 0))
        t.add_column("group", no_wrap=True, style="bold")
        for h in chunk:
            t.add_column(h, no_wrap=True, overflow="ellipsis", max_width=18)
        for g in groups:
            t.add_row(g, *[_cell([r for r in report.results if r.group == g and r.host == h]) for h in chunk])
        c.print(t)
    for g in groups:  # a group skipped everywhere for one reason: say it once (e.g. runtime not running)
        rows = [r for r in report.results if r.group == g]
        reasons = {r.message for r in rows}
        if all(r.status == "skipped" for r in rows) and len(reasons) == 1:
            c.print(Text(f"{MARK['skipped']} {g}: {reasons.pop()}", style="dim"))
    for (name, status, message, fix), rows in _findings(report):
        c.print()
        where = ", ".join(dict.fromkeys(r.host + (f" {_short_target(r.target)}" if r.target else "") for r in rows))
        c.print(Text(f"{MARK[status]} {name}  on {where}", style=STYLE[status]))
        body = Text(redact(message))
        if fix:
            body.append("\nfix: ", style="bold")
            body.append(redact(fix))
        if book := runbooks.for_result(rows[0]):
            body.append("\nrunbook: ", style="bold")
            body.append(runbooks.link(book, runbook_base_url))
        c.print(Padding(body, (0, 0, 0, 2), expand=False))
    c.print()
    _print_totals(report, c)
