"""`sparkctl lab up | down | status`: the simulated cluster tests and demos run against."""

from __future__ import annotations

import typer

app = typer.Typer(help="The lab: a simulated three-host cluster on this machine (needs root).", no_args_is_help=True)
