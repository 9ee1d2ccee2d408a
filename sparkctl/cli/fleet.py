"""`sparkctl fleet ...`: several clusters (each one of today's inventories) behind one front door.

`up`, `status`, `doctor` and `history` act on every member at once (a thread per member, each as
parallel over its hosts as the cluster command is); `reload`, `restart` and `rollback` roll a change
one member at a time (sparkctl/cli/fleet_rollout.py, registered here when this sparkctl has it).
Every command validates the whole fleet file first: a bad one exits 2 before any host is touched.
"""

from __future__ import annotations

import importlib
from importlib.util import find_spec
from typing import Annotated, Optional

import typer

from sparkctl.cli.options import CheckOpt, FleetOpt, JsonOpt, check_seconds
from sparkctl.cli.unlock import LockWaitOpt

app = typer.Typer(
    help="Run several clusters behind one front door.\n\n"
    "The fleet file: -f FILE or $SPARKCTL_FLEET. up, status, doctor and history work on every member at once; "
    "reload, restart and rollback one member at a time.\n\n"
    "Examples:\n"
    "  # every member, then the front door\n"
    "  sparkctl fleet up -f fleet.yaml\n"
    "  # the rollout a new config folder makes, member by member\n"
    "  sparkctl fleet reload --config-dir next/ --check\n",
    no_args_is_help=True,
)

# the rolling commands: command -> its function in sparkctl.cli.fleet_rollout
ROLLOUT = {"reload": "reload", "restart": "restart", "rollback": "rollback"}


def _load(fleet_file):
    from sparkctl.fleet import keys
    from sparkctl.fleet.model import fleet_path, load_fleet

    fleet = load_fleet(fleet_path(fleet_file))
    keys.authorize(fleet)  # sparkctl's calls to a keyed member send its key
    return fleet


def _say():
    """Progress lines on stderr, one whole line at a time from any member's thread."""
    import sys

    from sparkctl.fleet.up import locked_say

    def write(line: str) -> None:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()

    return locked_say(write)


@app.command("up")
def up(
    fleet_file: FleetOpt = None,
    check: CheckOpt = False,
    json_out: JsonOpt = False,
    force: Annotated[
        bool, typer.Option("--force", help="Restart each member's runtime even if its config hash matches.")
    ] = False,
    side_load: Annotated[
        bool, typer.Option("--side-load", help="Copy images from each head over SSH instead of pulling.")
    ] = False,
    pull: Annotated[bool, typer.Option("--pull", help="Pull the images on every node even if they agree.")] = False,
    timeout: Annotated[
        Optional[float], typer.Option("--timeout", help="Seconds each member's runtime has to serve (default 1800).")
    ] = None,
    wait: LockWaitOpt = 0,
) -> None:
    """Converge every member at once, then the front door.

    Each member exactly as `sparkctl up -i MEMBER.yaml`. Progress on stderr, each line prefixed with its member. A member that fails does not stop the
    others; the run exits 1 naming it. A second run changes nothing and says so; --check prints
    every member's plan and the front door's, and changes nothing.

    Examples:
      sparkctl fleet up --check -f fleet.yaml
      sparkctl fleet up -f fleet.yaml
    """
    from sparkctl.cli.output import print_json
    from sparkctl.fleet.up import fleet_up

    check_seconds("--timeout", timeout, low=1, high=86400, example="1800")
    fleet = _load(fleet_file)
    report = fleet_up(fleet, check, _say(), force=force, wait=wait, side_load=side_load, pull=pull, timeout=timeout)
    if json_out:
        print_json(report.to_dict())
    else:
        print_up(report)
    raise typer.Exit(1 if report.failed else 0)


