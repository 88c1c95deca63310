"""BERT-large-shaped kernels of trnsim.kernels on one inf2 NeuronCore against their roofline.

For each kernel: the simulated time (timing-only run), the roofline max(FLOPs / TensorE bf16
peak, HBM bytes / DMA bandwidth of one core) with its two terms, the ratio, and the engine
utilisations. Shapes: BERT-large (hidden 1024, FFN 4096, 16 heads of 64) at 128, 1280 and 2560
tokens (batch 1 and 10 at sequence 128, batch 10 at 256); matmuls carry BERT's bias (and the
FFN's GELU as an epilogue), attention reads q/k/v as views of one fused QKV projection output with
BERT's additive [batch, 1, 1, seq] mask, layer norm adds the residual and applies weight and bias.

Run: PYTHONPATH=src:. python benchmarks/kernels_roofline.py [--quick]
"""

from __future__ import annotations

import sys
from pathlib import Path

# tests/sim/synthetic.py and tests/kernels/harness.py (helpers shared with the tests) live in the
# repository, not the installed package: make it importable however this script is started
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import json
import time

from tests.kernels.harness import ArraySpec, run

from trnsim import hardware
from trnsim.kernels import attention, matmul, norm
from trnsim.kernels.layout import hbm_view
from trnsim.nki import language as nl

TARGET = "inf2"
HIDDEN, FFN, HEADS, HEAD_DIM = 1024, 4096, 16, 64
MATMULS = {"qkv": (HIDDEN, 3 * HIDDEN), "attn_out": (HIDDEN, HIDDEN), "ffn1": (HIDDEN, FFN),
           "ffn2": (FFN, HIDDEN)}


def _core():
    return hardware.chip(TARGET).core


def _peaks() -> tuple[float, float]:
    core = _core()
    return core.peak_flops("bf16"), core.dma.bytes_per_s


def _entry(result, flops: float, hbm_bytes: float, wall: float, **fields) -> dict:
    peak, bandwidth = _peaks()
    compute_us, dma_us = flops / peak * 1e6, hbm_bytes / bandwidth * 1e6
    roof = max(compute_us, dma_us)
    summary = result.profile.summary
    sim_us = result.total_ns / 1e3
    return {**fields, "sim_us": round(sim_us, 2), "roofline_us": round(roof, 2),
            "ratio": round(sim_us / roof, 3), "compute_us": round(compute_us, 2),
            "dma_us": round(dma_us, 2), "bound": "compute" if compute_us >= dma_us else "dma",
            "tensor_flops_utilisation": round(summary.tensor_flops_utilisation, 3),
            "engine_utilisation": {k: round(v, 3) for k, v in summary.engine_utilisation.items()},
            "dma_bytes": summary.dma_bytes, "instructions": summary.instructions,
            "wall_s": round(wall, 2)}


def bench_matmul(name: str, tokens: int, act: str) -> dict:
    k, n = MATMULS[name]
    kwargs = {"bias": ArraySpec((n,), "float32")}
    if name == "ffn1":
        kwargs["epilogue"] = lambda acc, extras: nl.gelu(acc)
    start = time.perf_counter()
    result = run(matmul, [ArraySpec((tokens, k), act), ArraySpec((k, n), "bfloat16")],
                 (tokens, n), act, target=TARGET, compute_dtype="bfloat16", **kwargs)
    item = 4 if act == "float32" else 2
    hbm = tokens * k * item + k * n * 2 + tokens * n * item + n * 4
    return _entry(result, 2.0 * tokens * k * n, hbm, time.perf_counter() - start,
                  kernel=f"matmul_{name}", tokens=tokens, k=k, n=n, activations=act,
                  weights="bfloat16")


def _fused_attention(out, qkv, mask, *, heads: int, head_dim: int):
    """q/k/v as per-head views of a [b, s, 3 * heads * head_dim] QKV projection output."""
    b, s, _ = qkv.shape
    width = heads * head_dim

    def part(i):
        return hbm_view(qkv, (b, heads, s, head_dim), (s * 3 * width, head_dim, 3 * width, 1),
                        offset=i * width)

    attention(hbm_view(out, (b, heads, s, head_dim), (s * width, head_dim, width, 1)),
              part(0), part(1), part(2), scale=head_dim ** -0.5, mask=mask, mask_kind="bias")


def bench_attention(batch: int, seq: int) -> dict:
    start = time.perf_counter()
    width = HEADS * HEAD_DIM
    result = run(_fused_attention, [ArraySpec((batch, seq, 3 * width), "bfloat16"),
                                    ArraySpec((batch, 1, 1, seq), "float32")],
                 (batch, seq, width), "bfloat16", target=TARGET, heads=HEADS,
                 head_dim=HEAD_DIM)
    flops = 4.0 * batch * HEADS * seq * seq * HEAD_DIM
    hbm = 2 * (3 * batch * seq * width + batch * seq * width) + 4 * batch * seq
    entry = _entry(result, flops, hbm, time.perf_counter() - start, kernel="attention",
                   batch=batch, heads=HEADS, seq=seq, head_dim=HEAD_DIM, dtype="bfloat16",
                   layout="views of a fused QKV output", mask="bias [b, 1, 1, s]")
    streams = result.profile.summary.engine_active_ns
    # VectorE and ScalarE share PSUM's read port on NeuronCore-v2: their busy time together is
    # the softmax's floor, usually the real bound for d = 64
    entry["vector_plus_scalar_us"] = round((streams.get("vector", 0) + streams.get("scalar", 0))
                                           / 1e3, 2)
    return entry


def bench_layernorm(tokens: int, dtype: str) -> dict:
    start = time.perf_counter()
    vec = ArraySpec((HIDDEN,), "float32")
    result = run(norm, [ArraySpec((tokens, HIDDEN), dtype)], (tokens, HIDDEN), dtype,
                 target=TARGET, kind="layer", eps=1e-12,
                 residual=ArraySpec((tokens, HIDDEN), dtype), weight=vec, bias=vec)
    item = 4 if dtype == "float32" else 2
    hbm = 3 * tokens * HIDDEN * item + 2 * HIDDEN * 4
    return _entry(result, 0.0, hbm, time.perf_counter() - start, kernel="layernorm",
                  tokens=tokens, hidden=HIDDEN, dtype=dtype, residual=True)


def main() -> None:
    quick = "--quick" in sys.argv
    token_counts = (128, 1280) if quick else (128, 1280, 2560)
    peak, bandwidth = _peaks()
    report: dict = {"target": TARGET, "core": _core().name,
                    "tensor_peak_bf16_tflops": round(peak / 1e12, 2),
                    "dma_gb_per_s": round(bandwidth / 1e9, 1),
                    "matmul": [], "attention": [], "layernorm": []}
    for tokens in token_counts:
        for act in ("float32", "bfloat16"):
            for name in MATMULS:
                report["matmul"].append(bench_matmul(name, tokens, act))
    for batch in (1, 10):
        for seq in (128, 256):
            report["attention"].append(bench_attention(batch, seq))
    for tokens in token_counts:
        for dtype in ("float32", "bfloat16"):
            report["layernorm"].append(bench_layernorm(tokens, dtype))
    ratios = [m["ratio"] for m in report["matmul"]]
    report["matmul_ratio"] = {"min": min(ratios), "max": max(ratios),
                              "mean": round(sum(ratios) / len(ratios), 3)}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
