"""`trnsim nccom-test`: AWS's nccom-test command line and output, on the simulated fabric.

Arguments are parsed with argparse, as nccom-test's own are, so multi-value options such as
``-t avg p50 p99`` work as there. Options nccom-test has that do not change a deterministic
simulation (-n, -w, -I, -W, --hosts) are accepted and ignored. trnsim adds --instance,
--algorithm and --lnc.
"""

from __future__ import annotations

import argparse
import json
import os

import typer

from trnsim.cli.app import app, console
from trnsim.collectives import nccom
from trnsim.errors import InvalidArgumentError

DEFAULT_INSTANCE = "trn1.32xlarge"
STATS = ("avg", "p50", "p99")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit 2, like every trnsim error
        raise InvalidArgumentError(f"nccom-test: {message}")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="trnsim nccom-test", description="Benchmark collectives on the simulated "
                "fabric, with nccom-test's arguments and output.")
    p.add_argument("operation", help="allr, allg, redsct, alltoall, permute or sendrecv")
    p.add_argument("-r", "--nworkers", type=int, required=True, help="ranks (NeuronCores)")
    p.add_argument("-N", "--nnodes", type=int, default=1, help="instances (default 1)")
    p.add_argument("-b", "--minbytes", default="32M", help="first size (default 32M)")
    p.add_argument("-e", "--maxbytes", default="32M", help="last size (default 32M)")
    step = p.add_mutually_exclusive_group()
    step.add_argument("-i", "--stepbytes", help="step in bytes (default (max-min)/10)")
    step.add_argument("-f", "--stepfactor", type=float, help="step factor")
    p.add_argument("-n", "--iters", type=int, default=20, help="accepted; deterministic")
    p.add_argument("-w", "--warmup_iters", type=int, default=5, help="accepted; deterministic")
    p.add_argument("-I", "--neff-iters", type=int, default=1, help="accepted; deterministic")
    p.add_argument("-W", "--neff-warmup-iters", type=int, default=0, help="accepted")
    p.add_argument("-d", "--datatype", default="uint8", help="uint8 (default), int8, uint16, "
                   "int16, fp16, bf16, int32, uint32, fp32, ...")
    p.add_argument("-c", "--check", choices=nccom.CHECK_PATTERNS,
                   help="also run on data and compare with numpy: -c [random|all_ones]")
    p.add_argument("-t", "--stats", nargs="+", default=["avg"], choices=STATS,
                   help="time columns (all equal: the simulation is deterministic)")
    p.add_argument("--show-algorithm", action="store_true", help="add an algorithm column")
    p.add_argument("--report-to-json-file", metavar="FILE", help="also write the rows as JSON")
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of the "
                   "table (trnsim's addition)")
    p.add_argument("-s", "--hosts", nargs="*", help="accepted and ignored")
    p.add_argument("--instance", default=os.environ.get("TRNSIM_INSTANCE", DEFAULT_INSTANCE),
                   help=f"instance type of every node (default $TRNSIM_INSTANCE, else "
                        f"{DEFAULT_INSTANCE})")
    p.add_argument("--algorithm", help="force ring, kangaring, rdh, mesh, torus2d or hier")
    p.add_argument("--lnc", type=int, default=_env_lnc(), help="logical NeuronCore size "
                   "(default $NEURON_LOGICAL_NC_CONFIG, else the chip's default)")
    return p


def _env_lnc() -> int | None:
    text = os.environ.get("NEURON_LOGICAL_NC_CONFIG")
    if text is None:
        return None
    if not text.strip().isdigit():
        raise InvalidArgumentError(f"NEURON_LOGICAL_NC_CONFIG={text!r} is not 1 or 2")
    return int(text)


def _check_value(argv: list[str]) -> list[str]:
    """-c takes an optional pattern; a bare -c (even right before the operation, as in
    ``--check allg``) means "random"."""
    out, i = [], 0
    while i < len(argv):
        token = argv[i]
        if token in ("-c", "--check"):
            following = argv[i + 1] if i + 1 < len(argv) else None
            pattern = following if following in nccom.CHECK_PATTERNS else "random"
            out.append(f"--check={pattern}")
            i += 2 if following in nccom.CHECK_PATTERNS else 1
            continue
        out.append(token)
        i += 1
    return out


