"""`sparkctl fleet ...`: several clusters behind one front door (docs/fleets.md).

Minimal group for the rollout's commands until the fleet CLI (up, status, doctor, history) lands;
that branch owns this file and registers the same three functions."""

from __future__ import annotations

import typer

from sparkctl.cli import fleet_rollout

app = typer.Typer(help="A fleet of clusters behind one front door: rolled changes one member at a time.",
                  no_args_is_help=True)  # fmt: skip
app.command("reload")(fleet_rollout.reload)
app.command("restart")(fleet_rollout.restart)
app.command("rollback")(fleet_rollout.rollback)
