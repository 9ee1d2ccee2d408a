"""`sparkctl unlock`: break the cluster lock left by a run that is gone (after a confirmation)."""

from __future__ import annotations

from typing import Annotated

import typer

from sparkctl.cli.options import InventoryOpt, JsonOpt, require_inventory

# `up` and `down` take the cluster lock; this is how long they wait for another run's.
LockWaitOpt = Annotated[
    float,
    typer.Option(
        "--wait",
        min=0,
        help="Seconds to wait for the cluster lock if another run holds it (default 0: refuse at once, naming it).",
    ),
]


def unlock(
    inventory: InventoryOpt = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Break the lock without asking.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Break the cluster lock on the head, after asking.

    It shows who holds the lock first. Only for a lock whose run is gone (killed, its machine or
    link lost): breaking the lock of a live run lets two runs change the cluster at once. `up` and
    `down` say when a holder looks gone.

    Examples:
      # show who holds the lock, then ask before breaking it
      sparkctl unlock
      # break it without asking (a script that knows the holder is gone)
      sparkctl unlock --yes
    """
    import sys

    from sparkctl.cli.output import answer, print_json
    from sparkctl.errors import InputError
    from sparkctl.inventory.loader import load_inventory
    from sparkctl.lock import LOCK_PATH, break_lock, read_holder
    from sparkctl.transport.ssh import Fleet

    inv = load_inventory(require_inventory(inventory), control_machine=True)
    head = inv.hosts_with_role("head")[0]
    with Fleet(inv, hosts=[head]) as fleet:
        session = fleet[head]
        holder = read_holder(session)
        if holder is None:
            if json_out:
                print_json({"locked": False, "removed": False, "holder": None})
            else:
                answer().print(f"cluster {inv.cluster.name} is not locked (no {LOCK_PATH} on {head})")
            raise typer.Exit(0)
        why = holder.gone()
        state = (
            f"looks gone: {why}"
            if why
            else (
                f"LOOKS ALIVE (heartbeat {holder.heartbeat_age:.0f} s ago): breaking its lock lets two runs change "
                "the cluster at once"
            )
        )
        if not json_out:
            answer().print(f"cluster {inv.cluster.name} is locked by {holder.describe()}\nthe holder {state}")
        if not yes:
            if json_out or not sys.stdin.isatty():
                raise InputError(
                    "breaking the cluster lock needs a confirmation",
                    fix="rerun with --yes once you are sure no sparkctl run is changing this cluster",
                )
            if not typer.confirm("break the lock?", default=False, err=True):
                answer().print("left the lock in place")
                raise typer.Exit(1)
        removed = break_lock(session, holder)
    if json_out:
        print_json({"locked": not removed, "removed": removed, "holder": holder.to_dict()})
    else:
        answer().print("lock broken" if removed else "the lock changed meanwhile (another run took it): left in place")
    raise typer.Exit(0 if removed else 1)