def _header(stats: list[str], show_algorithm: bool) -> list[tuple[str, int]]:
    columns = [("size(B)", 14), ("count(elems)", 16), ("type", 8)]
    columns += [(f"time:{s}(us)", 16) for s in stats]
    columns += [("algbw(GB/s)", 15), ("busbw(GB/s)", 15)]
    return columns + ([("algorithm", 14)] if show_algorithm else [])


def _cells(row: nccom.Row, stats: list[str], show_algorithm: bool) -> list[str]:
    cells = [str(row.size_bytes), str(row.count), row.type]
    cells += [f"{row.time_us:.0f}" for _ in stats]
    cells += [f"{row.algbw:.2f}", f"{row.busbw:.2f}"]
    return cells + ([row.algorithm] if show_algorithm else [])


def _fit(columns: list[tuple[str, int]], rows: list[list[str]], room: int) -> list[int]:
    """nccom-test's column widths, or, when they overflow the terminal, each column as wide as
    its header or widest cell plus two spaces (so that no line wraps)."""
    widths = [width for _, width in columns]
    if sum(widths) <= room:
        return widths
    return [max([len(name)] + [len(row[i]) for row in rows]) + 2
            for i, (name, _) in enumerate(columns)]


def _json_row(row: nccom.Row, stats: list[str], show_algorithm: bool) -> dict:
    out = {"size(B)": row.size_bytes, "count(elems)": row.count, "type": row.type,
           "algbw(GB/s)": round(row.algbw, 4), "busbw(GB/s)": round(row.busbw, 4)}
    out.update({f"time:{s}(us)": round(row.time_us, 3) for s in stats})
    if show_algorithm:
        out["algorithm"] = row.algorithm
    return out


@app.command("nccom-test", add_help_option=False,
             context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                               "allow_interspersed_args": False})
def nccom_test_command(ctx: typer.Context) -> None:
    """Collective benchmark with nccom-test's arguments and table (run with --help)."""
    args = _parser().parse_args(_check_value(ctx.args))
    from trnsim.cli import checks

    checks.output_file(args.report_to_json_file, "--report-to-json-file")
    checks.instance_given(args.instance)
    minbytes, maxbytes = nccom.parse_size(args.minbytes), nccom.parse_size(args.maxbytes)
    stepbytes = nccom.parse_size(args.stepbytes) if args.stepbytes is not None else None
    sizes = nccom.sweep(minbytes, maxbytes, args.stepfactor, stepbytes)
    report = nccom.run(args.operation, args.nworkers, sizes, args.instance, args.nnodes,
                       args.datatype, args.algorithm, args.lnc, args.check)
    columns = _header(args.stats, args.show_algorithm)
    json_rows = [_json_row(r, args.stats, args.show_algorithm) for r in report.rows]
    if args.json:
        typer.echo(json.dumps({"results": json_rows, "avg_busbw(GB/s)": round(report.avg_busbw, 4),
                               "check_errors": report.check_errors if args.check else None},
                              indent=2))
        _write_report(args.report_to_json_file, json_rows)
        if args.check and report.check_errors:
            raise typer.Exit(1)
        return
    out = console()
    cells = [_cells(row, args.stats, args.show_algorithm) for row in report.rows]
    widths = _fit(columns, cells, out.width)
    out.print("".join(name.rjust(w) for (name, _), w in zip(columns, widths, strict=True)),
              highlight=False, markup=False)
    for row in cells:
        out.print("".join(c.rjust(w) for c, w in zip(row, widths, strict=True)),
                  highlight=False, markup=False)
    out.print(f"Avg bus bandwidth:\t{report.avg_busbw:.4f}GB/s", highlight=False)
    _write_report(args.report_to_json_file, json_rows)  # after the table: a bad path cannot lose it
    if args.check:
        errors = report.check_errors
        out.print(f"{errors} errors found - test failed" if errors else
                  "Correctness check passed", highlight=False)
        if errors:
            raise typer.Exit(1)


def _write_report(path: str | None, rows: list[dict]) -> None:
    if path:
        with open(path, "w") as handle:
            json.dump({"results": rows}, handle, indent=2)
