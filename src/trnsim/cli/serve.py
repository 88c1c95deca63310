"""`trnsim serve MODEL --simulate ...` (a serving deployment simulated under a workload) and
`trnsim serve MODEL --port N` (a real OpenAI-compatible HTTP server, `trnsim.cli.http_server`)."""

from __future__ import annotations

import json

import typer
from rich import box
from rich.table import Table

from trnsim.cli.app import app, console, err_console
from trnsim.errors import InvalidArgumentError


def _workload(trace, requests, rate, arrivals, input_tokens, output_tokens, workload, seed):
    from trnsim.perf.serving import workload as w

    if trace:
        return w.read_trace(trace)
    if workload:
        if workload != "neuron-vllm":
            raise InvalidArgumentError(f"--workload {workload!r}: known neuron-vllm "
                                       f"(1500 prompt / 250 output tokens)")
        input_tokens, output_tokens = map(str, w.NEURON_VLLM_WORKLOAD)
    if rate is None:
        raise InvalidArgumentError("give --rate REQUESTS_PER_S (or --trace FILE)")
    return w.synthetic(requests, rate, w.LengthDistribution.parse(input_tokens),
                       w.LengthDistribution.parse(output_tokens), arrivals=arrivals, seed=seed)


def _candidates(text: str | None, instance: str, tp: int, lnc: int | None):
    from trnsim.perf.serving.deploy import Layout

    if not text:
        return [Layout(instance, tp, lnc)]
    layouts = []
    for item in text.split(","):
        name, _, degree = item.strip().partition(":")
        try:
            layouts.append(Layout(name, int(degree or 1), lnc))
        except ValueError:
            raise InvalidArgumentError(f"--layouts: write INSTANCE:TP,...; got {item!r}") from None
    return layouts


