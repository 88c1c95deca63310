"""k.reduce, k.softmax and k.cumsum against trnsim.compiler.interpret."""

import numpy as np
import pytest

from tests.kernels.conftest import assert_close
from tests.kernels.harness import run
from trnsim.compiler import interpret as ref
from trnsim.compiler.fused import Step
from trnsim.compiler.lowering.steps import to_callable
from trnsim.kernels import cumsum, reduce, softmax, topk
from trnsim.numerics import dtype

OPS = ["sum", "mean", "amax", "amin", "prod", "any", "all", "argmax", "argmin", "var"]
# (1,): 200 reduced rows strided in HBM, read by the transposing path over two column blocks;
# (0, 2): reduced axes that do not fold into one column axis
AXES = [((2,), False), ((0,), True), ((1,), False), ((1, 2), False), ((0, 2), True), ((), False)]
CASES = [(op, axes, keep) for op in OPS for axes, keep in AXES
         if not (op.startswith("arg") and len(axes) == 2) and not (op == "var" and not axes)]


@pytest.mark.parametrize("op,axes,keepdim", CASES, ids=lambda v: str(v))
def test_reduce_matches_reference(rng, op, axes, keepdim):
    x = rng.standard_normal((3, 200, 130)).astype(np.float32)
    if op == "prod":
        x = 1 + 0.01 * x
    if op in ("any", "all"):
        x = (x > (1.5 if op == "any" else -2.5)).astype(np.float32)
    out_dtype = "int32" if op.startswith("arg") else "float32"
    want = ref.reduce(op, x, axes, keepdim, dtype(out_dtype), 1)
    result = run(reduce, [x], want.shape, out_dtype, op=op, axes=axes, keepdim=keepdim,
                 correction=1)
    assert_close(result.output, want, "float32", rtol=1e-3)


@pytest.mark.parametrize("op", ["any", "sum", "amax"])
def test_reduce_over_size_one_axes_is_one_elementwise_pass(rng, op):
    """nll_loss's backward once reduced [N, V, 1] (a permuted view, the size-1 axis strided):
    each element is its own group, so the kernel makes one element-wise pass over the kept
    axes, not a [rows, 1] tile (and DMA) per 128 elements."""
    x = (rng.standard_normal((64, 1, 300)) > 0.5).astype(np.float32)
    view = np.transpose(x, (0, 2, 1))  # [64, 300, 1], the reduced axis strided by 300
    want = ref.reduce(op, view, (2,), False, dtype("float32"), 1)
    result = run(reduce, [x], want.shape, "float32", op=op, axes=(1,), keepdim=False)
    assert_close(result.output, want.reshape(64, 300), "float32")
    # 64 x 300 elements: a handful of DMAs (the direct path issued one per 128-element tile)
    dmas = [i for i in result.program.instructions if i.OPCODE.startswith("Dma")]
    assert len(dmas) <= 8, len(dmas)


def test_reduce_with_prologue_and_correction(rng):
    x = rng.standard_normal((64, 300)).astype(np.float32)
    prologue = to_callable((Step("mul", ("in0", "in0")),), has_acc=False)
    result = run(reduce, [x], (64,), "float32", op="sum", axes=(1,), prologue=prologue)
    assert_close(result.output, (x * x).sum(axis=1), "float32")
    result = run(reduce, [x], (64, 1), "float32", op="var", axes=(1,), keepdim=True,
                 correction=0)
    assert_close(result.output, x.var(axis=1, keepdims=True), "float32")


@pytest.mark.parametrize("shape,axis,log,masked", [((300, 70), 1, False, False),
                                                  ((4, 5, 9000), 2, True, True),
                                                  ((64, 10, 3), 1, False, False),
                                                  ((3, 20000), 1, True, False),  # streamed
                                                  ((2, 3, 20000), 2, False, True)])
def test_softmax_matches_reference(rng, shape, axis, log, masked):
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    kwargs, bias = {}, 0
    if masked:
        bias = rng.standard_normal((1, 1, shape[-1])).astype(np.float32)
        kwargs["mask"] = bias
    result = run(softmax, [x], shape, "float32", axis=axis, scale=0.7, log=log, **kwargs)
    assert_close(result.output, ref.softmax(x * np.float32(0.7) + bias, axis, log), "float32")


@pytest.mark.parametrize("log,masked", [(False, False), (True, False), (False, True)])
def test_softmax_of_many_short_rows_moves_several_rows_per_dma(rng, log, masked):
    """Attention's scores [b*h*s, s]: each partition takes consecutive rows, so 20 x 128 rows
    of 128 are a few large DMAs (they were a load and a store per 128 rows: 40); the 40-row tail
    goes the usual way."""
    rows, cols = 20 * 128 + 40, 128
    x = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
    kwargs, bias = {}, 0
    if masked:
        bias = rng.standard_normal((rows, cols)).astype(np.float32)
        kwargs["mask"] = bias
    result = run(softmax, [x], x.shape, "float32", axis=1, scale=0.7, log=log, **kwargs)
    assert_close(result.output, ref.softmax(x * np.float32(0.7) + bias, 1, log), "float32")
    dmas = [i for i in result.program.instructions if i.OPCODE.startswith("Dma")]
    assert len(dmas) <= (6 if masked else 4) + 3, len(dmas)


