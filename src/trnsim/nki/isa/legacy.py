"""nisa for the legacy `neuronxcc.nki` API: each call returns its result tile (pending until placed).

Every function maps 1:1 onto a `trnsim.isa` instruction; `mask=` shrinks all operands.
"""

from __future__ import annotations

import numpy as np

from trnsim.errors import InvalidArgumentError, UnsupportedError
from trnsim.isa import (
    Activation,
    AffineSelect,
    BnAggr,
    BnStats,
    DmaCopy,
    DmaTranspose,
    Dropout,
    FindIndex8,
    Iota,
    LocalGather,
    MatchReplace8,
    Max8,
    Memset,
    RangeSelect,
    Reciprocal,
    ScalarTensorTensor,
    SelectReduce,
    StreamShuffle,
    TensorCopy,
    TensorCopyPredicated,
    TensorPartitionReduce,
    TensorReduce,
    TensorScalar,
    TensorTensor,
    TensorTensorScan,
    TensorTranspose,
    VectorTranspose,
    activation_function,
    alu_op,
)
from trnsim.nki.indexing import IndexExpr, Predicate
from trnsim.nki.isa.enums import nc_version, reduce_cmd_name, to_isa_engine
from trnsim.nki.language.buffers import split_shape
from trnsim.nki.language.compound import _ap_axes, _free_axes, _reduced_shape, matmul_pending
from trnsim.nki.operands import is_scalar, mask_of, resolve_dtype, tile_arg, wider
from trnsim.nki.tile import Tile
from trnsim.nki.trace import api, current_trace
from trnsim.numerics import dtype as as_dtype


def _operand(value, predicate, tags=None):
    """A scalar stays a float; a tile becomes its (masked) access pattern."""
    if isinstance(value, Tile):
        tile = tile_arg(value, "operand")
        return tile.access(predicate, tags if tags is not None else tile.tags)
    if value is None:
        return None
    return float(value)


def _op_name(op) -> str | None:
    return None if op is None else alu_op(op).name


@api("nisa.nc_matmul")
def nc_matmul(stationary, moving, *, is_stationary_onezero=False, is_moving_onezero=False,
              is_transpose=False, tile_position=(), tile_size=(), mask=None, perf_mode=None, **kwargs):
    st = tile_arg(stationary, "nc_matmul stationary")
    mv = tile_arg(moving, "nc_matmul moving")
    if is_transpose:
        return nc_transpose(st, engine="tensor", mask=mask)
    mode = getattr(perf_mode, "name", perf_mode)
    mode = None if mode in (None, "none", 0) else "double_row"
    return matmul_pending(st, mv, mask_of(mask), perf_mode=mode, moving_onezero=is_moving_onezero)


@api("nisa.nc_transpose")
def nc_transpose(data, *, mask=None, dtype=None, engine=None, **kwargs):
    trace = current_trace()
    src = tile_arg(data, "nc_transpose data")
    p, f = src.shape[0], src.size // src.shape[0]
    chosen = to_isa_engine(engine)
    if chosen is None:
        chosen = "vector" if p <= 32 and f <= 32 else "tensor"
    chosen = str(chosen)
    predicate = mask_of(mask)

    def emit(dst: Tile, accumulate: bool = False) -> None:
        cls = VectorTranspose if chosen == "vector" else TensorTranspose
        trace.emit_now(cls, dst=dst.access(predicate), src=src.access(predicate), engine=chosen)

    buffer = "sbuf" if chosen == "vector" else "psum"
    return trace.defer((f, p), resolve_dtype(dtype) or src.dtype_spec, emit, buffer=buffer)


@api("nisa.activation")
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
    red_name = _op_name(reduce_op)
    red_tile = tile_arg(reduce_res, "reduce_res") if reduce_res is not None else None

    def emit(dst: Tile, accumulate: bool = False) -> None:
        trace.emit_now(Activation, dst=dst.access(predicate, tags), src=src.access(predicate, tags),
                       func=func, scale=_operand(scale, predicate), bias=_operand(bias, predicate),
                       reduce_op=red_name, reduce_cmd=cmd,
                       reduce_dst=red_tile.access() if red_tile is not None else None)

    return trace.defer(src.shape, resolve_dtype(dtype) or src.dtype_spec, emit, tags=tags)


