"""Tables that fit the terminal they are printed on.

A command describes its columns once, each with a `drop` rank: 0 is always shown, and when the
table cannot fit the console the columns with the highest rank go first (together: both
instances' cost columns, say). Cells never wrap or
get cut (a number cut to `7.20e-…` is worse than no column); headers wrap at spaces, never
inside a word. `--wide` (or output that is not a terminal and no $COLUMNS) shows every column;
the command prints which columns it hid and how to see them.

Column widths are computed here rather than left to rich: rich shrinks columns below their
longest header word when a table is too wide, which cuts headers ("NeuronCor…").
"""

from __future__ import annotations

from dataclasses import dataclass

from rich import box
from rich.console import Console
from rich.table import Table

GAP = 2  # between two columns: one space of padding and SIMPLE_HEAD's (blank) divider


@dataclass(frozen=True)
class Column:
    header: str  # its unit goes here ("latency ms"), never into the cells
    justify: str = "right"
    drop: int = 0  # 0: always shown; columns with higher ranks are hidden first
    short: str = ""  # the name the "hidden" note uses (e.g. without the instance); default header


def _bounds(column: Column, cells: list[str]) -> tuple[int, int]:
    """(narrowest, natural) width: cells whole, the header wrapped at spaces or on one line."""
    widest_cell = max((len(c) for c in cells), default=0)
    longest_word = max((len(w) for w in column.header.split()), default=0)
    return max(widest_cell, longest_word, 1), max(widest_cell, len(column.header), 1)


def _widths(bounds: list[tuple[int, int]], room: int | None) -> list[int] | None:
    """Natural widths when they fit `room`; else the longest headers wrap first; None if even
    the narrowest layout is wider than `room`."""
    widths = [natural for _, natural in bounds]
    if room is None:
        return widths
    excess = sum(widths) + GAP * (len(widths) - 1) - room
    if excess > 0 and sum(low for low, _ in bounds) + GAP * (len(widths) - 1) > room:
        return None
    while excess > 0:
        slack = [w - low for w, (low, _) in zip(widths, bounds, strict=True)]
        i = max(range(len(widths)), key=lambda k: (widths[k] if slack[k] else -1, slack[k]))
        widths[i] -= 1
        excess -= 1
    return widths


def fit(columns: list[Column], rows: list[list[str]], room: int | None) -> tuple[list[int], list[int]]:
    """Indices of the columns shown and their widths, for a table at most `room` characters
    wide (None: unbounded)."""
    keep = list(range(len(columns)))
    while True:
        bounds = [_bounds(columns[i], [row[i] for row in rows]) for i in keep]
        widths = _widths(bounds, room)
        droppable = [i for i in keep if columns[i].drop > 0]
        if widths is not None or not droppable:
            return keep, widths or [low for low, _ in bounds]
        rank = max(columns[i].drop for i in droppable)  # a rank's columns go together
        keep = [i for i in keep if columns[i].drop != rank]


def build(columns: list[Column], rows: list[list[str]], keep: list[int], widths: list[int],
          title: str | None = None) -> Table:
    table = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", show_edge=False,
                  pad_edge=False, padding=(0, 1, 0, 0))
    for i, width in zip(keep, widths, strict=True):
        table.add_column(columns[i].header, justify=columns[i].justify, width=width, no_wrap=False)
    for row in rows:
        table.add_row(*(row[i] for i in keep))
    return table


def print_table(console: Console, columns: list[Column], rows: list[list[str]], *,
                title: str | None = None, wide: bool = False) -> list[str]:
    """Print the table with as many columns as fit the console (all of them when `wide`) and a
    one-line note naming the hidden ones; returns their headers."""
    keep, widths = fit(columns, rows, None if wide else console.width)
    total = sum(widths) + GAP * (len(widths) - 1)
    room = console.width
    console.width = max(total, 20)  # Console.print(width=) cannot widen past the console
    try:
        console.print(build(columns, rows, keep, widths, title))
    finally:
        console.width = room
    hidden = [columns[i] for i in range(len(columns)) if i not in keep]
    if hidden:
        names = list(dict.fromkeys(c.short or c.header for c in hidden))
        console.print(f"({len(hidden)} column{'s' if len(hidden) > 1 else ''} hidden to fit "
                      f"{console.width} columns: {', '.join(names)}; --wide shows them)",
                      highlight=False, markup=False)
    return [c.header for c in hidden]
