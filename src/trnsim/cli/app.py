"""The Typer application every `trnsim` command registers on, and the shared consoles."""

from __future__ import annotations

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


def console() -> Console:
    """Stdout console; wide when not a terminal so piped tables are not wrapped."""
    probe = Console()
    return probe if probe.is_terminal else Console(width=200)


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