@app.command("serve")
def serve_command(
    model: str = typer.Argument(..., help="A zoo causal LM or a Hugging Face config.json "
                                "(--simulate), or a model to serve over HTTP (--port)."),
    simulate: bool = typer.Option(False, "--simulate", help="Simulate a deployment under a "
                                  "workload instead of serving."),
    port: int = typer.Option(None, "--port", help="Serve over HTTP on 127.0.0.1:PORT."),
    host: str = typer.Option("127.0.0.1", "--host"),
    instance: str = typer.Option("inf2.xlarge", "--instance"),
    tp: int = typer.Option(1, "--tp", min=1),
    lnc: int = typer.Option(None, "--lnc"),
    auto_cast: str = typer.Option(None, "--auto-cast"),
    quantize: str = typer.Option(None, "--quantize", help="Weight-only quantization (int8) of "
                                 "the simulated deployment's linear weights."),
    replicas: int = typer.Option(None, "--replicas", help="Default: every copy the instance "
                                 "holds (NeuronCores // TP)."),
    rate: float = typer.Option(None, "--rate", help="Requests per second."),
    requests: int = typer.Option(1000, "--requests", min=1),
    arrivals: str = typer.Option("poisson", "--arrivals", help="poisson | fixed"),
    trace: str = typer.Option(None, "--trace", help="CSV / JSON-lines requests: arrival_s or "
                              "arrival_ms, input_tokens, output_tokens."),
    input_tokens: str = typer.Option("1500", "--input-tokens", help="N, uniform:LO:HI or "
                                     "normal:MEAN:STD"),
    output_tokens: str = typer.Option("250", "--output-tokens"),
    workload: str = typer.Option(None, "--workload", help="neuron-vllm: 1500 in / 250 out."),
    max_num_seqs: int = typer.Option(8, "--max-num-seqs", min=1),
    max_model_len: int = typer.Option(None, "--max-model-len"),
    block_size: int = typer.Option(32, "--block-size", min=1),
    batch_buckets: bool = typer.Option(False, "--batch-buckets", help="Decode graphs at powers "
                                       "of two up to --max-num-seqs (default: one graph)."),
    chunked_prefill: bool = typer.Option(False, "--chunked-prefill"),
    draft_model: str = typer.Option(None, "--draft-model", help="Speculative decoding: a "
                                    "smaller causal LM proposing tokens (zoo name or "
                                    "config.json) on the same cores."),
    speculation_length: int = typer.Option(4, "--speculation-length", min=1, help="Draft "
                                           "tokens per iteration (with --draft-model)."),
    acceptance_rate: float = typer.Option(0.7, "--acceptance-rate", min=0.0, max=1.0,
                                          help="Chance the target accepts each draft token "
                                          "(with --draft-model)."),
    max_num_batched_tokens: int = typer.Option(512, "--max-num-batched-tokens"),
    slo_ttft_ms: float = typer.Option(None, "--slo-ttft-ms"),
    slo_tpot_ms: float = typer.Option(None, "--slo-tpot-ms"),
    plot: str = typer.Option(None, "--plot", help="PNG of latency against load (rates of "
                             "--plot-rates)."),
    plot_rates: str = typer.Option(None, "--plot-rates", help="Comma list of requests/s "
                                   "(default: 0.25x to 2x --rate)."),
    search: bool = typer.Option(False, "--search", help="Cheapest layout of --layouts meeting "
                                "the SLOs (p99) at --rate."),
    layouts: str = typer.Option(None, "--layouts", help="INSTANCE:TP,... for --search."),
    seed: int = typer.Option(0, "--seed"),
    as_json: bool = typer.Option(False, "--json"),
    max_batch: int = typer.Option(8, "--max-batch", help="HTTP: requests batched per step."),
    queue_size: int = typer.Option(64, "--queue-size", help="HTTP: requests waiting at most."),
    timeout_s: float = typer.Option(60.0, "--timeout", help="HTTP: seconds per request."),
) -> None:
    """Serve MODEL: simulated under a workload (--simulate), or over HTTP (--port)."""
    if simulate == (port is not None):
        raise InvalidArgumentError("give exactly one of --simulate or --port N")
    if port is not None:
        from trnsim.cli.http_server import run_server

        if quantize is not None:
            raise InvalidArgumentError("--quantize applies to --simulate (the HTTP server runs "
                                       "the model's own weights)")

        run_server(model, host=host, port=port, instance=instance, tp=tp, lnc=lnc,
                   auto_cast=auto_cast, max_batch=max_batch, queue_size=queue_size,
                   timeout_s=timeout_s)
        return
    from trnsim.cli.generate import step_timer
    from trnsim.perf.serving.deploy import Layout, SchedulerChoices, run
    from trnsim.perf.serving.simulate import SLO

    if plot:
        from trnsim.perf.serving.plot import require_matplotlib

        require_matplotlib()  # before any work
    choices = SchedulerChoices(max_num_seqs, max_model_len, block_size, batch_buckets,
                               chunked_prefill, max_num_batched_tokens,
                               speculation=speculation_length if draft_model else 0,
                               acceptance_rate=acceptance_rate, seed=seed)
    slo = SLO(slo_ttft_ms, slo_tpot_ms)
    reqs = _workload(trace, requests, rate, arrivals, input_tokens, output_tokens, workload, seed)
    timers = {}
    drafts = {}

    def costs_for(layout):
        key = (layout.instance, layout.tensor_parallel, layout.lnc)
        if key not in timers:
            source, timer = step_timer(model, layout.instance, layout.tensor_parallel,
                                       layout.lnc, auto_cast, as_json, quantize)
            timers[key] = (source, timer)
        source, timer = timers[key]
        weights = timer.weight_bytes()
        if draft_model:  # the draft model's weights share the replica's HBM
            if key not in drafts:
                drafts[key] = step_timer(draft_model, layout.instance, layout.tensor_parallel,
                                         layout.lnc, auto_cast, as_json, quantize)[1]
            weights += drafts[key].weight_bytes()
        return timer, weights

    if draft_model and search:
        raise InvalidArgumentError("--search with --draft-model is not supported yet")
    if search:
        from trnsim.perf.serving.deploy import search as run_search

        source = step_timer(model, instance, tp, lnc, auto_cast, True)[0]
        rows = run_search(source, _candidates(layouts, instance, tp, lnc), choices, reqs,
                          costs_for, slo)
        _print_search(rows, as_json, rate)
        return
    layout = Layout(instance, tp, lnc)
    timer, weight_bytes = costs_for(layout)
    source = timers[(layout.instance, tp, lnc)][0]
    draft = drafts.get((layout.instance, tp, lnc))
    report = run(source, layout, choices, reqs, timer, weight_bytes, slo, replicas, draft)
    data = {"model": source.name, **report.to_dict(),
            "compiles": timer.compiles + (draft.compiles if draft else 0)}
    if draft is not None:
        data["draft_model"] = draft.name
    if plot:
        data["plot"] = _plot(plot, plot_rates, rate, source, layout, choices, trace, requests,
                             arrivals, input_tokens, output_tokens, workload, seed, timer,
                             weight_bytes, slo, replicas, draft)
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    _print_report(data)