def print_up(report, c=None) -> None:
    from rich.markup import escape

    from sparkctl.cli.output import answer
    from sparkctl.cli.steps_output import print_recap

    c = c or answer()
    for m in report.members:
        c.print(f"[bold]member {escape(m.member)}[/]")
        if m.recap is not None:
            print_recap(m.recap, c)
        else:
            c.print(f"[bold red]failed[/]: {escape(m.error.message)}", soft_wrap=True)
            if m.error.fix:
                c.print(f"[bold]fix:[/] {escape(m.error.fix)}", soft_wrap=True)
        c.print()
    d = report.front_door
    style = {"ok": "green", "changed": "yellow", "failed": "bold red"}.get(d.get("status"), "dim")
    c.print(f"front door: [{style}]{escape(str(d.get('status')))}[/] {escape(str(d.get('message') or ''))}", soft_wrap=True)
    if report.check or d.get("status") != "ok":  # the plan --check shows is what the run does
        for line in d.get("plan") or []:
            c.print(f"  {escape(line)}", soft_wrap=True)
    if d.get("status") == "failed" and d.get("fix"):
        c.print(f"  [bold]fix:[/] {escape(d['fix'])}", soft_wrap=True)
    for member, what in report.put_back.items():
        c.print(f"  {escape(member)}: {escape(what)}", soft_wrap=True)
    verdict = report.verdict()
    style = "bold red" if report.failed else ("green" if verdict == "nothing to change" else "yellow")
    c.print(f"fleet {escape(report.fleet)}: [{style}]{escape(verdict)}[/]", soft_wrap=True)


@app.command("status")
def status(
    fleet_file: FleetOpt = None,
    json_out: JsonOpt = False,
    sample: Annotated[float, typer.Option("--sample", help="Seconds between the two /metrics scrapes for tok/s.")] = 1.0,
) -> None:
    """Show every member's health, config and tok/s, and the front door.

    Every member at once: health, config (the head's applied hash; is the inventory that config?),
    tok/s, queue. And the front door: its URL, whether it answers, each member's state there. `--json` has
    front_door_url and members. Exit 0 when every member serves its inventory's config and the door
    answers, else 1.

    Examples:
      sparkctl fleet status -f fleet.yaml
    """
    from sparkctl.cli.output import print_json
    from sparkctl.fleet.status import fleet_status

    check_seconds("--sample", sample, low=0.2, high=60, example="1")
    doc = fleet_status(_load(fleet_file), max(0.2, sample))
    if json_out:
        print_json(doc)
    else:
        print_status(doc)
    raise typer.Exit(0 if doc["healthy"] else 1)


HEALTH_STYLE = {"serving": "green", "holding": "yellow", "stale": "yellow", "down": "bold red", "unreachable": "bold red"}
DOOR_STYLE = {"passing": "green", "drained": "yellow", "failing": "bold red"}  # vllm-router's view (fleet/router_admin.py)


