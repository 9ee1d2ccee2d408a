"""The `sparkctl` command: one typer app, one module per noun under sparkctl/cli/.

Import cost matters (a no-op `up` has a 1 s budget): noun modules import only typer at
module level and load their heavy libraries inside the command that needs them.
"""

from __future__ import annotations

import importlib
import os
import sys

import typer

from sparkctl.cli.help import HelpGroup  # (typer's own modules: nothing more to import)

# command -> (module under sparkctl.cli, its attribute, a sub-app of commands or one command,
# its panel in `sparkctl --help`). Help lists panels and commands in this order (typer puts the
# groups after the commands, so here they come last within their panel and after all commands).
# A run imports only the module of the command it runs (a no-op `up` has a 1 s budget);
# `sparkctl --help` and anything not named here build the whole app.
COMMANDS = {
    "up": ("up", "up", "command", "Cluster"),
    "down": ("down", "down", "command", "Cluster"),
    "reload": ("reload", "reload", "command", "Cluster"),
    "restart": ("reload", "restart", "command", "Cluster"),
    "rollback": ("reload", "rollback", "command", "Cluster"),
    "unlock": ("unlock", "unlock", "command", "Cluster"),
    "status": ("status", "status", "command", "Diagnose"),
    "doctor": ("doctor", "doctor", "command", "Diagnose"),
    "history": ("reload", "history", "command", "Diagnose"),
    "alerts": ("alerts", "alerts", "command", "Diagnose"),
    "render": ("render", "render", "command", "Inventory & docs"),
    "runbook": ("runbook", "runbook", "command", "Inventory & docs"),
    "gateway": ("gateway", "app", "group", "Cluster"),
    "keeper": ("keeper", "app", "group", "Cluster"),
    "bench": ("bench", "app", "group", "Diagnose"),
    "inventory": ("inventory", "app", "group", "Inventory & docs"),
    "fleet": ("fleet", "app", "group", "Fleet"),
    "lab": ("lab", "app", "group", "Development"),
}


class RootGroup(HelpGroup):
    """`sparkctl`: a Ctrl-C that ended the command it ran is the Interrupted error (its message on
    stderr, or the one JSON document; exit 130), where typer would exit 130 without a word."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:  # every `finally` of the command has run: the lock is released
            from sparkctl.errors import Interrupted

            raise Interrupted(str(exc)) from None


def build_app(only: str | None = None) -> typer.Typer:
    """The typer app with every command, or with just `only` (same help and options for it)."""
    from sparkctl.cli.help import HelpCommand, use_help_classes

    app = typer.Typer(
        name="sparkctl",
        cls=RootGroup,
        help=(
            "Bring up and run DeepSeek V4 Flash on two DGX Sparks from one inventory file.\n\n"
            "The Sparks (head + worker) serve it tensor parallel over ConnectX-7 RoCE, with an optional "
            "x86 offload host for the drafter and the Engram tables.\n\n"
            "Exit codes: 0 success, 1 a check or step failed, 2 bad input or usage.\n\n"
            "Examples:\n"
            "  # start from a shipped example inventory, then check it\n"
            "  sparkctl inventory init --from dspark\n"
            "  sparkctl inventory validate dspark-recipe.yaml\n"
            "  # what is wrong, with the fix; what up would change; then converge\n"
            "  sparkctl doctor -i dspark-recipe.yaml\n"
            "  sparkctl up --check -i dspark-recipe.yaml\n"
            "  sparkctl up -i dspark-recipe.yaml\n"
            "  # what runs where, health and tok/s\n"
            "  sparkctl status -i dspark-recipe.yaml\n"
        ),
        no_args_is_help=True,
        # --install-completion / --show-completion on the whole app (the shell asks it with no
        # arguments); a single command's run skips the completion machinery's imports
        add_completion=only is None,
        pretty_exceptions_enable=False,
        # plain help and usage errors (sparkctl/cli/help.py says why); the panels are drawn there
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    for name, (module, attr, kind, panel) in COMMANDS.items():
        if only is not None and name != only:
            continue
        target = getattr(importlib.import_module(f"sparkctl.cli.{module}"), attr)
        if kind == "group":
            use_help_classes(target)
            hidden = name == "lab" and not _lab_installed()
            app.add_typer(target, name=name, cls=HelpGroup, rich_help_panel=panel, hidden=hidden)
        else:
            app.command(name, cls=HelpCommand, rich_help_panel=panel)(target)
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
    if argv is None:
        from sparkctl import interrupts

        interrupts.on_ctrl_c()
    as_json = "--json" in args
    try:
        app = build_app(args[0] if args and args[0] in COMMANDS else None)
        if as_json:
            sys.exit(_run_for_json(app, args))
        app(args=args, prog_name="sparkctl")
    except SparkctlError as err:
        _fail(err, as_json, process=argv is None)
    except KeyboardInterrupt as exc:  # before or after the command (the command's own: RootGroup)
        from sparkctl.errors import Interrupted

        _fail(Interrupted(str(exc)), as_json, process=argv is None)


def _fail(err, as_json: bool, process: bool = False) -> None:
    from sparkctl.cli.output import report_error
    from sparkctl.errors import Interrupted

    report_error(err, as_json=as_json)
    if process and isinstance(err, Interrupted):
        # Interrupted: the command's own `finally`s have run (its lock released). The process ends
        # now, not after Python joins what threads are left at exit (a worker pool's thread still
        # connecting to a silent host held a Ctrl-C'd run for its whole connect timeout)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(err.exit_code)
    sys.exit(err.exit_code)


def _run_for_json(app: typer.Typer, args: list[str]) -> int:
    """Run with --json: a usage error (an unknown option, a missing --config) becomes the one JSON
    document on stdout, like every other error, instead of click's text on stderr."""
    try:
        from typer._click.exceptions import ClickException, UsageError  # typer that vendors click
    except ImportError:
        from click.exceptions import ClickException, UsageError  # type: ignore[assignment]  # the same classes

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
