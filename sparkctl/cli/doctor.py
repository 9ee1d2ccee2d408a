"""`sparkctl doctor`: every named check on all hosts in parallel, with the fix for each failure.

Human output (stderr): one table per host, a row per check (and per rail/device/image where a
check looks at several), the fix under each failure, then the totals and the wall time.
`--json`: one document {"checks": [...], "summary": {...}, "seconds": ...} on stdout.
Exit 0 when nothing fails, 1 when a check fails, 2 on bad input.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from sparkctl.cli.options import InventoryOpt, JsonOpt, require_inventory

STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "skipped": "dim"}


def doctor(
    inventory: InventoryOpt = None,
    json_out: JsonOpt = False,
    only: Annotated[
        Optional[list[str]],
        typer.Option("--only", help="Run only these check groups (comma-separated or repeated): "
                     "ssh, host, gpu, fabric, env, images, caches, engram, runtime."),
    ] = None,  # fmt: skip
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
        typer.Option("--deep", help="Also measure: iperf3 over every rail, re-hash the Engram tables in RAM."),
    ] = False,
) -> None:
    """Run every named check on all hosts in parallel, with the fix for each failure.

    Groups: ssh, host, gpu, fabric, env, images, caches, engram, runtime. docs/checks.md lists
    every check. Exit 0 when nothing fails, 1 when a check fails, 2 on bad input.
    """
    from sparkctl.checks.doctor import doctor as run_doctor
    from sparkctl.inventory.loader import load_inventory

    inv = load_inventory(require_inventory(inventory))
    if json_out:
        report = run_doctor(inv, hosts=hosts, only=only, ignore=ignore, deep=deep)
        from sparkctl.cli.output import print_json

        print_json(report.to_dict())
    else:
        from sparkctl.cli.output import console

        with console().status("sparkctl doctor: gathering facts", spinner="dots") as status:
            report = run_doctor(
                inv, hosts=hosts, only=only, ignore=ignore, deep=deep, progress=lambda t: status.update(f"sparkctl doctor: {t}")
            )
        print_report(report)
    raise typer.Exit(1 if report.failed else 0)


def _short_target(target) -> str:
    # an image reference is long: its last path part names it well enough in a table (--json has it whole)
    return (target or "").rsplit("/", 1)[-1]


def print_report(report) -> None:
    from rich.table import Table
    from rich.text import Text

    from sparkctl.cli.output import console
    from sparkctl.transport.redact import redact

    c = console()
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
            if r.status == "fail" and r.fix:
                message.append("\nfix: ", style="bold")
                message.append(redact(r.fix))
                if r.runbook:
                    message.append(f"\nrunbook: {r.runbook}", style="dim")
            elif r.status == "warn" and r.fix:
                message.append(f"\n{redact(r.fix)}", style="dim")
            table.add_row(r.name, _short_target(r.target), Text(r.status, style=STYLE[r.status]), message)
        c.print(table)
        c.print()
    s = report.summary()
    line = Text()
    for status in ("ok", "warn", "fail", "skipped"):
        line.append(f"{s[status]} {status}", style=STYLE[status] if s[status] else "dim")
        line.append("  ")
    line.append(f"in {report.seconds:.2f} s" + (" (--deep)" if report.deep else ""))
    c.print(line)
    if s["failed_checks"]:
        c.print(Text("failed: " + ", ".join(s["failed_checks"]), style="bold red"))
