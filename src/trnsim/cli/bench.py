"""`trnsim bench` and `trnsim validate`: the headline table, and predictions vs measurements."""

from __future__ import annotations

import csv
import io
import json

import typer
from rich import box
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from trnsim.cli.app import app, console, err_console
from trnsim.errors import InvalidArgumentError


def _inf1_assumptions() -> str:
    from trnsim import hardware

    v1 = hardware.core("v1")
    parts = [(v1.tensor, "TensorE clock", "clock_hz"), (v1.tensor, "PE array", "pe_rows"),
             (v1.vector, "VectorE rate", "clock_hz"), (v1.scalar, "ScalarE rate", "clock_hz"),
             (v1, "on-chip SBUF size", "sbuf_bytes_per_partition"),
             (v1.dma, "DMA engines", "bytes_per_s_per_engine")]
    named = [label for spec, label, field in parts if spec.is_assumption(field)]
    return ("Inferentia (inf1, NeuronCore-v1) has no public ISA. Documented: 4 NeuronCores, 16 "
            "TFLOPS fp16/bf16 each, 8 GiB DDR4 at 50 GiB/s. Named assumptions "
            "(trnsim.hardware.cores.NC_V1): " + ", ".join(named) + ". The model runs trnsim's "
            "NeuronCore-v2 kernels on those figures, one NeuronCore per model; NC-v1 has no "
            "GpSimd, so its side work runs on VectorE and the patterns it would generate "
            "(identity, masks) load from HBM. neuron-cc's pipeline mode (trnsim.trace(..., "
            "pipeline_cores=N) or --neuroncore-pipeline-cores in NEURON_CC_FLAGS) cuts a model "
            "into stages on N cores; bench does not use it (one core per model, as published).")


def _split(text: str | None, default) -> tuple:
    if not text:
        return tuple(default)
    return tuple(t.strip() for t in text.split(",") if t.strip())


def _ints(text: str | None, default) -> tuple[int, ...]:
    try:
        return tuple(int(t) for t in _split(text, default))
    except ValueError:
        raise InvalidArgumentError(f"expected comma-separated integers, got {text!r}") from None


def _casts(results) -> dict[str, str]:
    """The auto-cast mode each instance compiled with."""
    return {r.instance: r.auto_cast for r in results}


def _ms(value, published=None, error=None) -> str:
    if value is None:
        return "-"
    text = f"{value:.2f}"
    if published is not None:
        text += f" (pub {published:g}, {error:+.0f}%)"
    return text


def bench_table(results, instances) -> Table:
    from trnsim.perf.bench import comparison_rows

    decode = any(r.decode for r in results)
    what, unit = ("per generated token (decode: one new token per sequence after `context` "
                  "cached tokens)", "token") if decode else ("per inference batch", "inference")
    tp = max((r.tensor_parallel for r in results), default=1)
    per_model = "one NeuronCore" if tp == 1 else f"{tp} NeuronCores (tensor parallel)"
    per_copy = "NeuronCore" if tp == 1 else f"{tp} NeuronCores"
    table = Table(box=box.SIMPLE_HEAD, title=f"trnsim bench: latency {what}, {per_model} per "
                  f"model; throughput with one copy per {per_copy}")
    for col in ("model", "batch", "context" if decode else "seq"):
        table.add_column(col)
    for inst in instances:
        table.add_column(f"{inst} ms", justify="right")
    if len(instances) > 1:
        table.add_column(f"{instances[-1]} speed-up vs {instances[0]}", justify="right")
    for inst in instances:
        table.add_column(f"{inst} {'tok' if decode else 'inf'}/s", justify="right")
    for inst in instances:
        table.add_column(f"{inst} $/{unit}", justify="right")
    for row in comparison_rows(results, instances):
        cells = row["by_instance"]
        line = [row["model"], str(row["batch"]), "-" if row["seq"] is None else str(row["seq"])]
        line += [_ms(r.latency_ms, r.published_ms, r.error_pct) if r else "-"
                 for r in cells.values()]
        if len(instances) > 1:
            line.append(f"{row['speedup']:.1f}x" if row["speedup"] is not None else "-")
        line += [f"{r.throughput_per_s:,.0f}" if r else "-" for r in cells.values()]
        line += [f"{r.cost_per_inference_usd:.2e}" if r and r.cost_per_inference_usd is not None
                 else "-" for r in cells.values()]
        table.add_row(*line)
    return table


def results_csv(results) -> str:
    out = io.StringIO()
    fields = ["model", "batch", "seq", "instance", "latency_ms", "published_ms", "error_pct",
              "throughput_per_s", "cost_per_inference_usd", "copies", "decode",
              "tensor_parallel"]
    writer = csv.DictWriter(out, fieldnames=fields, extrasaction="ignore")
    writer.writeheader()
    for r in results:
        writer.writerow(r.to_dict())
    return out.getvalue()


@app.command("bench", help="Reproduce the Inferentia2-vs-Inferentia1 table (BERT-large, "
                           "ELECTRA-large) with trnsim's predictions.\n\n"
                           "Each model is compiled for its batch on one NeuronCore, an fp32 model "
                           "cast as each instance's compiler does by default, as the published "
                           "runs were: neuronx-cc (inf2, trn) casts the matmuls to bf16 "
                           "(--auto-cast matmult), neuron-cc (inf1) every fp32 operator "
                           "(--fast-math all). Throughput runs one "
                           "copy per NeuronCore; cost per inference = on-demand $/hour / 3600 / "
                           "throughput. Published latencies come from the calibration set.\n\n"
                           + _inf1_assumptions())
