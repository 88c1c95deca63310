"""`trnsim bench`: the Inferentia2-vs-Inferentia1 table, predicted by compiling and simulating."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import typer

from trnsim.cli.app import app, console
from trnsim.cli.format import num, sig, signed_pct
from trnsim.cli.progress import steps
from trnsim.cli.tables import Column, print_table
from trnsim.errors import InvalidArgumentError


def _inf1_assumptions() -> str:
    from trnsim import hardware

    v1 = hardware.core("v1")
    parts = [(v1.tensor, "TensorE clock", "clock_hz"), (v1.tensor, "PE array", "pe_rows"),
             (v1.vector, "VectorE clock and width", "clock_hz"),
             (v1.scalar, "ScalarE clock and width", "clock_hz"),
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


def bench_columns(results, instances) -> tuple[list[Column], list[list[str]]]:
    """The bench table's columns (units in the headers, drop ranks for narrow terminals) and
    its rows of plain numbers: latency is always shown; then, as width allows, the speed-up,
    the error against the published latency, the published latency, throughput and cost."""
    from trnsim.perf.bench import comparison_rows

    decode = any(r.decode for r in results)
    unit = "tok" if decode else "inf"
    columns = [Column("model", "left"), Column("batch"), Column("context" if decode else "seq")]
    columns += [Column(f"{inst} latency ms") for inst in instances]
    if any(r.end_to_end_ms is not None for r in results):
        columns += [Column(f"{inst} end-to-end ms", drop=2, short="end-to-end ms")
                    for inst in instances]
    if len(instances) > 1:
        columns.append(Column(f"speed-up {instances[-1]} vs {instances[0]} (x)", drop=3,
                              short="speed-up"))
    columns += [Column(f"{inst} error %", drop=4, short="error %") for inst in instances]
    columns += [Column(f"{inst} published ms", drop=5, short="published ms") for inst in instances]
    columns += [Column(f"{inst} {unit}/s", drop=6, short=f"{unit}/s") for inst in instances]
    columns += [Column(f"{inst} $ per 1M {unit}", drop=7, short=f"$ per 1M {unit}")
                for inst in instances]
    if not any(r.published_ms is not None for r in results):  # nothing to compare with
        columns = [c for c in columns if c.short not in ("error %", "published ms")]
    rows = []
    for row in comparison_rows(results, instances):
        cells = list(row["by_instance"].values())
        line = [row["model"], str(row["batch"]), "-" if row["seq"] is None else str(row["seq"])]
        line += [sig(r.latency_ms) if r else "-" for r in cells]
        if any(c.short == "end-to-end ms" for c in columns):
            line += [sig(r.end_to_end_ms) if r and r.end_to_end_ms is not None else "-"
                     for r in cells]
        if len(instances) > 1:
            line.append(num(row["speedup"], 2) if row["speedup"] is not None else "-")
        if any(c.short == "error %" for c in columns):
            line += [signed_pct(r.error_pct) if r else "-" for r in cells]
            line += [sig(r.published_ms) if r else "-" for r in cells]
        line += [num(r.throughput_per_s, 0) if r else "-" for r in cells]
        line += [sig(r.cost_per_inference_usd * 1e6, 3)
                 if r and r.cost_per_inference_usd is not None else "-" for r in cells]
        rows.append(line)
    return columns, rows


def bench_title(results) -> str:
    decode = any(r.decode for r in results)
    what = ("per generated token (decode: one new token per sequence after `context` cached "
            "tokens)") if decode else "per inference batch"
    tp = max((r.tensor_parallel for r in results), default=1)
    per_model = "one NeuronCore" if tp == 1 else f"{tp} NeuronCores (tensor parallel)"
    per_copy = "NeuronCore" if tp == 1 else f"{tp} NeuronCores"
    return (f"trnsim bench: latency {what} (device time; end to end adds the host's dispatch "
            f"and PCIe copies, as published latencies measure and the error compares), "
            f"{per_model} per model; throughput with one copy per {per_copy}")


def results_csv(results) -> str:
    out = io.StringIO()
    fields = ["model", "batch", "seq", "instance", "latency_ms", "end_to_end_ms", "published_ms",
              "error_pct",
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
    seq: int = typer.Option(None, "--seq", min=1, help="Sequence length (default per model: 128 / 256)."),
    auto_cast: str = typer.Option(None, "--auto-cast",
                                  help="none | matmult | all (bf16); default: each instance's "
                                       "compiler's default (inf1: all, others: matmult)"),
    as_json: bool = typer.Option(False, "--json", help="Every figure of every result as JSON."),
    as_csv: bool = typer.Option(False, "--csv", help="One CSV row per model, batch and instance."),
    wide: bool = typer.Option(False, "--wide", help="Show every column even if the terminal is "
                              "narrower (by default the least important columns are hidden)."),
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
    config: list[str] = typer.Option(None, "--config", help="A Hugging Face config.json to "
                                     "benchmark (repeatable); added to --models, or alone."),
    model_type: str = typer.Option(
        None, "--model-type", help="neuronx-cc --model-type: transformer (torch-neuronx's "
        "default: attention fused) | generic (attention as separate kernels) | unet-inference; "
        "neuron-cc (inf1) has none and always runs attention as separate kernels"),
    trace_dir: str = typer.Option(None, "--trace", help="A directory: write each case's Perfetto "
                                  "trace there (MODEL-INSTANCE-bBATCH-sSEQ.json; cases are "
                                  "simulated, not read from the result cache)."),
) -> None:
    from trnsim.cli import checks
    from trnsim.perf import bench
    from trnsim.perf.zoo import register_config

    checks.lnc(lnc)
    checks.output_file(plot, "--plot")
    checks.output_directory(trace_dir, "--trace")
    configured = tuple(register_config(path) for path in config or ())
    named = checks.names(models, "--models", ()) or ()
    model_list = (named + configured) if configured else (named or bench.DEFAULT_MODELS)
    instance_list = checks.names(instances, "--instances", ()) or bench.DEFAULT_INSTANCES
    from trnsim import hardware
    from trnsim.perf.zoo import zoo_model

    for name in model_list:
        zoo_model(name)
    instance_list = tuple(hardware.instance(i).name for i in instance_list)
    batches = _ints(batch, bench.DEFAULT_BATCHES)
    total = len(model_list) * len(instance_list) * len(batches)
    if plot:  # before any work: a missing extra must not cost the whole run and its table
        from trnsim.perf.plot import require_matplotlib

        require_matplotlib()
    if trace_dir is not None:
        Path(trace_dir).mkdir(exist_ok=True)
    with steps("trnsim bench", total, quiet=as_json or as_csv) as progress:
        results = bench.run_matrix(model_list, instance_list, batches, seq, auto_cast=auto_cast,
                                   check_numerics=check_numerics, decode=decode,
                                   progress=progress.step, lnc=lnc, tensor_parallel=tp,
                                   model_type=model_type, trace_dir=trace_dir)
    if as_json:
        rows = [{k: row[k] for k in ("model", "batch", "seq", "decode", "speedup")}
                for row in bench.comparison_rows(results, instance_list)]
        typer.echo(json.dumps({"auto_cast": _casts(results), "auto_cast_type": "bf16",
                               "results": [r.to_dict() for r in results],
                               "speedup_of": [instance_list[-1], instance_list[0]],
                               "rows": rows}, indent=2))
        _write_plot(results, instance_list, plot)
        return
    if as_csv:
        typer.echo(results_csv(results), nl=False)
        _write_plot(results, instance_list, plot)
        return
    out = console()
    columns, rows = bench_columns(results, instance_list)
    print_table(out, columns, rows, title=bench_title(results), wide=wide)
    how = "as asked" if auto_cast else "each compiler's default, as the published runs used"
    casts = ", ".join(f"{i} {c}" for i, c in _casts(results).items())
    out.print(f"auto-cast to bf16: {casts} ({how}); published values from trnsim's calibration "
              "set (measurements.csv).", highlight=False)
    if check_numerics:
        for r in results:
            out.print(f"{r.model} b{r.batch} {r.instance}: {r.numerics}", highlight=False)
    for r in results:
        if r.trace:
            out.print(f"trace of {r.model} b{r.batch} on {r.instance}: {r.trace} (a report: "
                      f"trnsim profile view {r.trace})", highlight=False, markup=False)
    if plot:  # after the table is printed: a failing plot cannot lose it
        _write_plot(results, instance_list, plot)
        out.print(f"plot written to {plot}", highlight=False)


def _write_plot(results, instances, path: str | None) -> None:
    if path:
        from trnsim.perf.plot import bench_plot

        bench_plot(results, instances, path)