def print_status(doc: dict, c=None) -> None:
    from rich.markup import escape
    from rich.table import Table

    from sparkctl.cli.output import answer

    c = c or answer()
    d = doc["front_door"]
    answering = (
        "[green]answering[/]" if d.get("answering") else f"[bold red]not answering[/] ({escape(str(d.get('error') or ''))})"
    )
    t = Table(title=f"fleet {escape(doc['fleet'])}: front door {escape(doc['front_door_url'])} {answering}", title_justify="left")
    for col in ("member", "health", "config", "tok/s", "queue", "front door"):
        t.add_column(col, justify="right" if col in ("tok/s", "queue") else "left", overflow="fold")
    for r in doc["members"]:
        if r["applied_config_hash"] is None:
            config = "[dim]none applied[/]" if r["health"] != "unreachable" else "-"
        else:
            mark = (
                "[green]= inventory[/]" if r["inventory_applied"] else f"[yellow]inventory is {(r['config_hash'] or '?')[:12]}[/]"
            )
            config = f"{r['applied_config_hash'][:12]} {mark}"
        tps = "-" if r["output_tokens_per_s"] is None else f"{r['output_tokens_per_s']:g}"
        queue = "-" if r["running"] is None else f"{r['running']}/{r['waiting']}"
        state = r.get("front_door")
        door = f"[{DOOR_STYLE.get(state, 'dim')}]{state}[/]" if state else "[dim]-[/]"
        seen = (d.get("router") or {}).get(r["member"]) or {}  # vllm-router's own view of it
        if seen.get("circuit") not in (None, "closed"):
            door += f" [red]circuit {seen['circuit']}[/]"
        if (d.get("outstanding") or {}).get(r["member"]):
            door += f" [dim]{d['outstanding'][r['member']]} in flight[/]"
        t.add_row(escape(r["member"]), f"[{HEALTH_STYLE.get(r['health'], '')}]{r['health']}[/]", config, tps, queue, door)
    c.print(t)
    c.print("[dim]queue: requests running/waiting; config: the head's applied config hash[/]")
    if d.get("members") is None and d.get("admin_error"):
        c.print(f"front door admin: [red]{escape(d['admin_error'])}[/]", soft_wrap=True)
    for member, why in (d.get("reasons") or {}).items():
        c.print(f"{escape(member)} at the front door (vllm-router): {escape(why)}", soft_wrap=True)
    for r in doc["members"]:
        if r["health"] != "serving" and r.get("error"):
            c.print(
                f"{escape(r['member'])}: [red]{escape(r['error'])}[/]" + (f" (fix: {escape(r['fix'])})" if r.get("fix") else ""),
                soft_wrap=True,
            )
    c.print(
        "[green]healthy[/]" if doc["healthy"] else "[red]not healthy[/]: run `sparkctl fleet doctor` (or `sparkctl fleet up`)"
    )


@app.command("doctor")
def doctor(
    fleet_file: FleetOpt = None,
    json_out: JsonOpt = False,
    only: Annotated[
        Optional[list[str]],
        typer.Option(
            "--only",
            help="Run only these check groups (comma-separated or repeated): the members' "
            "(ssh, host, gpu, fabric, env, images, caches, engram, weights, runtime, gateway, state, keeper) and fleet.",
        ),
    ] = None,
    ignore: Annotated[
        Optional[list[str]], typer.Option("--ignore", help="Skip these checks by name (comma-separated or repeated).")
    ] = None,
    deep: Annotated[bool, typer.Option("--deep", help="Measure longer (as `sparkctl doctor --deep`).")] = False,
    allow_loading: Annotated[
        bool, typer.Option("--allow-loading", help="A runtime still loading is a warning, not a failure.")
    ] = False,
) -> None:
    """Run every member's doctor at once, then the fleet checks.

    Findings are grouped by member. Fleet checks: fleet.front_door (the door answers), fleet.members_reachable (every member answers
    from the door's host), fleet.same_model (every member serves one model name). Exit 0 when
    nothing fails, 1 when a check fails, 2 on bad input.

    Examples:
      sparkctl fleet doctor -f fleet.yaml
      # only the fabric checks, on every member
      sparkctl fleet doctor --only fabric
    """
    from sparkctl.cli.output import diagnostics, print_json
    from sparkctl.fleet.doctor import fleet_doctor

    fleet = _load(fleet_file)

    def run(progress=lambda t: None):
        return fleet_doctor(fleet, only=only, ignore=ignore, deep=deep, allow_loading=allow_loading, progress=progress)

    if json_out:
        report = run()
        print_json(report.to_dict())
    else:
        with diagnostics().status("sparkctl fleet doctor: gathering facts", spinner="dots") as spin:
            report = run(lambda t: spin.update(f"sparkctl fleet doctor: {t}"))
        print_doctor(report)
    raise typer.Exit(1 if report.failed else 0)


