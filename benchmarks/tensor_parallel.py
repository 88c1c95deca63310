"""Tensor parallelism at full size: BERT-large split over 1, 2, 4 and 8 NeuronCores. Prints JSON.

Per (instance, degree): seconds for trnsim.trace + report (timing simulation of every rank, the
collectives run on the fabric), predicted latency, the share of the slowest rank's time spent
waiting on collectives (all-reduce / all-gather spans), weight bytes per rank, and, for degree 2,
how far the functional outputs are from the single-core model's (max |error| / max |value|).
BERT-large fits one core; the point is the machinery at scale and what splitting costs: a model
that does not fit one core's HBM is split the same way (tests/compiler/test_tensor_parallel.py).

Run: PYTHONPATH=src python benchmarks/tensor_parallel.py [--instances inf2.xlarge trn1.32xlarge]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
DEGREES = {"inf2.xlarge": (1, 2), "trn1.32xlarge": (1, 2, 4, 8)}


def build():
    import torch
    import transformers as T

    torch.manual_seed(0)
    config = T.BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                          intermediate_size=4096)
    return T.BertModel(config).eval(), (torch.randint(0, 30000, (1, 128)),)


def measure(model, inputs, instance: str, degree: int) -> tuple[dict, object]:
    import trnsim

    start = time.perf_counter()
    compiled = trnsim.trace(model, inputs, instance=instance, tensor_parallel=degree)
    report = compiled.report()
    seconds = time.perf_counter() - start
    collective = report.by_op.get("k.collective", {}).get("span_ns", 0.0)
    weights = sum(t.nbytes for t in compiled.program.tensors.values() if t.kind == "constant")
    return {"trace_and_report_s": round(seconds, 2), "latency_ms": round(report.latency_ms, 3),
            "collectives": report.by_op.get("k.collective", {}).get("kernels", 0),
            "collective_share_of_latency": round(collective / (report.latency_ms * 1e6), 3),
            "weight_bytes_per_rank": weights, "copies": report.copies,
            "throughput_per_s": round(report.throughput_per_s, 1)}, compiled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", nargs="+", default=list(DEGREES))
    args = parser.parse_args()
    import numpy as np

    model, inputs = build()
    results: dict = {}
    with tempfile.TemporaryDirectory() as cache:
        os.environ["TRNSIM_CACHE_DIR"] = cache
        for instance in args.instances:
            rows, compiled = {}, {}
            for degree in DEGREES.get(instance, (1, 2)):
                rows[degree], compiled[degree] = measure(model, inputs, instance, degree)
            if 2 in compiled:
                start = time.perf_counter()
                got = compiled[2](*inputs).last_hidden_state.float().numpy()
                rows[2]["functional_run_s"] = round(time.perf_counter() - start, 2)
                want = compiled[1](*inputs).last_hidden_state.float().numpy()
                rows[2]["max_error_vs_one_core"] = float(np.abs(got - want).max()
                                                         / np.abs(want).max())
            results[instance] = rows
    print(json.dumps({"benchmark": "tensor_parallel", "model": "bert-large-uncased bs1 seq128",
                      "python": sys.version.split()[0], "results": results}, indent=2))


if __name__ == "__main__":
    main()
