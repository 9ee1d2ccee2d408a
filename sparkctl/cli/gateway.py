"""`sparkctl gateway status|release`: the front door's admin interface from the control machine.

Over the cluster's SSH session to the head, `docker exec sparkctl-gateway python3 -m
sparkctl.gateway.ctl ...` (the admin socket is reachable from the head only, root only). `release`
is for a hold left behind by a change that died (doctor's gateway.holding): it refuses while a
live sparkctl run holds the cluster lock, whose change releases the hold itself when its engine serves.
"""

from __future__ import annotations

from typing import Annotated

import typer

from sparkctl.cli.options import InventoryOpt, JsonOpt, require_inventory

app = typer.Typer(
    help="Show or release the front door on the head (sparkctl-gateway).\n\n"
    "What it does now, and releasing a hold a change left behind.\n\n"
    "Examples:\n"
    "  sparkctl gateway status\n"
    "  sparkctl gateway release\n",
    no_args_is_help=True,
)

CTL_TIMEOUT_S = 30.0


def _ctl(session, *args: str) -> dict:
    """One admin call on the head; its JSON answer. HostError naming the gateway when it fails."""
    import json

    from sparkctl.errors import HostError
    from sparkctl.launch.gateway import CONTAINER

    r = session.run(["docker", "exec", CONTAINER, "python3", "-m", "sparkctl.gateway.ctl", *args], timeout=CTL_TIMEOUT_S)
    if not r.ok:
        raise HostError(
            f"{session.name}: {CONTAINER} did not answer `{args[0]}` (exit {r.exit_code}): "
            f"{(r.stderr.strip() or r.stdout.strip())[-400:]}",
            fix=f"is it running? `sparkctl doctor --only gateway`; `sparkctl up` starts {CONTAINER}",
        )
    try:
        return json.loads(r.stdout)
    except ValueError:
        raise HostError(f"{session.name}: {CONTAINER} answered no JSON: {r.stdout.strip()[:200]}") from None


def _head(inv):
    from sparkctl.errors import InputError

    if not inv.gateway.enabled:
        raise InputError(
            "this inventory has no gateway (gateway.enabled: false)",
            fix="nothing to release: the engine serves runtime.port itself",
        )
    return inv.hosts_with_role("head")[0]


def _say(doc: dict) -> str:
    if doc.get("state") != "holding":
        return f"passing: {doc.get('in_flight', 0)} in flight, upstream {doc.get('upstream')}"
    h = doc.get("hold")
    if h:
        what = f"holding for {h['reason']} since {h['held_for_s']:.0f} s, ends by itself in {h['expires_in_s']:.0f} s"
    else:
        what = f"holding: the engine has refused connections for {doc.get('upstream_down_for_s') or 0:.0f} s"
    return f"{what}; {doc.get('held_requests', 0)} held, upstream {doc.get('upstream')}"


@app.command("status")
def status(inventory: InventoryOpt = None, json_out: JsonOpt = False) -> None:
    """Show the gateway's state: passing or holding, and what it holds.

    From its admin interface: the hold, and the requests it holds.

    Examples:
      sparkctl gateway status -i my-cluster.yaml
    """
    from sparkctl.cli.output import answer, print_json
    from sparkctl.inventory.loader import load_inventory
    from sparkctl.transport.ssh import Fleet

    inv = load_inventory(require_inventory(inventory), control_machine=True)
    head = _head(inv)
    with Fleet(inv, hosts=[head]) as fleet:
        doc = _ctl(fleet[head], "status")
    if json_out:
        print_json(doc)
    else:
        answer().print(_say(doc), soft_wrap=True)


@app.command("release")
def release(
    inventory: InventoryOpt = None,
    json_out: JsonOpt = False,
    force: Annotated[
        bool, typer.Option("--force", help="Release even while a live sparkctl run holds the cluster lock.")
    ] = False,
) -> None:
    """Send the held requests on and stop holding.

    For a hold a change left behind (it died mid-reload). Refused while a live sparkctl run holds the
    cluster lock: its change releases the hold when the new engine serves, and releasing earlier
    sends requests into an engine that is not there.

    Examples:
      sparkctl gateway release
    """
    from sparkctl.cli.output import answer, print_json
    from sparkctl.errors import InputError
    from sparkctl.inventory.loader import load_inventory
    from sparkctl.lock import read_holder
    from sparkctl.transport.ssh import Fleet

    inv = load_inventory(require_inventory(inventory), control_machine=True)
    head = _head(inv)
    with Fleet(inv, hosts=[head]) as fleet:
        session = fleet[head]
        holder = read_holder(session)
        if holder is not None and holder.gone() is None and not force:
            raise InputError(
                f"{holder.describe()} holds the cluster lock and is alive: its change releases the hold when the engine serves",
                fix="wait for it (`sparkctl history` when it ends); --force releases anyway",
            )
        doc = _ctl(session, "release")
    if json_out:
        print_json(doc)
    else:
        answer().print(f"released {doc.get('released', 0)} held request(s); " + _say(doc), soft_wrap=True)
