"""Progress for long commands: one transient line on a terminal, plain lines otherwise.

On a terminal a rich progress line (description cut to fit, bar, count, elapsed time) redraws in
place and disappears when the work ends. The line is measured against the real terminal width:
a line wider than the terminal wraps, and the redraw then reprints it instead of replacing it.
When stderr is not a terminal (a log, CI) each item is one plain line on stderr, no bar.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Column


class _Lines:
    """Not a terminal: '[3/8] label' per item on stderr."""

    def __init__(self, name: str, total: int | None, stream) -> None:
        self.name, self.total, self.stream, self.count = name, total, stream, 0

    def step(self, label: str) -> None:
        self.count += 1
        where = f"{self.count}/{self.total}" if self.total else str(self.count)
        print(f"{self.name} [{where}] {label}", file=self.stream, flush=True)


class _Bar:
    def __init__(self, progress: Progress, total: int | None) -> None:
        self.progress = progress
        self.task = progress.add_task("starting", total=total)
        self.started = False

    def step(self, label: str) -> None:
        if self.started:
            self.progress.advance(self.task)
        self.started = True
        self.progress.update(self.task, description=label)


class _Quiet:
    def step(self, label: str) -> None:
        pass


@contextmanager
def steps(name: str, total: int | None = None, *, quiet: bool = False,
          console: Console | None = None) -> Iterator:
    """Yields an object whose `step(label)` announces the item about to start."""
    if quiet:
        yield _Quiet()
        return
    console = console or Console(stderr=True)
    if not console.is_terminal:
        yield _Lines(name, total, console.file if console.file is not None else sys.stderr)
        return
    columns = [TextColumn("{task.description}", table_column=Column(no_wrap=True, overflow="ellipsis",
                                                                    ratio=1))]
    if total:
        columns += [BarColumn(bar_width=max(10, min(30, console.width // 6))), MofNCompleteColumn()]
    columns.append(TimeElapsedColumn())
    progress = Progress(*columns, console=console, transient=True, expand=True)
    with progress:
        bar = _Bar(progress, total)
        yield bar
        if total:
            progress.update(bar.task, completed=total)
