"""`sparkctl lab up | down | status | fault`: the simulated cluster tests and demos run against."""

from __future__ import annotations

from typing import Optional

import typer

from sparkctl.cli.options import JsonOpt

app = typer.Typer(
    help="Run the lab: a simulated three-host cluster on this machine.\n\n"
    "It needs root. SPARKCTL_LAB_INSTANCE=1 or 2 works on another lab beside it (namespaces lab1-*, 10.231.128.0/17, "
    "/var/lib/sparkctl-lab1/inventory.yaml; lab2-*, 10.231.16.0/20 and 10.231.112.0/20, "
    "/var/lib/sparkctl-lab2/...): the test suite runs two thirds of its lab tests there.\n\n"
    "Examples:\n"
    "  # bring it up, then converge it as a real cluster\n"
    "  sparkctl lab up\n"
    "  sparkctl up -i /var/lib/sparkctl-lab/inventory.yaml\n"
    "  # break it as hardware breaks, for doctor to name\n"
    "  sparkctl lab fault worker mtu enP2p1s0f0np0 --value 1500\n",
    no_args_is_help=True,
)


def lab_api():
    """The lab package (`sparkctl-lab`, in this repository's lab/ folder): a development and
    demo tool, not part of what operators install."""
    try:
        from sparkctl_lab import api
    except ImportError:
        from sparkctl.errors import InputError

        raise InputError(
            "the lab is not installed (it is a development tool, kept out of the sparkctl package)",
            fix="from a sparkctl checkout: `pip install -e ./lab` (or run `./dev.sh demo`, which installs it)",
        ) from None
    return api


def _progress(msg: str) -> None:
    from sparkctl.cli.output import diagnostics

    diagnostics().print(f"[dim]lab:[/] {msg}", soft_wrap=True)


def _report(result: dict, verb: str, json_out: bool) -> None:
    from sparkctl.cli.output import answer, print_json

    if json_out:
        print_json(result)
        return
    c = answer()
    if result["changed"]:
        for line in result["changes"]:
            c.print(f"  [green]+[/] {line}", soft_wrap=True)
        c.print(f"lab {verb} in {result['seconds']:.1f}s")
    else:
        c.print(f"lab already {verb}: nothing changed ({result['seconds']:.1f}s)")


@app.command()
def up(
    clusters: Optional[int] = typer.Option(
        None,
        "--clusters",
        metavar="N",
        help="Spark pairs: 1 (head, worker, offload) or 2 (and head2, worker2, with inventory-2.yaml and fleet.yaml "
        "for a fleet); 1 removes the second pair. Default: as many as the lab has (1 on a fresh lab).",
    ),
    json_out: JsonOpt = False,
) -> None:
    """Bring the lab up: namespaces, links, hosts, registry and image.

    Each host runs sshd and dockerd; the registry holds the runtime image. Idempotent.

    Examples:
      sparkctl lab up
      # and a second Spark pair, with a fleet file for both
      sparkctl lab up --clusters 2
    """
    api = lab_api()

    result = api.up(progress=_progress, clusters=clusters)
    _report(result, "up", json_out)
    if not json_out:
        from sparkctl.cli.output import answer

        answer().print(f"inventory: {api.INVENTORY_PATH}   ssh: ssh -F {api.SSH_CONFIG} head", soft_wrap=True)
        if api.clusters() == 2:
            answer().print(f"inventory-2: {api.INVENTORY_2_PATH}   fleet: {api.FLEET_PATH}", soft_wrap=True)


@app.command()
def down(json_out: JsonOpt = False) -> None:
    """Stop the lab and remove everything it made.

    Caches under /var/cache/sparkctl-lab stay.

    Examples:
      sparkctl lab down
    """
    api = lab_api()

    result = api.down(progress=_progress)
    _report(result, "down", json_out)