@api("nisa.activation_reduce")
def activation_reduce(op, data, *, reduce_op, reduce_res, bias=None, scale=1.0, mask=None, dtype=None,
                      **kwargs):
    return activation(op, data, bias=bias, scale=scale, reduce_op=reduce_op, reduce_res=reduce_res,
                      reduce_cmd="reset_reduce", mask=mask, dtype=dtype)


@api("nisa.tensor_reduce")
def tensor_reduce(op, data, axis, *, mask=None, dtype=None, negate=False, keepdims=False, **kwargs):
    trace = current_trace()
    src = tile_arg(data, "tensor_reduce data")
    axes = _free_axes(src, axis)
    predicate = mask_of(mask)
    name = alu_op(op).name

    def emit(dst: Tile, accumulate: bool = False) -> None:
        s = src.access(predicate)
        trace.emit_now(TensorReduce, dst=dst.access(predicate), src=s, op=name,
                       axes=_ap_axes(src, axes, s), negate=negate)

    return trace.defer(_reduced_shape(src, axes, keepdims), resolve_dtype(dtype) or src.dtype_spec, emit)


@api("nisa.tensor_partition_reduce")
def tensor_partition_reduce(op, data, *, mask=None, dtype=None, **kwargs):
    trace = current_trace()
    src = tile_arg(data, "tensor_partition_reduce data")
    name = alu_op(op).name

    def emit(dst: Tile, accumulate: bool = False) -> None:
        trace.emit_now(TensorPartitionReduce, dst=dst.access(), src=src.access(mask_of(mask)), op=name)

    return trace.defer((1, *src.shape[1:]), resolve_dtype(dtype) or src.dtype_spec, emit)


@api("nisa.tensor_tensor")
def tensor_tensor(data1, data2, op, *, dtype=None, mask=None, engine=None, **kwargs):
    trace = current_trace()
    a, b = tile_arg(data1, "tensor_tensor data1"), tile_arg(data2, "tensor_tensor data2")
    predicate = mask_of(mask)
    tags = a.tags
    name = alu_op(op).name

    def emit(dst: Tile, accumulate: bool = False) -> None:
        trace.emit_now(TensorTensor, dst=dst.access(predicate, tags), in0=a.access(predicate, tags),
                       in1=b.access(predicate, tags), op=name, engine=to_isa_engine(engine))

    out = resolve_dtype(dtype) or wider(a.dtype_spec, b.dtype_spec)
    return trace.defer(a.shape, out, emit, tags=tags)


@api("nisa.tensor_tensor_scan")
def tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0=False, reverse1=False, *, dtype=None,
                       mask=None, **kwargs):
    trace = current_trace()
    a, b = tile_arg(data0, "tensor_tensor_scan data0"), tile_arg(data1, "tensor_tensor_scan data1")
    predicate = mask_of(mask)

    def emit(dst: Tile, accumulate: bool = False) -> None:
        trace.emit_now(TensorTensorScan, dst=dst.access(predicate), in0=a.access(predicate),
                       in1=b.access(predicate), initial=_operand(initial, predicate),
                       op0=alu_op(op0).name, op1=alu_op(op1).name, reverse0=reverse0, reverse1=reverse1)

    return trace.defer(a.shape, resolve_dtype(dtype) or wider(a.dtype_spec, b.dtype_spec), emit)


@api("nisa.scalar_tensor_tensor")
def scalar_tensor_tensor(*, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False,
                         dtype=None, mask=None, **kwargs):
    trace = current_trace()
    src, other = tile_arg(data, "data"), tile_arg(operand1, "operand1")
    predicate = mask_of(mask)

    def emit(dst: Tile, accumulate: bool = False) -> None:
        trace.emit_now(ScalarTensorTensor, dst=dst.access(predicate), src=src.access(predicate),
                       op0=alu_op(op0).name, operand0=_operand(operand0, predicate),
                       op1=alu_op(op1).name, in1=other.access(predicate), reverse0=reverse0,
                       reverse1=reverse1)

    return trace.defer(src.shape, resolve_dtype(dtype) or src.dtype_spec, emit)


