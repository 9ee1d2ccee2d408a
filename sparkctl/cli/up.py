"""`sparkctl up`: converge the cluster to the inventory, changing only what is not already right."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from sparkctl.cli.options import CheckOpt, InventoryOpt, JsonOpt, VerboseOpt, check_seconds, require_inventory
from sparkctl.cli.unlock import LockWaitOpt
from sparkctl.converge import converge


def run_steps(
    inventory_path,
    playbook: str,
    check: bool,
    json_out: bool,
    force: bool = False,
    wait: float = 0,
    verbose: bool = False,
    **options,
):
    """Load + validate the inventory and the playbook (before any host is touched), then run it.
    `options` are the steps' (RunContext.options: steps/base.py RunOptions); a changing run holds the
    cluster lock, --check takes none."""
    from sparkctl.inventory.loader import load_inventory
    from sparkctl.steps.base import RunOptions
    from sparkctl.transport.ssh import Fleet

    inv = load_inventory(require_inventory(inventory_path), control_machine=True)
    with Fleet(inv).connect_early() as fleet:  # SSH handshakes run while the rest is imported and validated
        from sparkctl.cli.output import print_json
        from sparkctl.cli.steps_output import LiveReport, print_recap

        live = LiveReport(quiet=json_out, hosts=list(inv.hosts), verbose=verbose)
        with live:
            recap, ctx = converge(inv, fleet, playbook, check, live=live, force=force, wait=wait, options=RunOptions(**options))
    head = ctx.facts.get(inv.hosts_with_role("head")[0])
    journal = head.journal if head is not None else None
    if json_out:
        from sparkctl.records import dump

        doc = recap.to_dict()
        if ctx.outputs.runtime_start:
            doc["runtime_start"] = dump(ctx.outputs.runtime_start)
        doc["interrupted_reload"] = dump(journal) if journal else None
        print_json(doc)
    else:
        print_recap(recap)
        if journal:
            from sparkctl.cli.output import diagnostics

            diagnostics().print(
                f"[bold yellow]note:[/] {journal.interrupted()}: finish it with `sparkctl reload --resume "
                "--config NEW`, or `sparkctl rollback`",
                soft_wrap=True,
            )
    raise typer.Exit(1 if recap.failed else 0)


def up(
    inventory: InventoryOpt = None,
    check: CheckOpt = False,
    json_out: JsonOpt = False,
    force: Annotated[bool, typer.Option("--force", help="Restart the runtime even if its config hash matches.")] = False,
    side_load: Annotated[
        bool,
        typer.Option(
            "--side-load",
            help="Copy images over SSH from a node that holds the verified image, instead of pulling "
            "(an image sparkctl cannot verify is never copied).",
        ),
    ] = False,
    pull: Annotated[
        bool, typer.Option("--pull", help="Pull the images on every node even if they agree (pick up a new tag).")
    ] = False,
    timeout: Annotated[
        Optional[float], typer.Option("--timeout", help="Seconds to wait for the runtime to serve (default 1800).")
    ] = None,
    wait: LockWaitOpt = 0,
    verbose: VerboseOpt = False,
) -> None:
    """Converge the cluster to what its inventory says.

    Steps (playbooks/up.yaml): preflight, fabric, images, weights, caches, engram, stop, gateway,
    runtime, throughput, record, keeper. Every step gathers facts, plans, and applies only its plan;
    a second run changes nothing and says so. --check prints every plan and changes nothing.

    With a `weights:` section the first run downloads the checkpoint once (~167 GB for DeepSeek V4
    Flash) and copies it to the other nodes over the fabric. With `keeper.enabled` (the default) it
    installs the keeper: a systemd unit on the head, with an SSH key of its own authorized on every
    host, that brings the cluster back after a crash or a reboot (`sparkctl down` removes both).

    Examples:
      # what up would change on every host, changing nothing
      sparkctl up --check -i my-cluster.yaml
      # converge; a second run changes nothing and says so
      sparkctl up -i my-cluster.yaml
      # wait up to 5 minutes for another run's cluster lock
      sparkctl up --wait 300
    """
    check_seconds("--timeout", timeout, low=1, high=86400, example="1800")
    run_steps(
        inventory, "up", check, json_out, force=force, side_load=side_load, pull=pull, timeout=timeout, wait=wait, verbose=verbose
    )
