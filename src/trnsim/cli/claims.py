"""`trnsim claims`: the Trainium material's quantitative claims against trnsim's figures."""

from __future__ import annotations

import json

import typer

from trnsim.cli.app import app, console


@app.command("claims")
def claims_command(
    simulate: bool = typer.Option(False, "--simulate", help="Also check the claims that need "
                                  "a simulation (minutes cold)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    wide: bool = typer.Option(False, "--wide", help="Show every column."),
) -> None:
    """One row per quantitative claim: the claim, trnsim's figure, and the command behind it."""
    from trnsim.cli.progress import steps
    from trnsim.perf.scale.claims import claims

    with steps("trnsim claims", quiet=as_json or not simulate) as bar:
        rows = claims(simulate, progress=bar.step)
    if as_json:
        typer.echo(json.dumps([r.to_dict() for r in rows], indent=2))
        return
    from trnsim.cli.tables import Column, print_table

    columns = [Column("claim", "left"), Column("claimed", "left"), Column("trnsim", "left"),
               Column("verdict", "left"), Column("command", "left", drop=1),
               Column("why", "left", drop=2)]
    print_table(console(), columns, [[r.claim, r.claimed, r.trnsim, r.verdict, r.command,
                                      r.why] for r in rows], wide=wide)
