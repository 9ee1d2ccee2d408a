"""`sparkctl down`: drain and stop the runtime; images, caches and Engram tables stay."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from sparkctl.cli.options import CheckOpt, InventoryOpt, JsonOpt, VerboseOpt, check_seconds
from sparkctl.cli.unlock import LockWaitOpt


def down(
    inventory: InventoryOpt = None,
    check: CheckOpt = False,
    json_out: JsonOpt = False,
    drain: Annotated[
        Optional[int],
        typer.Option("--drain", help="Seconds to let in-flight requests finish (default: runtime.shutdown_timeout)."),
    ] = None,
    wait: LockWaitOpt = 0,
    verbose: VerboseOpt = False,
) -> None:
    """Stop the runtime, head first, then worker and drafter.

    The head drains in-flight requests first. First of all the keeper goes (its systemd unit, its
    SSH key on every host, its files), so nothing brings back what down stops; the gateway goes
    last. Runs playbooks/down.yaml on the same runner as `up`: --check lists what would stop.
    Images, the model's weights, caches and Engram tables stay.

    Examples:
      # what would stop, stopping nothing
      sparkctl down --check
      # stop, giving in-flight requests up to 60 s to finish
      sparkctl down --drain 60
    """
    from sparkctl.cli.up import run_steps

    check_seconds("--drain", drain, low=0, high=3600, example="60")  # the bound of runtime.shutdown_timeout
    run_steps(inventory, "down", check, json_out, drain=drain, wait=wait, verbose=verbose)