def print_doctor(report, c=None) -> None:
    from rich.markup import escape
    from rich.text import Text

    from sparkctl.cli.doctor import MARK, STYLE, print_summary
    from sparkctl.cli.output import answer
    from sparkctl.transport.redact import redact

    c = c or answer()
    for name, rep in report.members.items():
        c.print(Text(f"member {name}", style="bold"))
        if name in report.errors:
            err = report.errors[name]
            c.print(Text(f"{MARK['failed']} doctor could not run: {redact(err.message)}", style=STYLE["failed"]))
            if err.fix:
                c.print(f"  [bold]fix:[/] {escape(redact(err.fix))}", soft_wrap=True)
        elif rep is not None:
            print_summary(rep, c)
        c.print()
    if report.fleet_results:
        c.print(Text("fleet", style="bold"))
        for r in report.fleet_results:
            c.print(Text(f"{MARK[r.status]} {r.name}  on {r.host}: {redact(r.message)}", style=STYLE[r.status]), soft_wrap=True)
            if r.status in ("failed", "warn") and r.fix:
                c.print(f"  [bold]fix:[/] {escape(redact(r.fix))}", soft_wrap=True)
            if r.runbook and r.status in ("failed", "warn"):
                c.print(f"  [bold]runbook:[/] {r.runbook}", soft_wrap=True)
        c.print()
    s = report.summary()
    line = ", ".join(f"{s[k]} {k}" for k in ("ok", "warn", "failed", "skipped"))
    c.print(
        f"fleet {escape(report.fleet)}: {line} in {report.seconds:.2f} s "
        f"(members at once: {', '.join(f'{m} {t:.1f} s' for m, t in report.member_seconds.items())})",
        soft_wrap=True,
    )
    if s["failed_checks"]:
        c.print(Text("failed: " + ", ".join(s["failed_checks"]), style="bold red"), soft_wrap=True)


@app.command("history")
def history(
    fleet_file: FleetOpt = None,
    json_out: JsonOpt = False,
    last: Annotated[
        int, typer.Option("--last", "-n", help="Show the newest N events of the fleet (0: all the heads keep).", min=0)
    ] = 20,
) -> None:
    """Show every member's history, merged in time order.

    Every member's applied configs, reloads, restarts and rollbacks, each naming its member. Exit 1
    when a member's head could not be read (the others' events are still shown).

    Examples:
      sparkctl fleet history -f fleet.yaml
    """
    from sparkctl.cli.output import print_json
    from sparkctl.fleet.history import fleet_history

    doc = fleet_history(_load(fleet_file), last)
    if json_out:
        print_json(doc)
    else:
        print_history(doc)
    raise typer.Exit(1 if doc["failed_members"] else 0)


def print_history(doc: dict, c=None) -> None:
    from rich.markup import escape
    from rich.table import Table

    from sparkctl.cli.output import answer

    c = c or answer()
    t = Table(title=f"fleet {escape(doc['fleet'])}: events of every member, oldest first", title_justify="left")
    for col in ("at", "member", "command", "outcome", "config", "by", "downtime"):
        t.add_column(col, overflow="fold", no_wrap=col == "at")
    for e in doc["events"]:
        down = f"{e['downtime_seconds']:.2f} s" if e.get("downtime_seconds") is not None else "-"
        t.add_row(
            *(
                escape(str(v))
                for v in (
                    e.get("at", "?"),
                    e["member"],
                    e.get("command", "?"),
                    e.get("outcome", "?"),
                    (e.get("config_hash") or "?")[:12],
                    e.get("by", "?"),
                    down,
                )
            )
        )
    c.print(t)
    for name, m in doc["members"].items():
        if m["error"]:
            c.print(f"{escape(name)}: [red]{escape(m['error']['error'])}[/]", soft_wrap=True)
        else:
            c.print(f"{escape(name)}: last good config {m['last_good'] or '(none)'}", soft_wrap=True)


def _register_rollout() -> None:
    """reload, restart and rollback, from sparkctl.cli.fleet_rollout when this sparkctl has it."""
    if find_spec("sparkctl.cli.fleet_rollout") is None:
        return
    rollout = importlib.import_module("sparkctl.cli.fleet_rollout")
    for name, attr in ROLLOUT.items():
        app.command(name)(getattr(rollout, attr))


_register_rollout()
