"""`trnsim validate`: predicted vs measured, row by row, and the mean absolute errors.

The table is presentation only (`trnsim.perf.validate` predicts): every time is shown in ms,
whatever unit the CSV row used, so that the unit sits once in the header. The summary gives the
MAPE per kind and the headline figure the README quotes, over `HEADLINE_KINDS`.
"""

from __future__ import annotations

import json

import typer

from trnsim.cli.app import app, console
from trnsim.cli.format import sig, signed_pct
from trnsim.cli.progress import steps
from trnsim.cli.tables import Column, print_table

KINDS = ("model", "kernel", "collective", "generation", "training")
# The README's accuracy figure averages these rows (collectives are reported apart: two rows of
# one fabric would weigh as much as a model).
HEADLINE_KINDS = ("model", "kernel")


def headline_label() -> str:
    """How the headline is named, in the command and in the README alike."""
    return "mean absolute error over the " + " and ".join(HEADLINE_KINDS) + " rows"


def _ms(value: float | None, unit: str) -> float | None:
    from trnsim.perf.validate import _UNITS_TO_MS

    if value is None or unit not in _UNITS_TO_MS:
        return None
    return value * _UNITS_TO_MS[unit]


def validate_columns(results) -> tuple[list[Column], list[list[str]]]:
    columns = [Column("id", "left"), Column("kind", "left", drop=3),
               Column("instance", "left", drop=2), Column("measured ms"), Column("predicted ms"),
               Column("error %"), Column("name", "left", drop=4)]
    rows = [[r.id, r.kind, r.instance, sig(_ms(r.measured, r.unit)), sig(_ms(r.predicted, r.unit)),
             signed_pct(r.error_pct), r.name] for r in results]
    return columns, rows


def summary(results) -> dict:
    from trnsim.perf.validate import mape

    def entry(kinds: tuple[str, ...]) -> dict:
        rows = [r for r in results if r.kind in kinds]
        return {"mape_pct": mape(rows),
                "rows": sum(1 for r in rows if r.error_pct is not None)}

    data = {kind: entry((kind,)) for kind in KINDS}
    data["overall"] = entry(KINDS)
    data["headline"] = {**entry(HEADLINE_KINDS), "kinds": list(HEADLINE_KINDS),
                        "label": headline_label()}
    return data


def _pct(entry: dict) -> str:
    rows = f"{entry['rows']} row{'s' if entry['rows'] != 1 else ''}"
    return "-" if entry["mape_pct"] is None else f"{entry['mape_pct']:.1f}% ({rows})"


def summary_lines(results) -> list[str]:
    data = summary(results)
    by_kind = ", ".join(f"{k} {_pct(data[k])}" for k in (*KINDS, "overall"))
    return [f"MAPE by kind: {by_kind}",
            f"Headline (README): {headline_label()}: {_pct(data['headline'])}"]


@app.command("validate")
def validate_command(
    path: str = typer.Argument(None, help="A measurements CSV (default: the calibration set)."),
    as_json: bool = typer.Option(False, "--json", help="Every row and the summary as JSON."),
    kinds: str = typer.Option(None, "--kinds", help="Comma-separated: model,kernel,collective,"
                                  "generation (generation rows only when named: minutes each)"),
    wide: bool = typer.Option(False, "--wide", help="Show every column even if the terminal is "
                              "narrower."),
    config: list[str] = typer.Option(None, "--config", help="A Hugging Face config.json that "
                                     "model rows may name (by its name or file stem; "
                                     "repeatable)."),
    row_ids: str = typer.Option(None, "--rows", help="Comma-separated row ids: predict only these "
                             "rows, whatever their kind's default (an unknown id is an error "
                             "naming it); with --kinds, only those of these kinds"),
    model_type: str = typer.Option(None, "--model-type", help="neuronx-cc --model-type for every "
                                   "model row (default: per row, as the compiler of the row's "
                                   "SDK did; see trnsim.perf.validate)"),
    assume_sdk: str = typer.Option(None, "--assume-sdk", help="The Neuron SDK (e.g. 2.10) assumed "
                                   "for model rows that name none: their --model-type is that "
                                   "SDK's torch-neuronx default (default: trnsim's, transformer)"),
) -> None:
    """Predict every row of a measurements CSV; print measured, predicted (ms), error % and the
    mean absolute error per kind and over the model and kernel rows (the README's figure)."""
    from trnsim.cli import checks
    from trnsim.perf.validate import validate

    checks.existing_file(path, "measurements CSV")
    selected = checks.names(kinds, "--kinds", KINDS)
    ids = checks.names(row_ids, "--rows", ())
    with steps("trnsim validate", quiet=as_json) as progress:
        results = validate(path, kinds=selected, ids=set(ids) if ids else None,
                           configs=tuple(config or ()),
                           model_type=model_type, assume_sdk=assume_sdk,
                           progress=lambda row: progress.step(f"row {row}"))
    if as_json:
        data = summary(results)
        typer.echo(json.dumps({"rows": [r.to_dict() for r in results],
                               "mape_pct": {k: v["mape_pct"] for k, v in data.items()},
                               "summary": data}, indent=2))
        return
    if selected:  # rows of other kinds were not asked for: neither shown nor listed as skipped
        results = [r for r in results if r.kind in selected]
    out = console()
    columns, rows = validate_columns(results)
    print_table(out, columns, rows, wide=wide)
    for r in results:
        if r.predicted is None and r.reason:
            out.print(f"{r.id}: not predicted ({r.status}): {r.reason}", highlight=False,
                      markup=False, soft_wrap=True)
    for line in summary_lines(results):
        out.print(line, highlight=False, markup=False)  # wrapped at spaces on a narrow terminal