@app.command()
def status(json_out: JsonOpt = False) -> None:
    """Show the lab's hosts, links, registry, model hub, image and faults.

    With namespaces, pids and sshd/dockerd health. Exit 1 unless all is up.

    Examples:
      sparkctl lab status
    """
    from sparkctl.cli.output import answer, print_json

    api = lab_api()

    doc = api.status()
    if json_out:
        print_json(doc)
    else:
        from rich.console import Console

        # the links table needs ~120 columns; wider than a pipe's default 80
        _render_status(doc, Console(highlight=False, width=max(120, answer().width)))
    raise typer.Exit(0 if doc["up"] else 1)


def _render_status(doc: dict, c) -> None:
    from rich.table import Table

    ok = lambda b: "[green]ok[/]" if b else "[red]down[/]"  # noqa: E731
    c.print(
        f"lab: {'[green]up[/]' if doc['up'] else '[red]not up[/]'}   clusters {doc['clusters']}   dir {doc['lab_dir']}   "
        f"namespaces {', '.join(doc['namespaces']) or '-'}",
        soft_wrap=True,
    )
    t = Table(title="hosts", title_justify="left")
    for col in ("host", "role", "netns", "init pid", "sshd", "dockerd", "rss MiB"):
        t.add_column(col)
    for name, h in doc["hosts"].items():
        t.add_row(
            name if h["expected"] else f"{name} [red](left over: lab up removes it)[/]",
            h["role"],
            h["netns"] if h["netns_exists"] else "[red]-[/]",
            str(h["init_pid"] or "-"),
            f"{ok(h['sshd']['healthy'])} {h['sshd']['pid'] or ''}",
            f"{ok(h['dockerd']['healthy'])} {h['dockerd']['pid'] or ''} {h['dockerd']['version'] or ''}",
            str(h["rss_mib"]),
        )
    c.print(t)
    lt = Table(title="links", title_justify="left")
    for col in ("host", "device", "address", "mtu", "state", "speed", "rdma", "peer"):
        lt.add_column(col)
    for name, h in doc["hosts"].items():
        for ln in h["links"]:
            if not ln["present"]:
                lt.add_row(name, ln["device"], "[red]missing[/]", "", "", "", "", ln["peer"])
                continue
            mtu = str(ln["mtu"]) if ln["mtu"] == ln["expected_mtu"] else f"[red]{ln['mtu']}[/] (want {ln['expected_mtu']})"
            st = ln["state"] if ln["state"] == "up" else f"[red]{ln['state']}[/]"
            rdma = " ".join(f"{r}:{s}" for r, s in ln["rdma_state"].items())
            lt.add_row(
                name,
                ln["device"],
                ",".join(ln["addresses"]),
                mtu,
                st,
                f"{ln['speed_mbps']}Mb/s" if ln["speed_mbps"] > 0 else "-",
                rdma,
                ln["peer"],
            )
    c.print(lt)
    r, i = doc["registry"], doc["image"]
    c.print(
        f"runner: {doc['runner']['device']} {doc['runner']['address']} ({doc['runner']['state'] or 'absent'}), "
        f"route unreachable {doc['runner']['subnet']}: {'yes' if doc['runner']['route_unreachable'] else 'no'}",
        soft_wrap=True,
    )
    c.print(f"registry: {r['address']} {ok(r['healthy'])} pid {r['pid'] or '-'}", soft_wrap=True)
    h = doc["hub"]  # the lab's model hub (sparkctl_lab/hub.py), where `up` downloads the weights from
    c.print(f"model hub: {h['endpoint']} {ok(h['healthy'])} pid {h['pid'] or '-'}", soft_wrap=True)
    c.print(
        f"image: {i['name']} "
        + (
            f"{i['id'][:19]} key {i['key']}{'' if i['current'] else ' [yellow](stale: sim changed, run lab up)[/]'}"
            if i["present"]
            else "[red]absent[/]"
        ),
        soft_wrap=True,
    )
    c.print("faults: " + ("; ".join(doc["faults"]) if doc["faults"] else "none"), soft_wrap=True)


