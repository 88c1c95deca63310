"""nisa for the legacy `neuronxcc.nki` API: each call returns its result tile (pending until placed).

Every function maps 1:1 onto a `trnsim.isa` instruction through `lowering` (shared with the current
API); `mask=` shrinks all operands. What this module adds is the legacy calling convention: the
result is a pending tile whose shape and dtype the call infers, placed where it is assigned.
"""

from __future__ import annotations

import functools

import numpy as np

from trnsim.errors import InvalidArgumentError, UnsupportedError
from trnsim.isa import activation_function, alu_op
from trnsim.nki.api_boundary import current_only_keyword
from trnsim.nki.indexing import IndexExpr, Predicate
from trnsim.nki.isa import lowering
from trnsim.nki.isa.enums import nc_version, reduce_cmd_name, to_isa_engine
from trnsim.nki.language.buffers import split_shape
from trnsim.nki.language.compound import _free_axes, _reduced_shape, matmul_pending
from trnsim.nki.operands import mask_of, resolve_dtype, tile_arg, wider
from trnsim.nki.tile import Tile
from trnsim.nki.trace import api, current_trace
from trnsim.numerics import dtype as as_dtype


def _ready(value, what: str = "operand"):
    """Tiles are made ready to read now (their producers placed); scalars pass through."""
    return tile_arg(value, what) if isinstance(value, Tile) else value


def returns_result(fn):
    """A legacy nisa call returns its result: `dst=` is the current API's form (nki 0.3+)."""
    @functools.wraps(fn)
    def call(*args, **kwargs):
        if "dst" in kwargs:
            raise current_only_keyword(f"nisa.{fn.__name__}", "dst")
        return fn(*args, **kwargs)
    return call


@api("nisa.nc_matmul")
@returns_result
def nc_matmul(stationary, moving, *, is_stationary_onezero=False, is_moving_onezero=False,
              is_transpose=False, tile_position=(), tile_size=(), mask=None, perf_mode=None, **kwargs):
    st = tile_arg(stationary, "nc_matmul stationary")
    mv = tile_arg(moving, "nc_matmul moving")
    if is_transpose:
        return nc_transpose(st, engine="tensor", mask=mask)
    mode = getattr(perf_mode, "name", perf_mode)
    mode = None if mode in (None, "none", 0) else "double_row"
    return matmul_pending(st, mv, mask_of(mask), perf_mode=mode, moving_onezero=is_moving_onezero,
                          stationary_onezero=is_stationary_onezero)


def transpose_engine(engine, partitions: int, free: int) -> str:
    """The engine an nc_transpose runs on: the user's choice, else VectorE up to 32x32."""
    chosen = to_isa_engine(engine)
    if chosen is None:
        return "vector" if partitions <= 32 and free <= 32 else "tensor"
    return str(chosen)


@api("nisa.nc_transpose")
@returns_result
def nc_transpose(data, *, mask=None, dtype=None, engine=None, **kwargs):
    trace = current_trace()
    src = tile_arg(data, "nc_transpose data")
    p, f = src.shape[0], src.size // src.shape[0]
    chosen = transpose_engine(engine, p, f)
    predicate = mask_of(mask)

    def emit(dst: Tile, accumulate: bool = False) -> None:
        lowering.transpose(dst, src, chosen, predicate)

    buffer = "sbuf" if chosen == "vector" else "psum"
    return trace.defer((f, p), resolve_dtype(dtype) or src.dtype_spec, emit, buffer=buffer)


@api("nisa.activation")
@returns_result
def activation(op, data, *, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
               reduce_cmd=0, mask=None, dtype=None, **kwargs):
    trace = current_trace()
    src = tile_arg(data, "activation data")
    func, _ = activation_function(op)
    predicate = mask_of(mask)
    tags = src.tags
    cmd = reduce_cmd_name(reduce_cmd)
    if reduce_res is not None and reduce_op is None:
        reduce_op = "add"
    red_tile = tile_arg(reduce_res, "reduce_res") if reduce_res is not None else None
    scale, bias = _ready(scale, "scale"), _ready(bias, "bias")

    def emit(dst: Tile, accumulate: bool = False) -> None:
        lowering.activation(dst, src, func, scale=scale, bias=bias, reduce_op=reduce_op,
                            reduce_cmd=cmd, reduce_dst=red_tile, predicate=predicate, tags=tags)

    return trace.defer(src.shape, resolve_dtype(dtype) or src.dtype_spec, emit, tags=tags)