def bench_command(
    models: str = typer.Option(None, "--models", help="Comma-separated: bert-large-uncased,..."),
    instances: str = typer.Option(None, "--instances", help="Comma-separated catalog instances."),
    batch: str = typer.Option(None, "--batch", help="Comma-separated batch sizes (default 1,10)."),
    seq: int = typer.Option(None, "--seq", help="Sequence length (default per model: 128 / 256)."),
    auto_cast: str = typer.Option(None, "--auto-cast",
                                  help="none | matmult | all (bf16); default: each instance's "
                                       "compiler's default (inf1: all, others: matmult)"),
    as_json: bool = typer.Option(False, "--json"),
    as_csv: bool = typer.Option(False, "--csv"),
    plot: str = typer.Option(None, "--plot", help="Write a grouped bar chart PNG here."),
    check_numerics: bool = typer.Option(False, "--check-numerics",
                                        help="Also run functionally and compare with PyTorch."),
    decode: bool = typer.Option(False, "--decode",
                                help="Causal LMs: time one generated token per sequence with a "
                                     "KV cache of --seq tokens (trnsim.decode_step), instead of "
                                     "the prompt; throughput is then tokens/s."),
    lnc: int = typer.Option(None, "--lnc", help="Logical NeuronCore size on Trainium2/3 "
                            "instances: 2 (their default: two physical cores split each "
                            "kernel) or 1; other instances ignore it."),
    tp: int = typer.Option(1, "--tp", min=1, help="Tensor parallel degree: split each copy's "
                           "weights over this many NeuronCores (neuronx-distributed's "
                           "tp_degree), for models too large for one."),
) -> None:
    from trnsim.perf import bench

    model_list = _split(models, bench.DEFAULT_MODELS)
    instance_list = _split(instances, bench.DEFAULT_INSTANCES)
    from trnsim import hardware
    from trnsim.perf.zoo import zoo_model

    for name in model_list:
        zoo_model(name)
    instance_list = tuple(hardware.instance(i).name for i in instance_list)
    batches = _ints(batch, bench.DEFAULT_BATCHES)
    total = len(model_list) * len(instance_list) * len(batches)
    quiet = as_json or as_csv
    progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/"
                        "{task.total}"), TimeElapsedColumn(), console=err_console(), disable=quiet)
    with progress:
        task = progress.add_task("compiling and simulating", total=total)
        done = [0]

        def step(label: str) -> None:
            if done[0]:
                progress.advance(task)
            progress.update(task, description=label)
            done[0] += 1

        results = bench.run_matrix(model_list, instance_list, batches, seq, auto_cast=auto_cast,
                                   check_numerics=check_numerics, decode=decode, progress=step,
                                   lnc=lnc, tensor_parallel=tp)
        progress.advance(task)
    if plot:
        from trnsim.perf.plot import bench_plot

        bench_plot(results, instance_list, plot)
    if as_json:
        rows = [{k: row[k] for k in ("model", "batch", "seq", "decode", "speedup")}
                for row in bench.comparison_rows(results, instance_list)]
        typer.echo(json.dumps({"auto_cast": _casts(results), "auto_cast_type": "bf16",
                               "results": [r.to_dict() for r in results],
                               "speedup_of": [instance_list[-1], instance_list[0]],
                               "rows": rows}, indent=2))
        return
    if as_csv:
        typer.echo(results_csv(results), nl=False)
        return
    out = console()
    out.print(bench_table(results, instance_list))
    how = "as asked" if auto_cast else "each compiler's default, as the published runs used"
    casts = ", ".join(f"{i} {c}" for i, c in _casts(results).items())
    out.print(f"auto-cast to bf16: {casts} ({how}); published values from trnsim's calibration "
              "set (measurements.csv).", highlight=False)
    if check_numerics:
        for r in results:
            out.print(f"{r.model} b{r.batch} {r.instance}: {r.numerics}", highlight=False)
    if plot:
        out.print(f"plot written to {plot}", highlight=False)


@app.command("validate")
def validate_command(
    path: str = typer.Argument(None, help="A measurements CSV (default: the calibration set)."),
    as_json: bool = typer.Option(False, "--json"),
    kinds: str = typer.Option(None, "--kinds", help="Comma-separated: model,kernel,collective"),
) -> None:
    """Predict every row of a measurements CSV; print predicted, measured, error % and MAPE."""
    from trnsim.perf.validate import mape, validate

    selected = _split(kinds, ()) or None
    progress = Progress(TextColumn("{task.description}"), TimeElapsedColumn(),
                        console=err_console(), disable=as_json)
    with progress:
        task = progress.add_task("validating")
        results = validate(path, kinds=selected,
                           progress=lambda row: progress.update(task, description=f"row {row}"))
    summary = {kind: mape(results, kind) for kind in ("model", "kernel", "collective")}
    summary["overall"] = mape(results)
    if as_json:
        typer.echo(json.dumps({"rows": [r.to_dict() for r in results], "mape_pct": summary},
                              indent=2))
        return
    table = Table(box=box.SIMPLE_HEAD)
    for col in ("id", "kind", "instance", "measured", "predicted", "error %", "note"):
        table.add_column(col, justify="right" if col in ("measured", "predicted", "error %")
                         else "left")
    for r in results:
        table.add_row(r.id, r.kind, r.instance, f"{r.measured:g} {r.unit}" if r.measured is not None
                      else "-", f"{r.predicted:.4g}" if r.predicted is not None else "-",
                      f"{r.error_pct:+.1f}" if r.error_pct is not None else "-",
                      r.reason or "")
    out = console()
    out.print(table)
    out.print("MAPE: " + ", ".join(f"{k} {v:.1f}%" if v is not None else f"{k} -"
                                   for k, v in summary.items()), highlight=False)
