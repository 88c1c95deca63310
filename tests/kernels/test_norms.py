"""k.norm against trnsim.compiler.interpret.layer_norm (statistics in fp32)."""

import numpy as np
import pytest

from tests.kernels.conftest import as_dtype, assert_close
from tests.kernels.harness import ArraySpec, run
from trnsim.compiler import interpret as ref
from trnsim.kernels import norm
from trnsim.kernels.layout import hbm_view

CASES = [  # shape, normalized, kind, residual, weight, bias, dtype
    ((300, 700), 1, "layer", True, True, True, "float32"),
    ((2, 100, 1100), 1, "rms", False, True, False, "float32"),
    ((3, 5, 7), 2, "layer", False, False, True, "bfloat16"),
    ((130, 64), 1, "rms", True, False, False, "float32"),
    ((4, 3, 9000), 1, "layer", True, True, True, "float32"),  # two passes over wide rows
    ((64, 96), 1, "layer", False, True, False, "bfloat16"),
    # one row: folded over the partitions (a batch-1 decode step's RMS norm)
    ((1, 4096), 1, "rms", True, True, False, "float32"),
    ((1, 1, 4096), 1, "rms", False, True, False, "bfloat16"),
    ((1, 256), 1, "rms", True, False, False, "float32"),
    # one row of a layer norm (a batch-1 decode step of GPT-2): mean and variance folded
    ((1, 768), 1, "layer", True, True, True, "float32"),
    ((1, 1, 768), 1, "layer", False, True, True, "bfloat16"),
    ((1, 256), 1, "layer", False, False, False, "float32"),
    ((1, 512), 1, "layer", True, True, False, "bfloat16"),
    ((1, 384), 1, "layer", False, False, True, "float32"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-n{c[1]}-{c[2]}-r{int(c[3])}"
                         f"w{int(c[4])}b{int(c[5])}-{c[6]}")
def test_norm_matches_reference(rng, case):
    shape, normalized, kind, residual, weight, bias, dtype = case
    x = as_dtype(rng.standard_normal(shape) * 2 + 1, dtype)
    params = shape[len(shape) - normalized:]
    kwargs = {}
    r = as_dtype(rng.standard_normal(shape), dtype) if residual else None
    w = rng.standard_normal(params).astype(np.float32) if weight else None
    b = rng.standard_normal(params).astype(np.float32) if bias else None
    for name, value in (("residual", r), ("weight", w), ("bias", b)):
        if value is not None:
            kwargs[name] = value
    result = run(norm, [x], shape, dtype, kind=kind, normalized=normalized, eps=1e-5, **kwargs)
    total = x.astype(np.float32) + (r.astype(np.float32) if residual else 0)
    want = ref.layer_norm(total, normalized, 1e-5, w, b, rms=kind == "rms")
    assert_close(result.output, want, dtype)


def test_norm_of_a_permuted_residual_view(rng):
    """The residual arrives as [b, s, d] read through a [s, b, d] buffer: rows loop per b."""
    x = rng.standard_normal((2, 8, 32)).astype(np.float32)
    r = rng.standard_normal((8, 2, 32)).astype(np.float32)

    def kernel(out, x, r):
        norm(out, x, residual=hbm_view(r, (2, 8, 32), (32, 64, 1)), eps=1e-5)

    result = run(kernel, [x, r], x.shape, "float32")
    want = ref.layer_norm(x + r.transpose(1, 0, 2), 1, 1e-5, None, None)
    assert_close(result.output, want, "float32")


def test_layernorm_of_1280_tokens_is_dma_bound_not_serial():
    """bf16 rows of 1024: each 128-row tile's load, statistics and store overlap the next."""
    result = run(norm, [ArraySpec((1280, 1024), "bfloat16")], (1280, 1024), "bfloat16",
                 target="inf2", weight=ArraySpec((1024,), "float32"),
                 bias=ArraySpec((1024,), "float32"))
    bytes_moved = 2 * 2 * 1280 * 1024
    dma_ns = bytes_moved / (16 * 17e9) * 1e9
    assert result.total_ns < 4 * dma_ns, (result.total_ns, dma_ns)


def test_one_rms_row_spreads_over_the_partitions():
    """A single row of 4096 is folded over 64 partitions (64 columns each, partial sums added
    on TensorE): several times faster than two rows, which run on two partitions' lanes."""
    def timed(rows):
        return run(norm, [ArraySpec((rows, 4096), "bfloat16")], (rows, 4096), "bfloat16",
                   target="trn1", kind="rms", weight=ArraySpec((4096,), "float32")).total_ns

    one, two = timed(1), timed(2)
    assert one < 0.4 * two, (one, two)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("offset", [1.0, 300.0])
def test_one_layer_norm_row_matches_torch(rng, dtype, offset):
    """One row of 768 (GPT-2's decode step), folded over the partitions, against
    torch.nn.functional.layer_norm of the same (dtype-rounded) inputs in fp32. The offset of 300
    (a mean 300x the spread) would lose the variance to cancellation if it were E[x^2] - mean^2
    in fp32; the kernel centres it first."""
    import torch

    x = as_dtype(rng.standard_normal((1, 1, 768)) * 2 + offset, dtype)
    r = as_dtype(rng.standard_normal((1, 1, 768)), dtype)
    w = rng.standard_normal(768).astype(np.float32)
    b = rng.standard_normal(768).astype(np.float32)
    result = run(norm, [x], x.shape, dtype, kind="layer", eps=1e-5, residual=r, weight=w, bias=b)
    total = torch.from_numpy(x.astype(np.float32) + r.astype(np.float32))
    want = torch.nn.functional.layer_norm(total, (768,), torch.from_numpy(w),
                                          torch.from_numpy(b), eps=1e-5)
    assert_close(result.output, want.numpy(), dtype)


def test_one_layer_norm_row_spreads_over_the_partitions():
    """A single layer-norm row of 768 with weight and bias is folded over the partitions (mean
    and variance summed on TensorE): faster than two rows, which take the unfolded path with
    each row on one partition's lane (the path one row took before)."""
    def timed(rows):
        return run(norm, [ArraySpec((rows, 768), "bfloat16")], (rows, 768), "bfloat16",
                   target="inf2", kind="layer", weight=ArraySpec((768,), "float32"),
                   bias=ArraySpec((768,), "float32")).total_ns

    one, two = timed(1), timed(2)
    assert one < 0.7 * two, (one, two)


def test_a_row_is_folded_until_each_share_is_one_minimum_width_pass():
    """GPT-2's 768 over 16 partitions (48 each), Llama's 4096 over 64 (64 each), a wide row over
    all 128: an engine pass costs max(MIN_II, N), so folding further saves nothing."""
    from trnsim.kernels.norms import FOLD_SHARE, _fold_parts

    assert FOLD_SHARE == 64
    assert [_fold_parts(c) for c in (128, 768, 4096, 16384)] == [2, 16, 64, 128]
