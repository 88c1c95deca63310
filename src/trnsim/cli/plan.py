"""`trnsim plan`: a training layout's step on a cluster, or `--search` for the best layouts."""

from __future__ import annotations

import json

import typer

from trnsim.cli.app import app, console

_MS_PARTS = ("forward_compute", "backward_compute", "head_compute", "tp_collectives",
             "ep_all_to_all", "pipeline_bubble", "pp_sendrecv", "dp_reduction_exposed",
             "dp_reduction_overlapped", "optimizer")


@app.command("plan")
def plan(
    model: str = typer.Argument(..., help="Zoo/config name, config.json, or a parameter count "
                                "(70B: the standard decoder shape)."),
    system: str = typer.Option("trn1.32xlarge", "--system", help="'INSTANCE [x NODES]', "
                               "trn2u.48xlarge (UltraServer), 'ultracluster trn2 x CHIPS'."),
    layout: str = typer.Option("TP1", "--layout", help="e.g. 'TP8 PP4 DP32 ZeRO-1 SP RC V2'; "
                               "DP defaults to what the cores leave."),
    seq: int | None = typer.Option(None, "--seq", help="Sequence length (default: the "
                                   "model's)."),
    global_batch: int = typer.Option(1024, "--global-batch", help="Sequences per step."),
    micro_batch: int = typer.Option(1, "--micro-batch", help="Sequences per core per "
                                    "micro-step."),
    precision: str = typer.Option("mixed", "--precision", help="mixed (bf16 + fp32 "
                                  "optimizer), bf16 (XLA_USE_BF16, SR), fp32."),
    optimizer: str = typer.Option("adamw", "--optimizer", help="adamw, lamb or sgd."),
    lnc: int | None = typer.Option(None, "--lnc", help="Logical NeuronCore size (Trn2: 1 "
                                   "or 2)."),
    tokens: float | None = typer.Option(None, "--tokens", help="Also the time and cost to "
                                        "train this many tokens."),
    layers: int | None = typer.Option(None, "--layers", help="Override the layer count."),
    do_search: bool = typer.Option(False, "--search", help="Search layouts instead (fit HBM, "
                                   "best throughput per dollar)."),
    ray_address: str | None = typer.Option(None, "--ray-address", help="Ray cluster for "
                                           "--search (default: a local Ray)."),
    no_ray: bool = typer.Option(False, "--no-ray", help="--search in-process, without Ray."),
    max_days: float | None = typer.Option(None, "--max-days", help="--search target: train "
                                          "--tokens within this many days."),
    top: int = typer.Option(10, "--top", help="--search: layouts shown."),
    plot: str | None = typer.Option(None, "--plot", help="--search: write a PNG of the "
                                    "layouts (throughput vs cost)."),
    prompt: int | None = typer.Option(None, "--prompt", help="Inference instead: prompt "
                                      "tokens (TTFT, TPOT, tokens/s at the layout's TP)."),
    output: int = typer.Option(128, "--output", help="Inference: generated tokens."),
    batch: int = typer.Option(1, "--batch", help="Inference: sequences per replica."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Plan a training job on a cluster from simulated per-layer timings and the fabric model
    (or, with --prompt, a deployment's TTFT, TPOT and tokens/s)."""
    from trnsim.cli.progress import steps
    from trnsim.perf.scale import Training, parse_layout, parse_system, resolve_model

    spec = resolve_model(model, layers)
    machine = parse_system(system, lnc)
    if prompt is not None:
        from trnsim.perf.scale.inference import plan_inference

        with steps("trnsim plan", quiet=as_json) as bar:
            result = plan_inference(spec, machine, parse_layout(layout).tp, prompt, output,
                                    batch, model_name=model, progress=bar.step)
        if as_json:
            typer.echo(json.dumps(result.to_dict(), indent=2))
        else:
            gib = 2**30
            console().print(
                f"{result.model} on {result.system}, TP{result.tp} x {result.replicas} replicas,"
                f" batch {batch}: TTFT {result.ttft_ms:.2f} ms, TPOT {result.tpot_ms:.2f} ms, "
                f"{result.tokens_per_s:,.0f} tokens/s; HBM per core "
                f"{result.memory['total_bytes'] / gib:.2f} GiB (KV cache "
                f"{result.memory['kv_cache_bytes'] / gib:.2f}) "
                f"{'fits' if result.fits else 'DOES NOT FIT'}", markup=False, highlight=False)
        return
    work = Training(seq or spec.default_seq, global_batch, micro_batch, precision, optimizer)
    with steps("trnsim plan", quiet=as_json) as bar:
        if do_search:
            from trnsim.perf.scale import search

            result = search(spec, machine, work, backend="in-process" if no_ray else "ray",
                            ray_address=ray_address, max_days=max_days, tokens=tokens,
                            progress=bar.step)
        else:
            from trnsim.perf.scale import plan_training

            result = plan_training(spec, machine, parse_layout(layout), work, progress=bar.step)
    if do_search:
        if plot:
            from trnsim.perf.scale.plotting import search_plot

            search_plot(result, plot, f"{spec.name} on {machine.label()}")
        if as_json:
            typer.echo(json.dumps(result.to_dict(top), indent=2))
        else:
            _print_search(result, top, tokens)
        return
    if as_json:
        out = result.to_dict()
        if tokens:
            out["train"] = result.time_to_train(tokens)
        typer.echo(json.dumps(out, indent=2))
    else:
        _print_plan(result, tokens)


def _print_plan(p, tokens: float | None) -> None:
    from trnsim.cli.tables import Column, print_table

    out = console()
    out.print(f"{p.model} on {p.system}, {p.layout}: seq {p.seq}, global batch "
              f"{p.global_batch}, micro-batch {p.micro_batch} x {p.microbatches} per DP rank, "
              f"{p.precision}, {p.optimizer}", markup=False, highlight=False)
    rows = [[name.replace("_", " "), f"{p.breakdown_ms[name]:.3f}",
             f"{100 * p.breakdown_ms[name] / p.step_ms:.1f}"]
            for name in _MS_PARTS if p.breakdown_ms.get(name)]
    rows.append(["step", f"{p.step_ms:.3f}", "100.0"])
    print_table(out, [Column("part", "left"), Column("ms per step"), Column("% of step")], rows)
    lay = p.per_layer_ms
    out.print(f"one layer, one micro-batch, one core (simulated): forward {lay['forward']:.3f} "
              f"ms, backward {lay['backward']:.3f} ms, optimizer {lay['optimizer']:.3f} ms; "
              f"TP collectives {lay['tp_forward']:.3f} + {lay['tp_backward']:.3f} ms",
              markup=False, highlight=False)
    out.print(f"throughput {p.sequences_per_s:.2f} seq/s, {p.tokens_per_s:,.0f} tokens/s; MFU "
              f"{100 * p.mfu:.1f}% of {p.cores} cores' dense bf16 peak", markup=False,
              highlight=False)
    gib = 2**30
    m = p.memory
    out.print(f"HBM per core: {m['total_bytes'] / gib:.2f} of {m['capacity_bytes'] / gib:.0f} "
              f"GiB ({'fits' if p.fits else 'DOES NOT FIT'}): weights "
              f"{m['weights_bytes'] / gib:.2f}, gradients {m['gradients_bytes'] / gib:.2f}, "
              f"optimizer {m['optimizer_bytes'] / gib:.2f}, activations "
              f"{m['activations_bytes'] / gib:.2f} GiB", markup=False, highlight=False)
    if tokens:
        t = p.time_to_train(tokens)
        cost = f", ${t['cost_usd']:,.0f} on demand" if t["cost_usd"] is not None else \
            " (no published price)"
        out.print(f"{tokens:.3g} tokens: {t['days']:.1f} days{cost}", markup=False,
                  highlight=False)
    for note in p.notes:
        out.print(f"note: {note}", markup=False, highlight=False)


def _print_search(result, top: int, tokens: float | None) -> None:
    from trnsim.cli.tables import Column, print_table

    out = console()
    out.print(f"{result.evaluated} layouts, {result.fitting} fit HBM; {result.backend}, "
              f"{result.seconds:.1f} s", markup=False, highlight=False)
    columns = [Column("layout", "left"), Column("micro-batch"), Column("step ms"),
               Column("seq/s"), Column("MFU %"), Column("HBM GiB", drop=1),
               Column("Mtokens per $", drop=2)]
    rows = []
    for p in result.plans[:top]:
        per = p.tokens_per_dollar
        rows.append([p.layout, str(p.micro_batch), f"{p.step_ms:.1f}",
                     f"{p.sequences_per_s:.2f}", f"{100 * p.mfu:.1f}",
                     f"{p.memory['total_bytes'] / 2**30:.1f}",
                     f"{per / 1e6:.2f}" if per is not None else "-"])
    print_table(out, columns, rows)