@app.command()
def fault(
    host: Optional[str] = typer.Argument(None, help="Lab host: head, worker or offload (head2, worker2 with two pairs)."),
    kind: Optional[str] = typer.Argument(
        None, help="link-down | mtu | speed (also degraded-speed) | rdma-down | gpu-missing | driver | gpu-process."
    ),
    target: Optional[str] = typer.Argument(None, help="Device (netdev or RDMA device) or GPU index the fault hits."),
    value: Optional[str] = typer.Option(
        None,
        "--value",
        help="mtu: bytes (1500); speed: Mb/s the rail carries (250, of the 1000 a lab rail has); "
        "driver: version (580.82.09); gpu-process: MiB (16384).",
    ),
    clear: bool = typer.Option(False, "--clear", help="Switch this fault off again."),
    clear_all: bool = typer.Option(False, "--clear-all", help="Switch every fault off on every host."),
    json_out: JsonOpt = False,
) -> None:
    """Switch a fault on or off.

    Link down and wrong MTU are real `ip link` changes.

    Examples:
      # a rail of the worker drops to MTU 1500
      sparkctl lab fault worker mtu enP2p1s0f0np0 --value 1500
      # and back
      sparkctl lab fault worker mtu enP2p1s0f0np0 --clear
      # every fault off on every host
      sparkctl lab fault --clear-all
    """
    from sparkctl.cli.output import answer, print_json
    from sparkctl.errors import InputError

    api = lab_api()

    if clear_all:
        if host or kind:
            raise InputError("--clear-all takes no HOST or KIND", fix="sparkctl lab fault --clear-all")
        changes = api.clear_faults()
        if json_out:
            print_json({"cleared": changes})
        else:
            answer().print("faults cleared: " + ("; ".join(changes) if changes else "there were none"), soft_wrap=True)
        return
    if not host or not kind:
        raise InputError(
            "fault needs HOST and KIND (or --clear-all)",
            fix="e.g. sparkctl lab fault worker link-down enp1s0f0np0   |   sparkctl lab fault --clear-all",
        )
    result = api.fault(host, kind, target, value, clear=clear)
    if json_out:
        print_json(result)
    else:
        verb = "cleared" if clear else "set"
        answer().print(f"{host}: {kind} {target or ''} {verb}; faults now: {result['faults'] or 'none'}", soft_wrap=True)


@app.command()
def drill(
    name: Optional[str] = typer.Argument(None, help="The drill to run (`--list` shows them)."),
    list_: bool = typer.Option(False, "--list", help="List the drills: what breaks, the check, the runbook."),
    json_out: JsonOpt = False,
) -> None:
    """Break the lab as a real cluster breaks, to practise a runbook.

    Each drill has its runbook in docs/runbooks/.

    Then: `sparkctl doctor` names the check, the runbook's fix commands repair it.
    `sparkctl lab fault --clear-all` does not undo a drill: its runbook does.

    Examples:
      # the drills: what breaks, the check, the runbook
      sparkctl lab drill --list
      sparkctl lab drill wrong-mtu
    """
    from sparkctl.cli.output import answer, print_json
    from sparkctl.errors import InputError

    drills = lab_api().drills
    if list_:
        rows = [drills.describe(d) for d in drills.DRILLS.values()]
        if json_out:
            print_json({"drills": rows})
            return
        c = answer()
        for r in rows:
            c.print(f"[bold]{r['name']}[/]: {r['what']}", soft_wrap=True)
            c.print(
                f"    doctor: {r['check']} on {r['host']}   runbook: {r['runbook']}"
                + (f"   alerts: {', '.join(r['alerts'])}" if r["alerts"] else ""),
                soft_wrap=True,
            )
        return
    if not name:
        raise InputError("drill needs a NAME (or --list)", fix="sparkctl lab drill --list")
    result = drills.run(name)
    if json_out:
        print_json(result)
        return
    c = answer()
    c.print(f"drill {name}: {result['done']}", soft_wrap=True)
    c.print(
        f"now: `sparkctl doctor` (it names {result['check']} on {result['host']}), then follow {result['runbook']}",
        soft_wrap=True,
    )
