"""`sparkctl inventory validate | show | schema`."""

from __future__ import annotations

import typer

app = typer.Typer(help="Validate, show and describe inventory files.", no_args_is_help=True)