@api("nisa.activation_reduce")
@returns_result
def activation_reduce(op, data, *, reduce_op, reduce_res, bias=None, scale=1.0, mask=None, dtype=None,
                      **kwargs):
    return activation(op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res,
                      reduce_cmd="reset_reduce", mask=mask, dtype=dtype)


@api("nisa.tensor_reduce")
@returns_result
def tensor_reduce(op, data, axis, *, mask=None, dtype=None, negate=False, keepdims=False, **kwargs):
    trace = current_trace()
    src = tile_arg(data, "tensor_reduce data")
    axes = _free_axes(src, axis)
    predicate = mask_of(mask)

    def emit(dst: Tile, accumulate: bool = False) -> None:
        lowering.tensor_reduce(dst, src, op, axes, negate=negate, predicate=predicate)

    return trace.defer(_reduced_shape(src, axes, keepdims), resolve_dtype(dtype) or src.dtype_spec, emit)


@api("nisa.tensor_partition_reduce")
@returns_result
def tensor_partition_reduce(op, data, *, mask=None, dtype=None, **kwargs):
    trace = current_trace()
    src = tile_arg(data, "tensor_partition_reduce data")

    def emit(dst: Tile, accumulate: bool = False) -> None:
        lowering.tensor_partition_reduce(dst, src, op, mask_of(mask))

    return trace.defer((1, *src.shape[1:]), resolve_dtype(dtype) or src.dtype_spec, emit)


@api("nisa.tensor_tensor")
@returns_result
def tensor_tensor(data1, data2, op, *, dtype=None, mask=None, engine=None, **kwargs):
    trace = current_trace()
    a, b = tile_arg(data1, "tensor_tensor data1"), tile_arg(data2, "tensor_tensor data2")
    predicate = mask_of(mask)
    tags = a.tags

    def emit(dst: Tile, accumulate: bool = False) -> None:
        lowering.tensor_tensor(dst, a, b, op, engine=to_isa_engine(engine), predicate=predicate,
                               tags=tags)

    out = resolve_dtype(dtype) or wider(a.dtype_spec, b.dtype_spec)
    return trace.defer(a.shape, out, emit, tags=tags)


@api("nisa.tensor_tensor_scan")
@returns_result
def tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0=False, reverse1=False, *, dtype=None,
                       mask=None, **kwargs):
    trace = current_trace()
    a, b = tile_arg(data0, "tensor_tensor_scan data0"), tile_arg(data1, "tensor_tensor_scan data1")
    predicate = mask_of(mask)
    initial = _ready(initial, "initial")

    def emit(dst: Tile, accumulate: bool = False) -> None:
        lowering.tensor_tensor_scan(dst, a, b, initial, op0, op1, reverse0=reverse0,
                                    reverse1=reverse1, predicate=predicate)

    return trace.defer(a.shape, resolve_dtype(dtype) or wider(a.dtype_spec, b.dtype_spec), emit)


@api("nisa.scalar_tensor_tensor")
@returns_result
def scalar_tensor_tensor(*, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False,
                         dtype=None, mask=None, **kwargs):
    trace = current_trace()
    src, other = tile_arg(data, "data"), tile_arg(operand1, "operand1")
    predicate = mask_of(mask)
    operand0 = _ready(operand0, "operand0")

    def emit(dst: Tile, accumulate: bool = False) -> None:
        lowering.scalar_tensor_tensor(dst, src, op0, operand0, op1, other, reverse0=reverse0,
                                      reverse1=reverse1, predicate=predicate)

    return trace.defer(src.shape, resolve_dtype(dtype) or src.dtype_spec, emit)


@api("nisa.tensor_scalar")
@returns_result
def tensor_scalar(data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, *,
                  dtype=None, mask=None, engine=None, **kwargs):
    trace = current_trace()
    src = tile_arg(data, "tensor_scalar data")
    predicate = mask_of(mask)
    tags = src.tags
    operand0, operand1 = _ready(operand0, "operand0"), _ready(operand1, "operand1")

    def emit(dst: Tile, accumulate: bool = False) -> None:
        lowering.tensor_scalar(dst, src, op0, operand0, reverse0=reverse0, op1=op1,
                               operand1=operand1, reverse1=reverse1, engine=to_isa_engine(engine),
                               predicate=predicate, tags=tags)

    return trace.defer(src.shape, resolve_dtype(dtype) or src.dtype_spec, emit, tags=tags)


