"""nl reductions and compound operations: sum/max/min/mean/prod/all/var, softmax, rms_norm,
matmul, transpose, dropout, rand. Each lowers to the instruction sequence the compiler emits."""

from __future__ import annotations

import dataclasses

from trnsim.errors import InvalidArgumentError
from trnsim.isa import (
    Activation,
    Dropout,
    LoadStationary,
    MultiplyMoving,
    Random,
    Reciprocal,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
    TensorTranspose,
    VectorTranspose,
    alu_op,
)
from trnsim.nki.operands import is_scalar, mask_of, resolve_dtype, tile_arg
from trnsim.nki.tile import Tile
from trnsim.nki.trace import api, current_trace
from trnsim.numerics import dtype as as_dtype


def _free_axes(tile: Tile, axis) -> tuple[int, ...]:
    rank = tile.ndim
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(sorted(a % rank for a in axes))
    if 0 in axes:
        raise InvalidArgumentError("reductions over the partition axis (0) are not supported by this "
                                   "call; use nisa.tensor_partition_reduce or a matmul with ones")
    if axes and axes != tuple(range(axes[0], rank)):
        raise InvalidArgumentError(f"reduction axes {axes} must be the trailing free axes of a rank-"
                                   f"{rank} tile")
    return axes


def _reduced_shape(tile: Tile, axes, keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else s for i, s in enumerate(tile.shape))
    shape = tuple(s for i, s in enumerate(tile.shape) if i not in axes)
    return shape if len(shape) > 1 else (shape[0], 1)


def reduce(op: str, x, axis, *, dtype=None, mask=None, keepdims=False, negate=False, scale=None):
    trace = current_trace()
    data = tile_arg(x, f"nl reduce ({op}) operand")
    axes = _free_axes(data, axis)
    predicate = mask_of(mask)
    tags = data.tags
    name = alu_op(op).name

    def emit(dst: Tile, accumulate: bool = False) -> None:
        d = dst.access(predicate, tags[:1])
        src, ap_axes = reduction_source(data, axes, data.access(predicate, tags))
        trace.emit_now(TensorReduce, dst=d, src=src, op=name, axes=ap_axes, negate=negate)
        if scale is not None:
            trace.emit_now(TensorScalar, dst=d, src=d, op0="multiply", operand0=scale)

    shape = _reduced_shape(data, axes, keepdims)
    return trace.defer(shape, resolve_dtype(dtype) or data.dtype_spec, emit, tags=tags[:1])