@api("nisa.tensor_scalar")
def tensor_scalar(data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, *,
                  dtype=None, mask=None, engine=None, **kwargs):
    trace = current_trace()
    src = tile_arg(data, "tensor_scalar data")
    predicate = mask_of(mask)
    tags = src.tags

    def emit(dst: Tile, accumulate: bool = False) -> None:
        trace.emit_now(TensorScalar, dst=dst.access(predicate, tags), src=src.access(predicate, tags),
                       op0=alu_op(op0).name, operand0=_operand(operand0, predicate), reverse0=reverse0,
                       op1=_op_name(op1), operand1=_operand(operand1, predicate), reverse1=reverse1,
                       engine=to_isa_engine(engine))

    return trace.defer(src.shape, resolve_dtype(dtype) or src.dtype_spec, emit, tags=tags)


@api("nisa.tensor_scalar_reduce")
def tensor_scalar_reduce(*, data, op0, operand0, reduce_op, reduce_res, reverse0=False, dtype=None,
                         mask=None, **kwargs):
    trace = current_trace()
    src = tile_arg(data, "tensor_scalar_reduce data")
    res = tile_arg(reduce_res, "reduce_res")
    predicate = mask_of(mask)

    def emit(dst: Tile, accumulate: bool = False) -> None:
        trace.emit_now(TensorScalar, dst=dst.access(predicate), src=src.access(predicate),
                       op0=alu_op(op0).name, operand0=_operand(operand0, predicate), reverse0=reverse0,
                       reduce_op=alu_op(reduce_op).name, reduce_dst=res.access())

    return trace.defer(src.shape, resolve_dtype(dtype) or src.dtype_spec, emit)


@api("nisa.tensor_copy")
def tensor_copy(src, *, mask=None, dtype=None, engine=None, **kwargs):
    trace = current_trace()
    data = tile_arg(src, "tensor_copy src")
    predicate = mask_of(mask)
    tags = data.tags

    def emit(dst: Tile, accumulate: bool = False) -> None:
        trace.emit_now(TensorCopy, dst=dst.access(predicate, tags), src=data.access(predicate, tags),
                       engine=to_isa_engine(engine))

    return trace.defer(data.shape, resolve_dtype(dtype) or data.dtype_spec, emit, tags=tags)


@api("nisa.tensor_copy_predicated")
def tensor_copy_predicated(*, src, dst, predicate, reverse_pred=False, mask=None, dtype=None, **kwargs):
    trace = current_trace()
    pm = mask_of(mask)
    target = tile_arg(dst, "tensor_copy_predicated dst")
    trace.emit(TensorCopyPredicated, dst=target.access(pm), src=_operand(src, pm),
               predicate=tile_arg(predicate, "predicate").access(pm), reverse=reverse_pred)


@api("nisa.reciprocal")
def reciprocal(data, *, dtype=None, mask=None, **kwargs):
    trace = current_trace()
    src = tile_arg(data, "reciprocal data")
    predicate = mask_of(mask)

    def emit(dst: Tile, accumulate: bool = False) -> None:
        trace.emit_now(Reciprocal, dst=dst.access(predicate), src=src.access(predicate))

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
def iota(expr, dtype, *, mask=None, **kwargs):
    trace = current_trace()
    if isinstance(expr, int):
        expr = IndexExpr({}, expr)
    if not isinstance(expr, IndexExpr):
        raise InvalidArgumentError("nisa.iota takes an affine expression of nl.arange / nl.mgrid indices")
    shape, base, pstep, steps = affine_parts(expr)

    def emit(dst: Tile, accumulate: bool = False) -> None:
        trace.emit_now(Iota, dst=dst.access(), base=base, partition_step=pstep, steps=tuple(steps),
                       free_shape=tuple(shape[1:]))

    return trace.defer(shape, resolve_dtype(dtype), emit)


