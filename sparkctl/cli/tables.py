"""Tables that fit the terminal without splitting a token (an address, host:port, a path, a device).

rich shrinks the widest column first and folds whatever no longer fits, so at 80 columns
`192.168.1.177:22` came out as `192.168.` over `1.177:22`. Here every column keeps at least its
longest word, cells wrap only between words, and a table whose longest words cannot share one
line at all becomes records (each row a heading and `column  value` lines) instead.

A cell that is a `Text` with `no_wrap=True` is one line whatever the width: it may be cut, at a
word, with an ellipsis (status's SSH errors), and `Fitted.cut` says one was, so the caller can print
the whole text below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.table import Table
    from rich.text import Text


class Fitted(NamedTuple):
    renderable: RenderableType
    cut: bool  # a one-line (no_wrap) cell was shortened to fit


def fit_table(table: Table, width: int) -> Fitted:
    """`table` (rich Table of Text cells) at most `width` cells wide with no word split across
    lines; as records when its columns' longest words do not fit side by side."""
    from rich.cells import cell_len

    columns = [[_text(c.header), *(_text(cell) for cell in c.cells)] for c in table.columns]
    lows, highs = [], []
    for cells in columns:
        # a one-line cell may be cut: it asks for no room of its own, and for all of it at best
        lows.append(max((_longest_word(t) for t in cells if not t.no_wrap), default=1))
        highs.append(max(max((cell_len(line) for line in t.plain.splitlines()), default=0) for t in cells))
    room = width - _chrome(table, highs)
    widths = [max(h, low) for h, low in zip(highs, lows)]
    while sum(widths) > room:
        shrinkable = [i for i, (w, low) in enumerate(zip(widths, lows)) if w > low]
        if not shrinkable:
            return _records(table, columns, width)
        widths[max(shrinkable, key=lambda i: widths[i])] -= 1  # the widest first, as rich does, down to its floor
    cut = False
    for column, w, cells in zip(table.columns, widths, columns):
        column.width = w
        cut = any([_cut(t, w) for t in cells[1:]]) or cut  # a list: every cell is cut, not the first
    if table.title is None:
        return Fitted(table, cut)
    from rich.console import Group

    # over the table, not in it: rich wraps a title to the table's width, and a narrow table would split its path
    title, table.title = _title(table), None
    return Fitted(Group(title, table), cut)


def _text(cell: RenderableType) -> Text:
    from rich.text import Text

    if isinstance(cell, Text):
        return cell
    if isinstance(cell, str):
        return Text.from_markup(cell, emoji=False)  # as rich draws a str cell (pass Text for values from files)
    raise TypeError(f"fit_table measures Text cells, not {type(cell).__name__}")


def _title(table: Table) -> Text:
    from rich.text import Text

    title = _text(table.title or "")
    justify = None if table.title_justify == "left" else table.title_justify  # "left" pads the line with spaces
    return Text(title.plain, style="table.title", justify=justify)


def _longest_word(t: Text) -> int:
    from rich.cells import cell_len

    return max((cell_len(word) for word in t.plain.split()), default=1)


def _chrome(table: Table, highs: list[int]) -> int:
    """Borders and padding: the table's own width beyond its cells' (rich measures both alike)."""
    from io import StringIO

    from rich.console import Console
    from rich.measure import Measurement

    wide = Console(width=sum(highs) + 1000, file=StringIO(), color_system=None)  # measures, prints nothing
    return Measurement.get(wide, wide.options, table).maximum - sum(highs)


def _cut(t: Text, width: int) -> bool:
    """Shorten a one-line cell to `width` at a word, with an ellipsis; True when it was."""
    from rich.cells import cell_len

    from sparkctl.cli.steps_output import shorten

    if not t.no_wrap or cell_len(t.plain) <= width:
        return False
    short = shorten(t.plain, width)
    t.truncate(len(short) - 1)
    t.append("…")
    return True


def _records(table: Table, columns: list[list[Text]], width: int) -> Fitted:
    """Each row as its first cell on a line of its own, then `header  value` lines under it."""
    from rich.cells import cell_len
    from rich.console import Group
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    headers = [cells[0] for cells in columns]
    label = max(cell_len(h.plain) for h in headers[1:]) if len(headers) > 1 else 0
    value = max(width - 2 - label - 2, 1)
    parts: list[RenderableType] = [] if table.title is None else [_title(table)]
    cut = False
    for row in zip(*(cells[1:] for cells in columns)):
        parts.append(Text(row[0].plain, style="bold"))
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True, width=label)
        grid.add_column()  # up to `value` wide: the rest of the line
        for header, cell in zip(headers[1:], row[1:]):
            cut = _cut(cell, value) or cut
            grid.add_row(Text(header.plain, style="dim"), cell)
        parts.append(Padding(grid, (0, 0, 0, 2), expand=False))
    return Fitted(Group(*parts), cut)
