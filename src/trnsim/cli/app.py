"""The Typer application every `trnsim` command registers on, and the shared consoles."""

from __future__ import annotations

import os

import typer
from rich.console import Console

from trnsim import __version__

app = typer.Typer(
    name="trnsim",
    help="trnsim: a software Trainium. Simulates AWS Neuron accelerators' numbers and timing.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


class _State:
    debug = False


state = _State()


UNLIMITED_WIDTH = 10_000  # piped output: every column, no wrapping (a program reads it)


def console() -> Console:
    """Stdout console. On a terminal, its width (rich honours $COLUMNS); otherwise $COLUMNS when
    set, else unlimited so that piped tables keep every column and no line wraps."""
    probe = Console()
    if probe.is_terminal:
        return probe
    columns = os.environ.get("COLUMNS", "")
    return Console(width=int(columns) if columns.isdigit() and int(columns) > 0 else UNLIMITED_WIDTH)


REPORT_MAX_WIDTH = 140  # text reports (model, kernel profile) read badly wider than this


def report_width(out: Console) -> int:
    """The width a text report is rendered at: the terminal's, at most REPORT_MAX_WIDTH."""
    return min(out.width, REPORT_MAX_WIDTH)


def err_console() -> Console:
    return Console(stderr=True, width=200)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"trnsim {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks for trnsim errors."),
) -> None:
    state.debug = debug