@api("nisa.tensor_scalar_reduce")
@returns_result
def tensor_scalar_reduce(*, data, op0, operand0, reduce_op, reduce_res, reverse0=False, dtype=None,
                         mask=None, **kwargs):
    trace = current_trace()
    src = tile_arg(data, "tensor_scalar_reduce data")
    res = tile_arg(reduce_res, "reduce_res")
    predicate = mask_of(mask)
    operand0 = _ready(operand0, "operand0")

    def emit(dst: Tile, accumulate: bool = False) -> None:
        lowering.tensor_scalar(dst, src, op0, operand0, reverse0=reverse0, reduce_op=reduce_op,
                               reduce_dst=res, predicate=predicate)

    return trace.defer(src.shape, resolve_dtype(dtype) or src.dtype_spec, emit)


@api("nisa.tensor_copy")
@returns_result
def tensor_copy(src, *, mask=None, dtype=None, engine=None, **kwargs):
    trace = current_trace()
    data = tile_arg(src, "tensor_copy src")
    predicate = mask_of(mask)
    tags = data.tags

    def emit(dst: Tile, accumulate: bool = False) -> None:
        lowering.tensor_copy(dst, data, engine=to_isa_engine(engine), predicate=predicate, tags=tags)

    return trace.defer(data.shape, resolve_dtype(dtype) or data.dtype_spec, emit, tags=tags)


@api("nisa.tensor_copy_predicated")
def tensor_copy_predicated(*, src, dst, predicate, reverse_pred=False, mask=None, dtype=None, **kwargs):
    trace = current_trace()
    pm = mask_of(mask)
    target = tile_arg(dst, "tensor_copy_predicated dst")
    source, pred = _ready(src, "src"), tile_arg(predicate, "predicate")
    trace.flush()
    lowering.tensor_copy_predicated(target, source, pred, reverse=reverse_pred, predicate=pm)


@api("nisa.reciprocal")
@returns_result
def reciprocal(data, *, dtype=None, mask=None, **kwargs):
    trace = current_trace()
    src = tile_arg(data, "reciprocal data")
    predicate = mask_of(mask)

    def emit(dst: Tile, accumulate: bool = False) -> None:
        lowering.reciprocal(dst, src, predicate)

    return trace.defer(src.shape, resolve_dtype(dtype) or src.dtype_spec, emit)


def affine_parts(expr: IndexExpr) -> tuple[tuple[int, ...], int, int, tuple[int, ...]]:
    """(shape, base, partition step, free steps) of an affine index expression."""
    shape = expr.shape or (1,)
    steps = [0] * len(shape)
    for axis, coef in expr.terms.items():
        steps[axis.position] += coef
    if len(shape) == 1:
        return (shape[0], 1), expr.const, steps[0], (0,)
    return shape, expr.const, steps[0], tuple(steps[1:])


@api("nisa.iota")
@returns_result
def iota(expr, dtype, *, mask=None, **kwargs):
    trace = current_trace()
    if isinstance(expr, int):
        expr = IndexExpr({}, expr)
    if not isinstance(expr, IndexExpr):
        raise InvalidArgumentError("nisa.iota takes an affine expression of nl.arange / nl.mgrid indices")
    shape, base, pstep, steps = affine_parts(expr)

    def emit(dst: Tile, accumulate: bool = False) -> None:
        lowering.iota(dst, base=base, partition_step=pstep, steps=steps, free_shape=shape[1:])

    return trace.defer(shape, resolve_dtype(dtype), emit)


@api("nisa.dropout")
@returns_result
def dropout(data, prob, *, mask=None, dtype=None, **kwargs):
    trace = current_trace()
    src = tile_arg(data, "dropout data")
    predicate = mask_of(mask)
    prob = _ready(prob, "prob")

    def emit(dst: Tile, accumulate: bool = False) -> None:
        lowering.dropout(dst, src, prob, predicate)

    return trace.defer(src.shape, resolve_dtype(dtype) or src.dtype_spec, emit)


_CMP = {"lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal", "eq": "equal"}


