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


def check_seconds(option: str, value: Optional[float], *, low: float, high: Optional[float] = None, example: str) -> None:
    """Refuse a duration option outside [low, high] (nan and inf included: click's ranges let nan
    through, and an infinite wait is no deadline). Exit 2 naming the option."""
    import math

    from sparkctl.errors import InputError

    if value is None or (math.isfinite(value) and value >= low and (high is None or value <= high)):
        return
    bound = f"from {low:g} to {high:g}" if high is not None else f"at least {low:g}"
    raise InputError(f"{option} {value:g}: must be a number of seconds {bound}", fix=f"e.g. {option} {example}")


FleetOpt = Annotated[
    Optional[Path],
    typer.Option(
        "-f",
        "--fleet",
        envvar="SPARKCTL_FLEET",
        help="Fleet file naming the member clusters and the front door (default: $SPARKCTL_FLEET).",
        show_default=False,
    ),
]