def reduction_source(data: Tile, axes, ap) -> tuple:
    """(access pattern, its reduction axes) for reducing the tile's trailing axes `axes`.

    Access patterns merge dense dims, so the boundary between kept and reduced elements may sit
    inside one merged (stride, size) pair: split that pair there (same bytes, one more dim)."""
    kept = 1
    for i, size in enumerate(data.shape):
        if 0 < i < axes[0]:
            kept *= size
    dims = list(ap.dims)
    product = 1
    for k, (stride, size) in enumerate(dims):
        if product == kept:
            return ap, tuple(range(k + 1, len(dims) + 1))
        if kept % product == 0 and size % (kept // product) == 0 and kept // product < size:
            outer = kept // product
            inner = size // outer
            dims[k:k + 1] = [(stride * inner, outer), (stride, inner)]
            split = dataclasses.replace(ap, dims=tuple(dims))
            return split, tuple(range(k + 2, len(dims) + 1))
        product *= size
    return ap, (len(dims),)


@api("nl.sum")
def sum(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    return reduce("add", x, axis, dtype=dtype, mask=mask, keepdims=keepdims)


@api("nl.max")
def max(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    return reduce("max", x, axis, dtype=dtype, mask=mask, keepdims=keepdims)


@api("nl.min")
def min(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    return reduce("min", x, axis, dtype=dtype, mask=mask, keepdims=keepdims)


@api("nl.prod")
def prod(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    return reduce("multiply", x, axis, dtype=dtype, mask=mask, keepdims=keepdims)


@api("nl.all")
def all(x, axis, *, dtype=None, mask=None, **kwargs):
    return reduce("min", x, axis, dtype=dtype or "bool_", mask=mask)


@api("nl.mean")
def mean(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    data = tile_arg(x, "nl.mean operand")
    axes = _free_axes(data, axis)
    count = 1
    for a in axes:
        count *= data.shape[a]
    return reduce("add", data, axis, dtype=dtype, mask=mask, keepdims=keepdims, scale=1.0 / count)


@api("nl.var")
def var(x, axis, *, dtype=None, mask=None, **kwargs):
    """E[(x - mean)^2]: mean by reduce, centre with tensor_scalar, square + sum on ScalarE."""
    trace = current_trace()
    data = tile_arg(x, "nl.var operand")
    axes = _free_axes(data, axis)
    count = 1
    for a in axes:
        count *= data.shape[a]
    predicate = mask_of(mask)

    def emit(dst: Tile, accumulate: bool = False) -> None:
        src = data.access(predicate)
        col = trace.allocate((data.shape[0], 1), "float32", "sbuf", name="var_mean")
        centred = trace.allocate(data.shape, "float32", "sbuf", name="var_centred")
        split, ap_axes = reduction_source(data, axes, src)
        trace.emit_now(TensorReduce, dst=col.access(), src=split, op="add", axes=ap_axes)
        trace.emit_now(TensorScalar, dst=col.access(), src=col.access(), op0="multiply",
                       operand0=1.0 / count)
        trace.emit_now(TensorScalar, dst=centred.access(predicate), src=src, op0="subtract",
                       operand0=col.access())
        trace.emit_now(Activation, dst=centred.access(predicate), src=centred.access(predicate),
                       func="square", reduce_op="add", reduce_cmd="reset_reduce",
                       reduce_dst=dst.access())
        trace.emit_now(TensorScalar, dst=dst.access(), src=dst.access(), op0="multiply",
                       operand0=1.0 / count)

    return trace.defer((data.shape[0], 1), resolve_dtype(dtype) or data.dtype_spec, emit)


@api("nl.softmax")
def softmax(x, axis=-1, *, dtype=None, compute_dtype=None, mask=None, **kwargs):
    """max-subtracted exp, sum via the activation's reduction, reciprocal, scale."""
    trace = current_trace()
    data = tile_arg(x, "nl.softmax operand")
    axes = _free_axes(data, axis)
    if axes != tuple(range(1, data.ndim)):
        raise InvalidArgumentError("nl.softmax here normalises over all free axes of a tile")
    predicate = mask_of(mask)
    tags = data.tags

    def emit(dst: Tile, accumulate: bool = False) -> None:
        p = data.shape[0]
        src = data.access(predicate, tags)
        negmax = trace.allocate((p, 1), "float32", "sbuf", name="sm_negmax")
        total = trace.allocate((p, 1), "float32", "sbuf", name="sm_sum")
        expo = trace.allocate(data.shape, "float32", "sbuf", name="sm_exp")
        split, ap_axes = reduction_source(data, axes, src)
        trace.emit_now(TensorReduce, dst=negmax.access(), src=split, op="max", axes=ap_axes,
                       negate=True)
        trace.emit_now(Activation, dst=expo.access(predicate, tags), src=src, func="exp",
                       bias=negmax.access(), reduce_op="add", reduce_cmd="reset_reduce",
                       reduce_dst=total.access())
        trace.emit_now(Reciprocal, dst=total.access(), src=total.access())
        trace.emit_now(TensorScalar, dst=dst.access(predicate, tags), src=expo.access(predicate, tags),
                       op0="multiply", operand0=total.access())

    return trace.defer(data.shape, resolve_dtype(dtype) or data.dtype_spec, emit, tags=tags)


@api("nl.rms_norm")
def rms_norm(x, w, axis, n, epsilon=1e-6, *, dtype=None, compute_dtype=None, mask=None, **kwargs):
    """x * rsqrt(sum(x^2)/n + eps) * w."""
    trace = current_trace()
    data = tile_arg(x, "nl.rms_norm operand")
    weight = tile_arg(w, "nl.rms_norm weight")
    _free_axes(data, axis)
    predicate = mask_of(mask)

    def emit(dst: Tile, accumulate: bool = False) -> None:
        p = data.shape[0]
        src = data.access(predicate)
        squares = trace.allocate(data.shape, "float32", "sbuf", name="rms_sq")
        ss = trace.allocate((p, 1), "float32", "sbuf", name="rms_ss")
        trace.emit_now(Activation, dst=squares.access(predicate), src=src, func="square",
                       reduce_op="add", reduce_cmd="reset_reduce", reduce_dst=ss.access())
        trace.emit_now(TensorScalar, dst=ss.access(), src=ss.access(), op0="multiply",
                       operand0=1.0 / float(n), op1="add", operand1=float(epsilon))
        trace.emit_now(Activation, dst=ss.access(), src=ss.access(), func="rsqrt")
        trace.emit_now(TensorScalar, dst=dst.access(predicate), src=src, op0="multiply",
                       operand0=ss.access())
        w_ap = weight.access(predicate)
        if weight.shape == data.shape:
            trace.emit_now(TensorTensor, dst=dst.access(predicate), in0=dst.access(predicate),
                           in1=w_ap, op="multiply")
        else:
            trace.emit_now(TensorScalar, dst=dst.access(predicate), src=dst.access(predicate),
                           op0="multiply", operand0=w_ap)

    return trace.defer(data.shape, resolve_dtype(dtype) or data.dtype_spec, emit)


def matmul_pending(stationary: Tile, moving: Tile, predicate=None, perf_mode=None,
                   moving_onezero=False, stationary_onezero=False) -> Tile:
    """stationary.T @ moving into PSUM (fp32): LoadStationary + MultiplyMoving."""
    trace = current_trace()
    if stationary.shape[0] != moving.shape[0]:
        raise InvalidArgumentError(
            f"matmul contraction (partition) sizes differ: stationary {list(stationary.shape)}, "
            f"moving {list(moving.shape)}")
    m = stationary.shape[-1]
    n = moving.size // moving.shape[0] if perf_mode is None else moving.shape[-1]

    def emit(dst: Tile, accumulate: bool = False) -> None:
        masked = predicate is not None  # the tags matter only to a mask
        st = stationary.access(predicate, stationary.tags if masked else None)
        trace.emit_now(LoadStationary, src=st, perf_mode=perf_mode)
        trace.emit_now(MultiplyMoving, dst=dst.access(predicate), moving=moving.access(
                           predicate, moving.tags if masked else None),
                       stationary=st, accumulate=accumulate, perf_mode=perf_mode,
                       moving_onezero=moving_onezero, stationary_onezero=stationary_onezero)

    return trace.defer((m, n), "float32", emit, buffer="psum", matmul=True)


@api("nl.matmul")
def matmul(x, y, *, transpose_x=False, mask=None, **kwargs):
    """x @ y (x given as [K, M] with transpose_x=True); otherwise x is transposed on TensorE first."""
    trace = current_trace()
    a, b = tile_arg(x, "nl.matmul x"), tile_arg(y, "nl.matmul y")
    predicate = mask_of(mask)
    if not transpose_x:
        staged_psum = trace.allocate((a.shape[1], a.shape[0]), a.dtype_spec, "psum", name="mm_xT_ps")
        trace.emit(TensorTranspose, dst=staged_psum.access(), src=a.access())
        a = trace.allocate((a.shape[1], a.shape[0]), a.dtype_spec, "sbuf", name="mm_xT")
        trace.emit(TensorCopy, dst=a.access(), src=staged_psum.access())
    return matmul_pending(a, b, predicate)


@api("nl.transpose")
def transpose(x, *, dtype=None, mask=None, **kwargs):
    """PF-transpose: VectorE for up to 32x32, else TensorE into PSUM."""
    trace = current_trace()
    data = tile_arg(x, "nl.transpose operand")
    if data.ndim != 2:
        raise InvalidArgumentError(f"nl.transpose needs a 2-D tile; got {list(data.shape)}")
    p, f = data.shape
    small = p <= 32 and f <= 32
    out_dtype = resolve_dtype(dtype) or data.dtype_spec

    def emit(dst: Tile, accumulate: bool = False) -> None:
        cls = VectorTranspose if small else TensorTranspose
        trace.emit_now(cls, dst=dst.access(), src=data.access(), engine="vector" if small else "tensor")

    return trace.defer((f, p), out_dtype, emit, buffer="sbuf" if small else "psum")


@api("nl.dropout")
def dropout(x, rate, *, dtype=None, mask=None, **kwargs):
    trace = current_trace()
    data = tile_arg(x, "nl.dropout operand")
    predicate = mask_of(mask)
    prob = tile_arg(rate, "rate") if isinstance(rate, Tile) else float(rate)

    def emit(dst: Tile, accumulate: bool = False) -> None:
        p = prob.access(predicate) if isinstance(prob, Tile) else prob
        trace.emit_now(Dropout, dst=dst.access(predicate), src=data.access(predicate), prob=p)

    return trace.defer(data.shape, resolve_dtype(dtype) or data.dtype_spec, emit)


@api("nl.rand")
def rand(shape, dtype="float32", **kwargs):
    from trnsim.nki.language.buffers import split_shape

    trace = current_trace()
    plain, _par_axis = split_shape(shape)

    def emit(dst: Tile, accumulate: bool = False) -> None:
        trace.emit_now(Random, dst=dst.access())

    return trace.defer(plain, as_dtype(resolve_dtype(dtype) or "float32"), emit)


@api("nl.loop_reduce")
def loop_reduce(x, op, loop_indices, *, dtype=None, mask=None, **kwargs):
    """dst = op(x, dst) where the result is assigned: the destination is also op's right-hand
    input, so over the loop it reduces every iteration's x (nl docs: a tensor_tensor of the
    destination with x)."""
    trace = current_trace()
    data = tile_arg(x, "nl.loop_reduce x")
    predicate = mask_of(mask)
    name = alu_op(op).name
    tags = data.tags

    def emit(dst: Tile, accumulate: bool = False) -> None:
        trace.emit_now(TensorTensor, dst=dst.access(predicate, tags),
                       in0=data.access(predicate, tags), in1=dst.access(predicate, tags), op=name)

    return trace.defer(data.shape, resolve_dtype(dtype) or data.dtype_spec, emit, tags=tags)


def scalar_or_tile(value):
    return value if is_scalar(value) else tile_arg(value, "operand")
