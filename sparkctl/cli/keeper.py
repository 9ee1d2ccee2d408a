"""`sparkctl keeper run`: the keeper's loop, as the systemd unit `up` installs on the head runs it
(docs/keeper.md). It prints one line each time what it sees changes (the unit's journal)."""

from __future__ import annotations

from typing import Annotated

import typer

from sparkctl.cli.options import InventoryOpt, require_inventory

app = typer.Typer(
    help="Bring the cluster back by itself after a crash or a reboot.\n\n"
    "`sparkctl up` installs it on the head as a systemd unit (sparkctl-keeper.service) that runs "
    "`sparkctl keeper run`; `sparkctl down` and keeper.enabled: false remove it.\n\n"
    "Examples:\n"
    "  # what the unit runs (on the head)\n"
    "  sparkctl keeper run -i /etc/sparkctl/keeper/inventory.yaml\n"
    "  # one look at the cluster, acting if it must, then exit\n"
    "  sparkctl keeper run --once\n",
    no_args_is_help=True,
)


@app.command("run")
def run(
    inventory: InventoryOpt = None,
    once: Annotated[bool, typer.Option("--once", help="One look (and the recovery it calls for), then exit.")] = False,
) -> None:
    """Watch the cluster and recover it through `sparkctl restart`'s path.

    Acts only when no sparkctl command holds the cluster lock, after keeper.grace_s, and gives up
    after keeper.max_recoveries within keeper.window_s (the front door then answers 503 naming why).
    SIGTERM ends it (a recovery under way stops like a Ctrl-C'd restart: the lock released).

    Examples:
      # what the systemd unit runs on the head
      sparkctl keeper run -i /etc/sparkctl/keeper/inventory.yaml
      # one look, and the recovery it calls for, then exit
      sparkctl keeper run --once
    """
    import signal
    import threading
    import time

    from sparkctl.inventory.loader import load_inventory
    from sparkctl.keeper.loop import Keeper

    inv = load_inventory(require_inventory(inventory), control_machine=True)

    def say(line: str) -> None:
        print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}", flush=True)

    stop = threading.Event()
    # between recoveries SIGTERM ends the loop at once; during one, the restart's own handler
    # (lock.cluster_lock) turns it into an interrupt that releases the lock
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    say(
        f"keeper for cluster {inv.cluster.name}: grace {inv.keeper.grace_s:g} s, at most "
        f"{inv.keeper.max_recoveries} recoveries in {inv.keeper.window_s:g} s"
    )
    try:
        Keeper(inv, say=say).run(stop, once=once)
    except KeyboardInterrupt:
        say("stopped")
