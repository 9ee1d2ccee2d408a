"""How `--help` reads: each command's summary whole, the top-level commands in panels, and an
Examples section on every command, in click's plain formatter.

A command's docstring (a group's `help=`) holds all three:

    One sentence: the summary its group's command list shows (never cut).

    More paragraphs, as click prints them.

    Examples:
      # what it does, wrapped as a shell comment
      sparkctl up --check

Plain, not typer's rich help: app.py sets `rich_markup_mode=None` because rich help keeps the
docstrings' hard line breaks (ragged at 80 columns), boxes usage errors on stderr, and follows
TYPER_USE_RICH. The panels are still declared the typer way, `rich_help_panel` on each command
(typer reads it only in rich mode), and drawn here.
"""

from __future__ import annotations

import inspect
import re
import sys
import textwrap
from dataclasses import dataclass, field
from typing import Any, Optional

import typer
from typer.core import TyperCommand, TyperGroup

EXAMPLES = re.compile(r"(?:^|\n[ \t]*\n)Examples:[ \t]*\n")
NB_HYPHEN = "\u2011"  # a hyphen click's text wrapper does not break at

_ClickFormatter: Any = typer.Context.formatter_class  # click's HelpFormatter (typer vendors click)


class WholeWordFormatter(_ClickFormatter):
    """click's help formatter, wrapping prose only at spaces: its wrapper breaks at a word's hyphens,
    and inside a word longer than the column, so a narrow terminal got `--min-throughput-` / `ratio`
    and `$SPARK` / `CTL_INVENTORY`."""

    def write_text(self, text: str) -> None:
        super().write_text(text.replace("-", NB_HYPHEN))

    def write_dl(self, rows: Any, col_max: int = 30, col_spacing: int = 2) -> None:
        rows = [(term, text.replace("-", NB_HYPHEN)) for term, text in rows]
        # a narrower first column (a long term's text then starts on the next line) before a word
        # of the text has to be cut
        longest = max((len(word) for _, text in rows for word in text.split()), default=0)
        col_max = max(min(col_max, self.width - self.current_indent - longest - col_spacing), 0)
        super().write_dl(rows, col_max=col_max, col_spacing=col_spacing)

    def getvalue(self) -> str:
        return super().getvalue().replace(NB_HYPHEN, "-")


class HelpContext(typer.Context):
    formatter_class = WholeWordFormatter


@dataclass
class Example:
    comment: str = ""
    commands: list[str] = field(default_factory=list)


def split_examples(help: Optional[str]) -> tuple[Optional[str], list[Example]]:
    """(the help without its Examples paragraph, the examples): `#` lines say what the command
    lines under them do."""
    if help is None:
        return None, []
    text = inspect.cleandoc(help)  # a docstring or a group's help=: indented alike from here
    found = EXAMPLES.search(text)
    if found is None:
        return help, []
    examples: list[Example] = []
    for line in text[found.end() :].splitlines():
        line = line.strip()
        if line.startswith("#"):
            if not examples or examples[-1].commands:
                examples.append(Example())
            examples[-1].comment = f"{examples[-1].comment} {line.lstrip('#').strip()}".strip()
        elif line:
            if not examples:
                examples.append(Example())
            examples[-1].commands.append(line)
    return text[: found.start()].rstrip() or None, examples


def summary(command: Any) -> str:
    """The command list's line: the help's first sentence, whole (click's own short help is cut to
    the terminal's width, mid-clause)."""
    return command.get_short_help_str(limit=sys.maxsize)


def write_examples(formatter: Any, examples: list[Example]) -> None:
    """kubectl's layout: a `#` comment, then the command; a command too long for the width goes
    on over lines ending in ` \\`, broken between words, so it still pastes into a shell."""
    if not examples:
        return
    with formatter.section("Examples"):
        indent = " " * formatter.current_indent
        room = max(formatter.width - formatter.current_indent - 2, 20)  # 2: "# " and " \\"
        for i, example in enumerate(examples):
            if i:
                formatter.write("\n")
            for line in textwrap.wrap(example.comment, room):
                formatter.write(f"{indent}# {line}\n")
            for command in example.commands:
                lines = textwrap.wrap(command, room, subsequent_indent="    ", break_long_words=False, break_on_hyphens=False)
                formatter.write(" \\\n".join(indent + line for line in lines) + "\n")


class HelpCommand(TyperCommand):
    """A command whose help ends with its Examples."""

    context_class = HelpContext

    def __init__(self, *args: Any, help: Optional[str] = None, **kwargs: Any) -> None:
        help, self.examples = split_examples(help)
        super().__init__(*args, help=help, **kwargs)

    def format_epilog(self, ctx: Any, formatter: Any) -> None:
        super().format_epilog(ctx, formatter)
        write_examples(formatter, self.examples)


class HelpGroup(TyperGroup):
    """A group whose command list shows whole summaries, in panels (`rich_help_panel`), and whose
    help ends with its Examples."""

    context_class = HelpContext

    def __init__(self, *args: Any, help: Optional[str] = None, **kwargs: Any) -> None:
        help, self.examples = split_examples(help)
        super().__init__(*args, help=help, **kwargs)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        shown = [(name, cmd) for name in self.list_commands(ctx) if (cmd := self.get_command(ctx, name)) and not cmd.hidden]
        if not shown:
            return
        pad = max(len(name) for name, _ in shown)  # one column of names across the panels
        panels: dict[str, list[tuple[str, str]]] = {}
        for name, cmd in shown:
            panel = getattr(cmd, "rich_help_panel", None) or "Commands"
            panels.setdefault(panel, []).append((name.ljust(pad), summary(cmd)))
        for panel, rows in panels.items():
            with formatter.section(panel):
                formatter.write_dl(rows)

    def format_epilog(self, ctx: Any, formatter: Any) -> None:
        super().format_epilog(ctx, formatter)
        write_examples(formatter, self.examples)


def use_help_classes(app: Any) -> None:
    """Every command `app` registered (decorated in its own module) renders its help here; app.py
    passes HelpGroup where it adds each group."""
    for info in app.registered_commands:
        if info.cls in (None, TyperCommand):
            info.cls = HelpCommand