def _plot(path, rates_text, rate, source, layout, choices, trace, requests, arrivals,
          input_tokens, output_tokens, workload, seed, timer, weight_bytes, slo, replicas,
          draft=None):
    from trnsim.perf.serving.deploy import run
    from trnsim.perf.serving.plot import serving_plot

    if trace:
        raise InvalidArgumentError("--plot sweeps --rate; it cannot re-time a --trace")
    rates = ([float(r) for r in rates_text.split(",")] if rates_text
             else [rate * f for f in (0.25, 0.5, 0.75, 1.0, 1.5, 2.0)])
    points = []
    for r in rates:
        reqs = _workload(None, requests, r, arrivals, input_tokens, output_tokens, workload, seed)
        report = run(source, layout, choices, reqs, timer, weight_bytes, slo, replicas, draft)
        points.append({"rate": r, "ttft_ms": report.ttft_ms, "tpot_ms": report.tpot_ms,
                       "throughput_tokens_per_s": report.throughput_tokens_per_s})
    serving_plot(points, path, title=f"{source.name} on {layout.instance} TP{layout.tensor_parallel}")
    return {"path": path, "points": points}


def _print_report(data: dict) -> None:
    out = console()
    extra = data["extra"]
    table = Table(box=box.SIMPLE_HEAD, title=f"trnsim serve --simulate: {data['model']} on "
                  f"{extra['instance']} TP {extra['tp']}, {data['replicas']} replica(s), "
                  f"{data['requests']} requests")
    for col in ("latency", "p50 ms", "p90 ms", "p99 ms", "mean ms"):
        table.add_column(col, justify="right" if col != "latency" else "left")
    for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        values = data[name]

        def cell(key, values=values):
            return "-" if values[key] is None else f"{values[key]:,.2f}"

        table.add_row(name[:-3].upper(), cell("p50"), cell("p90"), cell("p99"), cell("mean"))
    out.print(table)
    goodput = data["goodput_requests_per_s"]
    price = extra["price_per_hour"]
    lines = [f"throughput: {data['throughput_tokens_per_s']:,.1f} output tokens/s, "
             f"{data['throughput_requests_per_s']:,.3f} requests/s over {data['duration_s']:,.1f} s",
             f"goodput under SLO {data['slo']}: " + ("-" if goodput is None
                                                     else f"{goodput:,.3f} requests/s"),
             f"KV cache: {data['kv_blocks_per_replica']:,} blocks per replica, mean use "
             f"{100 * data['kv_cache_mean_use']:.1f}%, peak {100 * data['kv_cache_peak_use']:.1f}%"
             f"; preemptions {data['preemptions']}",
             f"device busy {100 * data['device_busy_fraction']:.1f}%; "
             + ("" if price is None else f"$ per million output tokens at this load "
                f"{price / 3600 / max(data['throughput_tokens_per_s'], 1e-9) * 1e6:,.3f}")]
    if extra.get("speculation"):
        lines.append(f"speculative decoding: draft {data['draft_model']}, "
                     f"{extra['speculation']} tokens an iteration, acceptance rate "
                     f"{extra['acceptance_rate']}")
    if "plot" in data:
        lines.append(f"plot written to {data['plot']['path']}")
    for line in lines:
        out.print(line, highlight=False)


def _print_search(rows: list[dict], as_json: bool, rate) -> None:
    if as_json:
        typer.echo(json.dumps({"rate": rate, "candidates": rows}, indent=2))
        return
    table = Table(box=box.SIMPLE_HEAD, title=f"cheapest layouts at {rate} requests/s (p99 SLOs)")
    for col in ("instance", "tp", "instances", "replicas", "$/hour", "TTFT p99 ms",
                "TPOT p99 ms", "meets"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["instance"], str(r["tp"]), str(r.get("instances", "-")),
                      str(r.get("replicas", "-")), f"{r['price_per_hour']:.2f}"
                      if r.get("price_per_hour") is not None else "-",
                      f"{r['ttft_p99_ms']:.1f}" if r.get("ttft_p99_ms") is not None else "-",
                      f"{r['tpot_p99_ms']:.2f}" if r.get("tpot_p99_ms") is not None else "-",
                      "yes" if r["meets"] else ("no: " + r.get("reason", "")))
    console().print(table)
    if rows and rows[0]["meets"]:
        err_console().print(f"cheapest: {rows[0]['instances']} x {rows[0]['instance']} "
                            f"TP{rows[0]['tp']}", highlight=False)