@api("nisa.affine_select")
@returns_result
def affine_select(pred, on_true_tile, on_false_value, *, mask=None, dtype=None, **kwargs):
    trace = current_trace()
    if not isinstance(pred, Predicate):
        raise InvalidArgumentError("nisa.affine_select takes an affine comparison of index tiles, e.g. "
                                   "(i_p - i_f >= 0)")
    expr, op = pred.affine()
    src = tile_arg(on_true_tile, "affine_select on_true_tile")
    shape, base, pstep, steps = affine_parts(expr)

    if len(shape) != src.ndim or any(n not in (1, m) for n, m in zip(shape, src.shape, strict=True)):
        raise InvalidArgumentError(f"affine_select predicate shape {list(shape)} does not match the "
                                   f"tile {list(src.shape)}")

    def emit(dst: Tile, accumulate: bool = False) -> None:
        lowering.affine_select(dst, src, cmp=_CMP[op], base=base, partition_step=pstep, steps=steps,
                               fill=float(on_false_value), free_shape=src.shape[1:])

    return trace.defer(src.shape, resolve_dtype(dtype) or src.dtype_spec, emit)


def range_select_fill(on_false_value) -> float:
    """on_false_value as the instruction's fill (nl.fp32 -> its .min; default FP32_MIN)."""
    if on_false_value is None or on_false_value is Ellipsis:
        return float(np.finfo(np.float32).min)
    return float(getattr(on_false_value, "min", on_false_value))


@api("nisa.range_select")
@returns_result
def range_select(*, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=0, reduce_res=None,
                 reduce_op=np.amax, range_start=0, on_false_value=None, mask=None, dtype=None, **kwargs):
    trace = current_trace()
    src = tile_arg(on_true_tile, "range_select on_true_tile")
    res = tile_arg(reduce_res, "reduce_res") if reduce_res is not None else None
    b0, b1 = tile_arg(bound0, "bound0"), tile_arg(bound1, "bound1")

    def emit(dst: Tile, accumulate: bool = False) -> None:
        lowering.range_select(dst, src, cmp0=comp_op0, bound0=b0, cmp1=comp_op1, bound1=b1,
                              range_start=range_start, fill=range_select_fill(on_false_value),
                              reduce_dst=res, reduce_cmd=reduce_cmd_name(reduce_cmd))

    return trace.defer(src.shape, resolve_dtype(dtype) or src.dtype_spec, emit)


@api("nisa.select_reduce")
def select_reduce(*, dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=0,
                  reduce_op=np.amax, reverse_pred=False, mask=None, dtype=None, **kwargs):
    trace = current_trace()
    pm = mask_of(mask)
    res = tile_arg(reduce_res, "reduce_res") if reduce_res is not None else None
    target, pred = tile_arg(dst, "dst"), tile_arg(predicate, "predicate")
    true_tile, false_value = tile_arg(on_true, "on_true"), _ready(on_false, "on_false")
    trace.flush()
    lowering.select_reduce(target, pred, true_tile, false_value, reverse=reverse_pred,
                           reduce_dst=res, reduce_cmd=reduce_cmd_name(reduce_cmd), predicate=pm)


@api("nisa.memset")
@returns_result
def memset(shape, value, dtype, *, mask=None, engine=None, **kwargs):
    trace = current_trace()
    plain, _ = split_shape(shape)
    predicate = mask_of(mask)

    def emit(dst: Tile, accumulate: bool = False) -> None:
        lowering.memset(dst, value, engine=to_isa_engine(engine), predicate=predicate)

    return trace.defer(plain, resolve_dtype(dtype), emit)


@api("nisa.bn_stats")
@returns_result
def bn_stats(data, *, mask=None, dtype=None, **kwargs):
    trace = current_trace()
    src = tile_arg(data, "bn_stats data")

    def emit(dst: Tile, accumulate: bool = False) -> None:
        lowering.bn_stats(dst, src, mask_of(mask))

    return trace.defer((src.shape[0], 6), resolve_dtype(dtype) or src.dtype_spec, emit)


@api("nisa.bn_aggr")
@returns_result
def bn_aggr(data, *, mask=None, dtype=None, **kwargs):
    trace = current_trace()
    src = tile_arg(data, "bn_aggr data")

    def emit(dst: Tile, accumulate: bool = False) -> None:
        lowering.bn_aggr(dst, src, mask_of(mask))

    return trace.defer((src.shape[0], 2), resolve_dtype(dtype) or src.dtype_spec, emit)