@pytest.mark.parametrize("rows", [4 * 128, 100])  # banded rows, and the 128-row tile path
def test_safe_softmax_gives_zeros_for_rows_that_are_all_minus_infinity(rng, rows):
    """PyTorch's `_safe_softmax` (scaled_dot_product_attention's math path): a row that is all
    -inf is zeros, not NaN; other rows, with some -inf, are plain softmax."""
    x = rng.standard_normal((rows, 96)).astype(np.float32)
    x[3, :] = -np.inf
    x[5, ::2] = -np.inf
    result = run(softmax, [x], x.shape, "float32", axis=1, safe=True)
    want = ref.softmax(x, 1, safe=True)
    assert not np.isnan(want).any() and (want[3] == 0).all()
    assert_close(result.output, want, "float32")
    plain = run(softmax, [x], x.shape, "float32", axis=1)
    assert np.isnan(plain.output[3]).all()  # softmax itself keeps PyTorch's NaN


@pytest.mark.parametrize("shape,axis", [((130, 5000), 1), ((20, 30, 4), 1)])
def test_cumsum(rng, shape, axis):
    x = rng.standard_normal(shape).astype(np.float32)
    result = run(cumsum, [x], shape, "float32", axis=axis)
    assert_close(result.output, np.cumsum(x, axis=axis), "float32")


@pytest.mark.parametrize("shape,axis,k,largest", [((300, 1000), 1, 20, True),
                                                  ((4, 6, 5), 1, 3, False),  # fewer than 8
                                                  ((2, 64, 9), -1, 9, True)])
def test_topk_matches_reference(rng, shape, axis, k, largest):
    x = rng.standard_normal(shape).astype(np.float32)
    x.flat[::7] = x.flat[1]  # ties: the lower index first
    out_shape = tuple(k if i == axis % x.ndim else s for i, s in enumerate(shape))
    want_values, want_index = ref.topk(x, k, axis % x.ndim, largest)
    values = run(topk, [x], out_shape, "float32", k=k, axis=axis, largest=largest)
    index = run(topk, [x], out_shape, "int32", k=k, axis=axis, largest=largest, part="indices")
    assert np.array_equal(values.output, want_values)
    assert np.array_equal(index.output, want_index)
    assert np.array_equal(np.take_along_axis(x, index.output.astype(np.int64), axis), values.output)


@pytest.mark.parametrize("op", ["sum", "mean", "amax", "any"])
def test_whole_tensor_reduce_spreads_over_partitions(rng, op):
    """A reduction of everything to one value uses all 128 partitions, then the partials: the
    answer is unchanged and VectorE's time is a fraction of one partition's sweep."""
    x = rng.standard_normal((4, 128, 256)).astype(np.float32)
    if op == "any":
        x = (x > 3.5).astype(np.float32)
    want = ref.reduce(op, x, (0, 1, 2), False, dtype("float32"), 1)
    result = run(reduce, [x], (), "float32", op=op, axes=(0, 1, 2), keepdim=False)
    assert_close(result.output, want, "float32", rtol=1e-4)
    one_row = run(reduce, [x.reshape(1, -1)[:, :511]], (), "float32", op=op, axes=(1,))
    assert result.profile.total_ns < 4 * one_row.profile.total_ns


@pytest.mark.parametrize("op,keepdim", [("any", False), ("sum", True), ("amax", False)])
def test_reduce_over_a_size_one_axis_is_one_elementwise_pass(rng, op, keepdim):
    """`any` over the size-1 axis of a [N, V, 1] one-hot mask (nll_loss's scatter backward)
    reduces nothing: the result is the input's values, in a pass over [N, V] blocks rather than
    one [128, 1] tile per 128 of the N x V rows."""
    x = (rng.standard_normal((256, 512, 1)) > 0.5).astype(np.float32)
    want = ref.reduce(op, x, (2,), keepdim, dtype("float32"), 1)
    result = run(reduce, [x], want.shape, "float32", op=op, axes=(2,), keepdim=keepdim)
    assert np.array_equal(result.output, want)
    assert len(result.program.instructions) < 100


def test_a_bias_gradient_sum_is_a_ones_matmul_on_tensor_engine(rng):
    """A sum over the leading (token) axis of [tokens, width] accumulates ones^T @ block in
    PSUM, 128 tokens x 512 columns per matmul, instead of transposing 128 x 128 blocks."""
    x = rng.standard_normal((600, 700)).astype(np.float32)
    result = run(reduce, [x], (1, 700), "float32", op="sum", axes=(0,), keepdim=True)
    assert_close(result.output, x.sum(axis=0, keepdims=True), "float32", rtol=1e-4)
    opcodes = [i.OPCODE for i in result.program.instructions]
    assert "Transpose" not in opcodes
    # 4 full token tiles + a tail of 88, for each of two column blocks (512 + 188)
    assert opcodes.count("MultiplyMoving") == 10
    mean = run(reduce, [x], (700,), "float32", op="mean", axes=(0,))
    assert_close(mean.output, x.mean(axis=0), "float32", rtol=1e-4)


@pytest.mark.parametrize("op", ["sum", "amax", "mean"])
def test_many_short_rows_reduce_with_one_dma_each_way(rng, op):
    """Attention's scores [b*h, s, s] reduced per row (the softmax backward's sum): each
    partition takes consecutive rows, so 4096 rows of 128 are one load and one store (they
    were a load and a store per 128 rows: 64 DMAs); a tail of rows goes the usual way."""
    x = rng.standard_normal((32 * 128 + 40, 128)).astype(np.float32)
    want = ref.reduce(op, x, (1,), True, dtype("float32"), 1)
    result = run(reduce, [x], want.shape, "float32", op=op, axes=(1,), keepdim=True)
    assert_close(result.output, want, "float32", rtol=1e-5)
    dmas = [i for i in result.program.instructions if i.OPCODE.startswith("Dma")]
    assert len(dmas) <= 4, len(dmas)  # the banded block's two, the 40-row tail's two
