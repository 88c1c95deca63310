"""NKI front end + simulator speed and the matmul calibration row, printed as JSON.

The fully optimised bf16 matmul [4096, 8192] @ [8192, 8192] (lhsT [8192, 4096]) on one trn1
NeuronCore: trace + timing-only simulation (target < 30 s), then functional bf16 numerics (target
< 3 min), and the predicted latency against the published 6.97 ms (measurements.csv row
nki-matmul-optimized). The less optimised variants are predicted at the same size to show they
order as on hardware. Run: PYTHONPATH=src:. python benchmarks/nki_speed.py [--skip-functional]
"""

from __future__ import annotations

import json
import sys
import time

import ml_dtypes
import numpy as np
from tests.nki.kernels import matmul

from trnsim.nki import language as nl
from trnsim.nki import typing as nt

K, M, N = 8192, 4096, 8192
MEASURED_MS = 6.97


def timed(kernel, args, mode, **kwargs):
    start = time.perf_counter()
    result = kernel.run(args, kwargs, mode=mode)
    return result, time.perf_counter() - start


def main() -> None:
    report: dict = {"shape": {"K": K, "M": M, "N": N}, "measured_ms": MEASURED_MS}
    specs = (nt.tensor[[K, M], nl.bfloat16], nt.tensor[[K, N], nl.bfloat16])
    kernel = matmul.matmul_optimized
    _, wall = timed(kernel, specs, "timing")
    profile = kernel.last_run.profile
    predicted_ms = profile.total_ns / 1e6
    report["optimized"] = {
        "predicted_ms": round(predicted_ms, 4),
        "error_pct": round(100 * (predicted_ms - MEASURED_MS) / MEASURED_MS, 2),
        "tensor_utilisation_pct": round(100 * profile.summary.tensor_flops_utilisation, 2),
        "instructions": profile.summary.instructions,
        "timing_only_wall_s": round(wall, 2),
    }
    variants = {}
    for variant in (matmul.matmul_blocked, matmul.matmul_hoisted, matmul.matmul_naive):
        _, wall = timed(variant, specs, "timing")
        summary = variant.last_run.profile.summary
        variants[variant.__name__] = {
            "predicted_ms": round(summary.total_ns / 1e6, 3),
            "tensor_utilisation_pct": round(100 * summary.tensor_flops_utilisation, 1),
            "dma_bytes": summary.dma_bytes, "timing_only_wall_s": round(wall, 2)}
    report["variants"] = variants
    order = [report["optimized"]["predicted_ms"]] + [v["predicted_ms"] for v in variants.values()]
    report["variants_slower_in_order"] = order == sorted(order)
    if "--skip-functional" not in sys.argv:
        rng = np.random.default_rng(0)
        lhs_t = rng.standard_normal((K, M), dtype=np.float32).astype(ml_dtypes.bfloat16)
        rhs = rng.standard_normal((K, N), dtype=np.float32).astype(ml_dtypes.bfloat16)
        kernel._cache.clear()
        start = time.perf_counter()
        out = kernel(lhs_t, rhs)
        wall = time.perf_counter() - start
        rows = slice(0, 256)
        ref = lhs_t[:, rows].astype(np.float32).T @ rhs.astype(np.float32)
        report["functional"] = {
            "wall_s": round(wall, 1),
            "max_rel_error_first_256_rows": float(np.abs(out[rows].astype(np.float32) - ref).max()
                                                  / np.abs(ref).max()),
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