@api("nisa.dropout")
def dropout(data, prob, *, mask=None, dtype=None, **kwargs):
    trace = current_trace()
    src = tile_arg(data, "dropout data")
    predicate = mask_of(mask)

    def emit(dst: Tile, accumulate: bool = False) -> None:
        trace.emit_now(Dropout, dst=dst.access(predicate), src=src.access(predicate),
                       prob=_operand(prob, predicate))

    return trace.defer(src.shape, resolve_dtype(dtype) or src.dtype_spec, emit)


_CMP = {"lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal", "eq": "equal"}


@api("nisa.affine_select")
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
        trace.emit_now(AffineSelect, dst=dst.access(), src=src.access(), cmp=_CMP[op], base=base,
                       partition_step=pstep, steps=tuple(steps), fill=float(on_false_value),
                       free_shape=tuple(src.shape[1:]))

    return trace.defer(src.shape, resolve_dtype(dtype) or src.dtype_spec, emit)


@api("nisa.range_select")
def range_select(*, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=0, reduce_res=None,
                 reduce_op=np.amax, range_start=0, on_false_value=None, mask=None, dtype=None, **kwargs):
    trace = current_trace()
    src = tile_arg(on_true_tile, "range_select on_true_tile")
    res = tile_arg(reduce_res, "reduce_res") if reduce_res is not None else None
    fill = float(np.finfo(np.float32).min) if on_false_value is None else float(getattr(
        on_false_value, "min", on_false_value))

    def emit(dst: Tile, accumulate: bool = False) -> None:
        trace.emit_now(RangeSelect, dst=dst.access(), src=src.access(), cmp0=alu_op(comp_op0).name,
                       bound0=tile_arg(bound0, "bound0").access(), cmp1=alu_op(comp_op1).name,
                       bound1=tile_arg(bound1, "bound1").access(), range_start=int(range_start),
                       fill=fill, reduce_dst=res.access() if res is not None else None,
                       reduce_cmd=reduce_cmd_name(reduce_cmd))

    return trace.defer(src.shape, resolve_dtype(dtype) or src.dtype_spec, emit)


@api("nisa.select_reduce")
def select_reduce(*, dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=0,
                  reduce_op=np.amax, reverse_pred=False, mask=None, dtype=None, **kwargs):
    trace = current_trace()
    pm = mask_of(mask)
    res = tile_arg(reduce_res, "reduce_res") if reduce_res is not None else None
    trace.emit(SelectReduce, dst=tile_arg(dst, "dst").access(pm),
               predicate=tile_arg(predicate, "predicate").access(pm),
               on_true=tile_arg(on_true, "on_true").access(pm), on_false=_operand(on_false, pm),
               reverse=reverse_pred, reduce_dst=res.access() if res is not None else None,
               reduce_cmd=reduce_cmd_name(reduce_cmd))


@api("nisa.memset")
def memset(shape, value, dtype, *, mask=None, engine=None, **kwargs):
    trace = current_trace()
    plain, _ = split_shape(shape)
    predicate = mask_of(mask)

    def emit(dst: Tile, accumulate: bool = False) -> None:
        trace.emit_now(Memset, dst=dst.access(predicate), value=float(value), engine=to_isa_engine(engine))

    return trace.defer(plain, resolve_dtype(dtype), emit)


@api("nisa.bn_stats")
def bn_stats(data, *, mask=None, dtype=None, **kwargs):
    trace = current_trace()
    src = tile_arg(data, "bn_stats data")

    def emit(dst: Tile, accumulate: bool = False) -> None:
        trace.emit_now(BnStats, dst=dst.access(), src=src.access(mask_of(mask)))

    return trace.defer((src.shape[0], 6), resolve_dtype(dtype) or src.dtype_spec, emit)


@api("nisa.bn_aggr")
def bn_aggr(data, *, mask=None, dtype=None, **kwargs):
    trace = current_trace()
    src = tile_arg(data, "bn_aggr data")

    def emit(dst: Tile, accumulate: bool = False) -> None:
        trace.emit_now(BnAggr, dst=dst.access(), src=src.access(mask_of(mask)))

    return trace.defer((src.shape[0], 2), resolve_dtype(dtype) or src.dtype_spec, emit)


