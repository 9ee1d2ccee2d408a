"""How every command talks: human output on stderr (rich), one JSON document on stdout with --json.

Kept import-light: rich is loaded only when something is printed for a human.
"""

from __future__ import annotations

import json
import sys
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1)
def console():
    """The human console (stderr), so stdout stays clean for --json and pipes."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, emoji=False)  # emoji: "inv.yaml:100:" is a line, not 💯


def print_json(doc: Any) -> None:
    """Write exactly one JSON document to stdout."""
    from sparkctl.transport.redact import redact_obj

    sys.stdout.write(json.dumps(redact_obj(doc), indent=2, default=str) + "\n")
    sys.stdout.flush()


def report_error(err, as_json: bool) -> None:
    """Print an operator-facing error (message + fix), never a traceback."""
    from rich.markup import escape

    from sparkctl.transport.redact import redact

    if as_json:
        print_json(err.to_dict())
        return
    c = console()
    # escape: a value quoted from the operator's file ('[red]') must print as written
    c.print(f"[bold red]error:[/] {escape(redact(err.message))}", soft_wrap=True)
    if err.fix:
        c.print(f"[bold]fix:[/] {escape(redact(err.fix))}", soft_wrap=True)
