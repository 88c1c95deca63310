"""`trnsim` command line: thin wrappers that parse, call the layers and print.

Each command lives in its own module and registers itself on `app`; `main` turns a TrnsimError
into one line on stderr and exit status 2 (a traceback only with --debug).
"""

from __future__ import annotations

import sys

from trnsim.cli import (  # noqa: F401  (registers commands)
    bench,
    claims,
    generate,
    instances,
    kernel,
    ls,
    model,
    monitor,
    nccom,
    plan,
    profile,
    serve,
    top,
    train,
    validate,
)
from trnsim.cli.app import app, err_console, state
from trnsim.errors import TrnsimError


def main(argv: list[str] | None = None) -> None:
    try:
        app(args=argv, prog_name="trnsim")
    except TrnsimError as error:
        if state.debug:
            raise
        err_console().print(f"trnsim: error: {error}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)


__all__ = ["app", "main"]
