"""`sparkctl down`: drain and stop the runtime; images, caches and Engram tables stay."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from sparkctl.cli.options import InventoryOpt, JsonOpt, require_inventory


def down(
    inventory: InventoryOpt = None,
    json_out: JsonOpt = False,
    drain: Annotated[
        Optional[int],
        typer.Option("--drain", help="Seconds to let in-flight requests finish (default: runtime.shutdown_timeout)."),
    ] = None,
) -> None:
    """Stop the runtime, head first (it drains in-flight requests), then worker and drafter."""
    from sparkctl.cli.output import console, print_json
    from sparkctl.inventory.loader import load_inventory
    from sparkctl.runtime import containers
    from sparkctl.transport.ssh import Fleet

    inv = load_inventory(require_inventory(inventory))
    timeout = inv.runtime.shutdown_timeout + 15 if drain is None else drain
    order = sorted(inv.hosts, key=lambda h: {"head": 0, "worker": 1}.get(inv.hosts[h].role, 2))
    results, failed = [], False
    with Fleet(inv) as fleet:
        for host in order:  # one after another: the head must be gone before its workers
            out = fleet.map(lambda s: containers.stop(s.docker(), inv.cluster.name, timeout=timeout), hosts=[host])[host]
            failed |= not out.ok
            status = "failed" if not out.ok else ("changed" if out.value else "ok")
            msg = out.error if not out.ok else (f"stopped {', '.join(out.value)}" if out.value else "no runtime container")
            results.append({"host": host, "status": status, "message": msg, "seconds": round(out.seconds, 2)})
            if not json_out:
                console().print(f"{status:>7} {host:<9} {msg}")
    if json_out:
        print_json({"results": results, "failed": failed})
    raise typer.Exit(1 if failed else 0)
