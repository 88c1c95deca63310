"""How fast trnsim casts: prints one JSON object. Not part of the test suite.

Measures, on one pinned core, best of several runs:
- stochastic rounding of 10 million float32 values to bfloat16 (target: >= 50e6 values/s), plus
  float16 and float8 for information;
- RNE casts to bfloat16, float16 and the float8 formats, as a ratio to ml_dtypes/numpy ``astype``
  on the same array (target: <= 2.0).

Run: PYTHONPATH=src python benchmarks/numerics.py [--values N] [--repeats R]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import ml_dtypes
import numpy as np

from trnsim.numerics import CounterRNG, cast, dtype

SR_TARGET_VALUES_PER_S = 50e6
RNE_TARGET_RATIO = 2.0
RNE_TARGETS = ("bfloat16", "float16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2")
SR_TARGETS = ("bfloat16", "float16", "float8_e4m3", "float8_e5m2")


def _best_seconds(fn, repeats: int) -> float:
    fn()  # warm up: first-touch page faults and lazy imports are not what we measure
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--values", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    pinned = None
    if hasattr(os, "sched_setaffinity"):
        pinned = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {pinned})

    x = np.random.default_rng(0).standard_normal(args.values).astype(np.float32)
    rng = CounterRNG(0)

    sr = {}
    for name in SR_TARGETS:
        seconds = _best_seconds(lambda name=name: cast(x, name, "stochastic", rng), args.repeats)
        sr[name] = {"seconds": round(seconds, 5), "values_per_s": round(args.values / seconds)}

    rne = {}
    for name in RNE_TARGETS:
        storage = dtype(name).np_dtype
        ours = _best_seconds(lambda name=name: cast(x, name, "rne"), args.repeats)
        theirs = _best_seconds(lambda storage=storage: x.astype(storage), args.repeats)
        rne[name] = {"trnsim_seconds": round(ours, 5), "astype_seconds": round(theirs, 5),
                     "ratio": round(ours / theirs, 3)}

    sr_bf16 = sr["bfloat16"]["values_per_s"]
    worst_ratio = max(entry["ratio"] for entry in rne.values())
    print(json.dumps({
        "benchmark": "trnsim.numerics casts",
        "values": args.values,
        "repeats": args.repeats,
        "pinned_cpu": pinned,
        "sr_bf16_values_per_s": sr_bf16,
        "sr_bf16_target_values_per_s": SR_TARGET_VALUES_PER_S,
        "sr_bf16_meets_target": sr_bf16 >= SR_TARGET_VALUES_PER_S,
        "rne_worst_ratio_vs_astype": worst_ratio,
        "rne_target_ratio": RNE_TARGET_RATIO,
        "rne_meets_target": worst_ratio <= RNE_TARGET_RATIO,
        "stochastic": sr,
        "rne_vs_astype": rne,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "ml_dtypes": ml_dtypes.__version__,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }, indent=2))


if __name__ == "__main__":
    sys.exit(main())
