"""Speed of `trnsim serve --simulate`: 10,000 requests of the Neuron vLLM workload (1500 prompt /
250 output tokens, Poisson arrivals) through the continuous-batching simulation, step cache warm.

    python benchmarks/serve_sim.py [--model llama-3.2-1b] [--instance inf2.xlarge] [--tp 1]
                                   [--requests 10000] [--rate 4] [--max-num-seqs 8]

A first pass over 200 requests compiles and simulates the steps the cache lacks (reported apart
as ``warm_s``); ``simulate_s`` is the simulation alone, the figure the target (< 60 s) is about.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time

from trnsim.perf.serving.deploy import Layout, SchedulerChoices, run
from trnsim.perf.serving.models import resolve_model
from trnsim.perf.serving.simulate import SLO
from trnsim.perf.serving.steps import Deployment, StepTimer
from trnsim.perf.serving.workload import NEURON_VLLM_WORKLOAD, LengthDistribution, synthetic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-3.2-1b")
    parser.add_argument("--instance", default="inf2.xlarge")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=4.0)
    parser.add_argument("--max-num-seqs", type=int, default=8)
    args = parser.parse_args()

    source = resolve_model(args.model)
    timer = StepTimer(source.name, source.build, source.config,
                      Deployment(args.instance, args.tp))
    inputs, outputs = NEURON_VLLM_WORKLOAD
    requests = synthetic(args.requests, args.rate, LengthDistribution("fixed", inputs),
                         LengthDistribution("fixed", outputs), seed=0)
    layout = Layout(args.instance, args.tp)
    choices = SchedulerChoices(max_num_seqs=args.max_num_seqs)
    start = time.perf_counter()  # a first pass compiles any step the cache lacks
    run(source, layout, choices, requests[:200], timer, timer.weight_bytes(), SLO())
    warm_s = time.perf_counter() - start
    start = time.perf_counter()
    report = run(source, layout, choices, requests, timer, timer.weight_bytes(), SLO())
    simulate_s = time.perf_counter() - start
    print(json.dumps({"model": source.name, "instance": args.instance, "tp": args.tp,
                      "requests": report.requests, "replicas": report.replicas,
                      "rate_per_s": args.rate, "warm_s": round(warm_s, 2),
                      "compiles": timer.compiles, "simulate_s": round(simulate_s, 2),
                      "iterations": report.iterations, "target_s": 60,
                      "ttft_p50_ms": report.ttft_ms["p50"], "tpot_p50_ms": report.tpot_ms["p50"],
                      "throughput_tokens_per_s": report.throughput_tokens_per_s}, indent=2))


if __name__ == "__main__":
    main()
