"""The `sparkctl` command: one typer app, one module per noun under sparkctl/cli/.

Import cost matters (a no-op `up` has a 1 s budget): noun modules import only typer at
module level and load their heavy libraries inside the command that needs them.
"""

from __future__ import annotations

import importlib
import sys

import typer

# command -> (module under sparkctl.cli, its attribute, a sub-app of commands or one command).
# A run imports only the module of the command it runs (a no-op `up` has a 1 s budget);
# `sparkctl --help` and anything not named here build the whole app.
COMMANDS = {
    "inventory": ("inventory", "app", "group"),
    "lab": ("lab", "app", "group"),
    "up": ("up", "up", "command"),
    "down": ("down", "down", "command"),
    "unlock": ("unlock", "unlock", "command"),
    "render": ("render", "render", "command"),
    "status": ("status", "status", "command"),
    "bench": ("bench", "app", "group"),
    "doctor": ("doctor", "doctor", "command"),
    "reload": ("reload", "reload", "command"),
    "restart": ("reload", "restart", "command"),
    "rollback": ("reload", "rollback", "command"),
    "history": ("reload", "history", "command"),
    "alerts": ("alerts", "alerts", "command"),
    "runbook": ("runbook", "runbook", "command"),
    "gateway": ("gateway", "app", "group"),
    "fleet": ("fleet", "app", "group"),
}


def build_app(only: str | None = None) -> typer.Typer:
    """The typer app with every command, or with just `only` (same help and options for it)."""
    app = typer.Typer(
        name="sparkctl",
        help=(
            "Bring up and run a DeepSeek V4 Flash cluster of two DGX Sparks (head + worker, tensor "
            "parallel over ConnectX-7 RoCE) and an optional x86 offload host, from one inventory file.\n\n"
            "Exit codes: 0 success, 1 a check or step failed, 2 bad input or usage."
        ),
        no_args_is_help=True,
        # --install-completion / --show-completion on the whole app (the shell asks it with no
        # arguments); a single command's run skips the completion machinery's imports
        add_completion=only is None,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    for name, (module, attr, kind) in COMMANDS.items():
        if only is not None and name != only:
            continue
        target = getattr(importlib.import_module(f"sparkctl.cli.{module}"), attr)
        if kind == "group":
            app.add_typer(target, name=name, hidden=name == "lab" and not _lab_installed())
        else:
            app.command(name)(target)
    app.callback(invoke_without_command=True)(_root)
    return app


def _lab_installed() -> bool:
    # the lab is a development tool in a checkout (lab/), not in the wheel: an operator's --help
    # does not offer it (`sparkctl lab` still runs, and says how to install it)
    from importlib.util import find_spec

    return find_spec("sparkctl_lab") is not None


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
    as_json = "--json" in args
    try:
        app = build_app(args[0] if args and args[0] in COMMANDS else None)
        if as_json:
            sys.exit(_run_for_json(app, args))
        app(args=args, prog_name="sparkctl")
    except SparkctlError as err:
        from sparkctl.cli.output import report_error

        report_error(err, as_json=as_json)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(130)


def _run_for_json(app: typer.Typer, args: list[str]) -> int:
    """Run with --json: a usage error (an unknown option, a missing --config) becomes the one JSON
    document on stdout, like every other error, instead of click's text on stderr."""
    try:
        from typer._click.exceptions import ClickException, UsageError  # typer that vendors click
    except ImportError:
        from click.exceptions import ClickException, UsageError

    from sparkctl.errors import InputError, SparkctlError

    try:
        rv = app(args=args, prog_name="sparkctl", standalone_mode=False)
    except UsageError as err:
        where = err.ctx.command_path if err.ctx is not None else "sparkctl"
        raise InputError(err.format_message(), fix=f"see `{where} --help`") from None
    except ClickException as err:
        failed = SparkctlError(err.format_message())
        failed.exit_code = err.exit_code
        raise failed from None
    except typer.Abort:  # a prompt answered with Ctrl-C or end of input: nothing was done
        raise SparkctlError("aborted at a prompt: nothing was done") from None
    return rv if isinstance(rv, int) else 0
