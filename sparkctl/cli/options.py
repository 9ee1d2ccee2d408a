"""Options every command shares, so -i/--inventory and --json mean the same everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

InventoryOpt = Annotated[
    Optional[Path],
    typer.Option(
        "-i",
        "--inventory",
        envvar="SPARKCTL_INVENTORY",
        help="Inventory file naming the cluster (default: $SPARKCTL_INVENTORY).",
        show_default=False,
    ),
]

JsonOpt = Annotated[
    bool,
    typer.Option("--json", help="Print exactly one JSON document on stdout (human output is suppressed)."),
]

VerboseOpt = Annotated[
    bool,
    typer.Option("-v", "--verbose", help="On a terminal, print every word of each result (wrapped), not one line each."),
]

CheckOpt = Annotated[
    bool,
    typer.Option("--check", help="Show the plan for every host and change nothing."),
]


def require_inventory(path: Optional[Path]) -> Path:
    from sparkctl.errors import InputError

    if path is None:
        raise InputError(
            "no inventory given",
            fix="pass -i FILE or set SPARKCTL_INVENTORY (no inventory yet? `sparkctl inventory init --from dspark|splice|lab`)",
        )
    return path
