"""What registering with the runtime registry (`trnsim top` / `trnsim monitor`) costs a model's
call: the hook alone (entering and leaving `model_execution` for a model already loaded, so only
counters in memory are touched), and a small compiled model's call with and without it.

    python benchmarks/registry_overhead.py [--calls 200]

The record is written by a background thread, never by the call. Prints one JSON object; call
times are medians (the machine may be shared: compare the two in one run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time


def _median_s(function, calls: int) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    os.environ.setdefault("TRNSIM_RUNTIME_DIR", tempfile.mkdtemp(prefix="trnsim-bench-registry-"))
    import torch

    import trnsim
    from trnsim.runtime.registry import model_execution, process

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 16))
    example = torch.randn(8, 128)
    compiled = trnsim.trace(model, (example,), instance="inf2.xlarge")
    compiled(example)  # loads it and works out its per-execution cost once

    def hook_only():
        with model_execution(compiled):
            pass

    hook_s = _median_s(hook_only, args.calls * 10)
    with_s = _median_s(lambda: compiled(example), args.calls)
    os.environ["TRNSIM_REGISTRY"] = "0"
    process._current = None  # registration off from here on
    without_s = _median_s(lambda: compiled(example), args.calls)
    print(json.dumps({"hook_us": round(hook_s * 1e6, 2),
                      "call_with_registry_ms": round(with_s * 1e3, 3),
                      "call_without_registry_ms": round(without_s * 1e3, 3),
                      "hook_share_of_call": round(hook_s / without_s, 5),
                      "calls": args.calls}))


if __name__ == "__main__":
    main()
