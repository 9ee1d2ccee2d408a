"""How every command talks, as kubectl, docker and ansible-inventory do: what a command answers
(a table, a launch, a recap, a verdict) on stdout; progress, live lines, warnings and errors on
stderr; with --json, exactly one JSON document on stdout and nothing else there.

So `sparkctl render > launch.txt` holds the launch and `sparkctl doctor | less` pages the table,
while a spinner or a warning still reaches the person at the terminal.
Kept import-light: rich is loaded only when something is printed for a human.
"""

from __future__ import annotations

import json
import sys
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1)
def answer():
    """The console for what a command answers (stdout)."""
    from rich.console import Console

    return Console(highlight=False, emoji=False)  # emoji: "inv.yaml:100:" is a line, not 💯


@lru_cache(maxsize=1)
def diagnostics():
    """The console for progress, live lines, warnings and errors (stderr): never part of the answer."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, emoji=False)  # emoji: "inv.yaml:100:" is a line, not 💯


def print_json(doc: Any) -> None:
    """Write exactly one JSON document to stdout."""
    from sparkctl.transport.redact import redact_obj

    sys.stdout.write(json.dumps(redact_obj(doc), indent=2, default=str) + "\n")
    sys.stdout.flush()


def report_error(err, as_json: bool) -> None:
    """Print an operator-facing error (message + fix), never a traceback: on stderr, or as the one
    JSON document on stdout with --json."""
    from rich.markup import escape

    from sparkctl.transport.redact import redact

    if as_json:
        print_json(err.to_dict())
        return
    c = diagnostics()
    # on a terminal, wrapped between words (the terminal itself would split a path or an address);
    # off one, whole lines for grep and logs
    whole = not c.is_terminal
    # escape: a value quoted from the operator's file ('[red]') must print as written
    c.print(f"[bold red]error:[/] {escape(redact(err.message))}", soft_wrap=whole)
    if err.fix:
        c.print(f"[bold]fix:[/] {escape(redact(err.fix))}", soft_wrap=whole)
