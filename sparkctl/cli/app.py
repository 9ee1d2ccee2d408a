"""The `sparkctl` command: one typer app, one module per noun under sparkctl/cli/.

Import cost matters (a no-op `up` has a 1 s budget): noun modules import only typer at
module level and load their heavy libraries inside the command that needs them.
"""

from __future__ import annotations

import sys

import typer

from sparkctl.cli import alerts as alerts_cli
from sparkctl.cli import inventory as inventory_cli
from sparkctl.cli import lab as lab_cli
from sparkctl.cli import bench as bench_cli
from sparkctl.cli import doctor as doctor_cli
from sparkctl.cli import pending
from sparkctl.cli import down as down_cli
from sparkctl.cli import reload as reload_cli
from sparkctl.cli import render as render_cli
from sparkctl.cli import status as status_cli
from sparkctl.cli import unlock as unlock_cli
from sparkctl.cli import up as up_cli

app = typer.Typer(
    name="sparkctl",
    help=(
        "Bring up and run a DeepSeek V4 Flash cluster of two DGX Sparks (head + worker, tensor "
        "parallel over ConnectX-7 RoCE) and an optional x86 offload host, from one inventory file.\n\n"
        "Exit codes: 0 success, 1 a check or step failed, 2 bad input or usage."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

app.add_typer(inventory_cli.app, name="inventory")
app.add_typer(lab_cli.app, name="lab")
app.command("up")(up_cli.up)
app.command("down")(down_cli.down)
app.command("unlock")(unlock_cli.unlock)
app.command("render")(render_cli.render)
app.command("status")(status_cli.status)
app.add_typer(bench_cli.app, name="bench")
app.command("doctor")(doctor_cli.doctor)
app.command("reload")(reload_cli.reload)
app.command("restart")(reload_cli.restart)
app.command("rollback")(reload_cli.rollback)
app.command("history")(reload_cli.history)
app.command("alerts")(alerts_cli.alerts)
pending.register(app, skip={"bench", "doctor"})  # placeholders for whatever is not registered above


@app.callback(invoke_without_command=True)
def _root(
    version: bool = typer.Option(False, "--version", help="Print sparkctl's version and exit."),
) -> None:
    if version:
        from sparkctl import __version__

        typer.echo(__version__)
        raise typer.Exit(0)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: operator mistakes become a message and exit code, not a traceback."""
    from sparkctl.errors import SparkctlError

    args = sys.argv[1:] if argv is None else argv
    try:
        app(args=args, prog_name="sparkctl")
    except SparkctlError as err:
        from sparkctl.cli.output import json_requested, report_error

        report_error(err, as_json=json_requested(args))
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)