@api("nisa.local_gather")
@returns_result
def local_gather(src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, *, mask=None):
    trace = current_trace()
    src, idx = tile_arg(src_buffer, "local_gather src_buffer"), tile_arg(index, "local_gather index")
    count = num_valid_indices or 16 * (idx.size // idx.shape[0])

    def emit(dst: Tile, accumulate: bool = False) -> None:
        lowering.local_gather(dst, src, idx, elems_per_index=num_elem_per_idx,
                              valid_indices=num_valid_indices)

    return trace.defer((src.shape[0], count, int(num_elem_per_idx)), src.dtype_spec, emit)


@api("nisa.dma_copy")
def dma_copy(*, dst, src, mask=None, dst_rmw_op=None, oob_mode=0, dge_mode=3, **kwargs):
    trace = current_trace()
    pm = mask_of(mask)
    target, source = tile_arg(dst, "dma_copy dst"), tile_arg(src, "dma_copy src")
    trace._check_writable(target)
    accumulate = dst_rmw_op is not None and alu_op(dst_rmw_op).name == "add"
    if dst_rmw_op is not None and not accumulate:
        raise InvalidArgumentError("dma_copy dst_rmw_op supports add only")
    trace.flush()
    skip = getattr(oob_mode, "name", oob_mode) in ("skip", 1)
    lowering.dma_copy(target, source, accumulate=accumulate, predicate=pm, tags=source.tags,
                      skip_out_of_bounds=skip)


@api("nisa.dma_transpose")
@returns_result
def dma_transpose(src, *, axes=None, mask=None, dtype=None, **kwargs):
    trace = current_trace()
    data = tile_arg(src, "dma_transpose src")
    if data.ndim != 2 or (axes is not None and tuple(axes) != (1, 0)):
        raise UnsupportedError("dma_transpose supports 2-D tiles with axes (1, 0) in trnsim")

    def emit(dst: Tile, accumulate: bool = False) -> None:
        lowering.dma_transpose(dst, data, mask_of(mask))

    return trace.defer(data.shape[::-1], resolve_dtype(dtype) or data.dtype_spec, emit)


@api("nisa.max8")
@returns_result
def max8(*, src, mask=None, dtype=None, **kwargs):
    trace = current_trace()
    data = tile_arg(src, "max8 src")

    def emit(dst: Tile, accumulate: bool = False) -> None:
        lowering.max8(dst, data, mask_of(mask))

    return trace.defer((data.shape[0], 8), resolve_dtype(dtype) or data.dtype_spec, emit)


@api("nisa.nc_find_index8")
@returns_result
def nc_find_index8(*, data, vals, mask=None, dtype=None, **kwargs):
    trace = current_trace()
    src, values = tile_arg(data, "nc_find_index8 data"), tile_arg(vals, "nc_find_index8 vals")

    def emit(dst: Tile, accumulate: bool = False) -> None:
        lowering.find_index8(dst, src, values, mask_of(mask))

    return trace.defer((src.shape[0], 8), resolve_dtype(dtype) or as_dtype("uint32"), emit)


@api("nisa.nc_match_replace8")
@returns_result
def nc_match_replace8(*, data, vals, imm, dst_idx=None, mask=None, dtype=None, **kwargs):
    trace = current_trace()
    src, values = tile_arg(data, "nc_match_replace8 data"), tile_arg(vals, "nc_match_replace8 vals")
    index = tile_arg(dst_idx, "dst_idx") if dst_idx is not None else None

    def emit(dst: Tile, accumulate: bool = False) -> None:
        lowering.match_replace8(dst, src, values, imm, index, mask_of(mask))

    return trace.defer(src.shape, resolve_dtype(dtype) or src.dtype_spec, emit)


@api("nisa.nc_stream_shuffle")
def nc_stream_shuffle(src, dst, shuffle_mask, *, dtype=None, mask=None, **kwargs):
    trace = current_trace()
    source, target = tile_arg(src, "src"), tile_arg(dst, "dst")
    trace.flush()
    lowering.stream_shuffle(target, source, shuffle_mask)


def get_nc_version():
    return nc_version(current_trace().core.version)


def _unsupported(name: str):
    def call(*args, **kwargs):
        raise UnsupportedError(f"nisa.{name} is not supported by trnsim yet")
    call.__name__ = name
    return call


tensor_copy_dynamic_src = _unsupported("tensor_copy_dynamic_src")
tensor_copy_dynamic_dst = _unsupported("tensor_copy_dynamic_dst")
builtin_custom_op = _unsupported("builtin_custom_op")