@api("nisa.local_gather")
def local_gather(src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, *, mask=None):
    trace = current_trace()
    src, idx = tile_arg(src_buffer, "local_gather src_buffer"), tile_arg(index, "local_gather index")
    count = num_valid_indices or 16 * (idx.size // idx.shape[0])

    def emit(dst: Tile, accumulate: bool = False) -> None:
        trace.emit_now(LocalGather, dst=dst.access(), src=src.access(), index=idx.access(),
                       elems_per_index=int(num_elem_per_idx), valid_indices=num_valid_indices)

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
    trace.emit(DmaCopy, dst=target.access(pm, source.tags), src=source.access(pm, source.tags),
               accumulate=accumulate)


@api("nisa.dma_transpose")
def dma_transpose(src, *, axes=None, mask=None, dtype=None, **kwargs):
    trace = current_trace()
    data = tile_arg(src, "dma_transpose src")
    if data.ndim != 2 or (axes is not None and tuple(axes) != (1, 0)):
        raise UnsupportedError("dma_transpose supports 2-D tiles with axes (1, 0) in trnsim")

    def emit(dst: Tile, accumulate: bool = False) -> None:
        trace.emit_now(DmaTranspose, dst=dst.access(), src=data.access(mask_of(mask)))

    return trace.defer(data.shape[::-1], resolve_dtype(dtype) or data.dtype_spec, emit)


@api("nisa.max8")
def max8(*, src, mask=None, dtype=None, **kwargs):
    trace = current_trace()
    data = tile_arg(src, "max8 src")

    def emit(dst: Tile, accumulate: bool = False) -> None:
        trace.emit_now(Max8, dst=dst.access(), src=data.access(mask_of(mask)))

    return trace.defer((data.shape[0], 8), resolve_dtype(dtype) or data.dtype_spec, emit)


@api("nisa.nc_find_index8")
def nc_find_index8(*, data, vals, mask=None, dtype=None, **kwargs):
    trace = current_trace()
    src, values = tile_arg(data, "nc_find_index8 data"), tile_arg(vals, "nc_find_index8 vals")

    def emit(dst: Tile, accumulate: bool = False) -> None:
        trace.emit_now(FindIndex8, dst=dst.access(), src=src.access(mask_of(mask)), values=values.access())

    return trace.defer((src.shape[0], 8), resolve_dtype(dtype) or as_dtype("uint32"), emit)


@api("nisa.nc_match_replace8")
def nc_match_replace8(*, data, vals, imm, dst_idx=None, mask=None, dtype=None, **kwargs):
    trace = current_trace()
    src, values = tile_arg(data, "nc_match_replace8 data"), tile_arg(vals, "nc_match_replace8 vals")
    index = tile_arg(dst_idx, "dst_idx") if dst_idx is not None else None

    def emit(dst: Tile, accumulate: bool = False) -> None:
        trace.emit_now(MatchReplace8, dst=dst.access(), src=src.access(mask_of(mask)),
                       values=values.access(), imm=float(imm),
                       index_dst=index.access() if index is not None else None)

    return trace.defer(src.shape, resolve_dtype(dtype) or src.dtype_spec, emit)


@api("nisa.nc_stream_shuffle")
def nc_stream_shuffle(src, dst, shuffle_mask, *, dtype=None, mask=None, **kwargs):
    trace = current_trace()
    trace.emit(StreamShuffle, dst=tile_arg(dst, "dst").access(), src=tile_arg(src, "src").access(),
               mask=tuple(int(m) for m in shuffle_mask))


def get_nc_version():
    return nc_version(current_trace().core.version)


def _unsupported(name: str):
    def call(*args, **kwargs):
        raise UnsupportedError(f"nisa.{name} is not supported by trnsim yet")
    call.__name__ = name
    return call


tensor_copy_dynamic_src = _unsupported("tensor_copy_dynamic_src")
tensor_copy_dynamic_dst = _unsupported("tensor_copy_dynamic_dst")
sequence_bounds = _unsupported("sequence_bounds")
builtin_custom_op = _unsupported("builtin_custom_op")


def _is_scalar(value) -> bool:
    return is_scalar(value)
