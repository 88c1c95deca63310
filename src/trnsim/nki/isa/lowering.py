"""One function per nisa instruction: emit it into the trace with an explicit destination tile.

Both NKI front ends lower through here, so an instruction means the same thing in both: the
legacy `neuronxcc.nki` calls return a pending tile whose placement calls one of these with the
chosen destination; the current `nki` calls are destination-first and call them directly.

Operands are tiles that are ready to read (`Trace.read_ready`), scalars, or None. ``predicate``
is a legacy `mask=` (None in the current API); ``tags`` names, by position, which arange each
axis of an untagged operand belongs to when the mask shrinks it.
"""

from __future__ import annotations

from trnsim.errors import InvalidArgumentError
from trnsim.isa import (
    AccessPattern,
    Activation,
    AffineSelect,
    BnAggr,
    BnStats,
    DmaCopy,
    DmaIndirect,
    DmaTranspose,
    Dropout,
    FindIndex8,
    Instruction,
    Iota,
    LoadStationary,
    LocalGather,
    MatchReplace8,
    Max8,
    Memory,
    Memset,
    MultiplyMoving,
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
    alu_op,
)
from trnsim.nki import invariant
from trnsim.nki.tile import Tile
from trnsim.nki.trace import current_trace


def access(tile: Tile, predicate=None, tags=None):
    """A tile as an instruction operand, shrunk by a legacy mask if one is given."""
    if predicate is None:
        return tile.access()
    return tile.access(predicate, tags if tags is not None else tile.tags)


def operand(value, predicate=None, tags=None):
    """A scalar stays a float; a tile becomes its access pattern; None stays None."""
    if isinstance(value, Tile):
        return access(value, predicate, tags)
    return None if value is None else float(value)


def op_name(op) -> str | None:
    return None if op is None else alu_op(op).name


def emit(cls: type[Instruction], **fields) -> Instruction:
    return current_trace().emit_now(cls, **fields)


def matmul(dst: Tile, stationary: Tile, moving: Tile, *, accumulate: bool = False,
           perf_mode: str | None = None, moving_onezero: bool = False,
           stationary_onezero: bool = False, predicate=None) -> None:
    """stationary.T @ moving into PSUM: LoadStationary then MultiplyMoving (nc_matmul)."""
    st = access(stationary, predicate)
    emit(LoadStationary, src=st, perf_mode=perf_mode)
    emit(MultiplyMoving, dst=access(dst, predicate), moving=access(moving, predicate), stationary=st,
         accumulate=accumulate, perf_mode=perf_mode, moving_onezero=moving_onezero,
         stationary_onezero=stationary_onezero)


def transpose(dst: Tile, src: Tile, engine: str, predicate=None) -> None:
    cls = VectorTranspose if engine == "vector" else TensorTranspose
    emit(cls, dst=access(dst, predicate), src=access(src, predicate), engine=engine)


def activation(dst: Tile, src: Tile, func: str, *, scale=1.0, bias=None, reduce_op=None,
               reduce_cmd: str = "idle", reduce_dst: Tile | None = None, predicate=None,
               tags=None) -> None:
    fields = dict(dst=access(dst, predicate, tags), src=access(src, predicate, tags), func=func,
                  scale=operand(scale, predicate), bias=operand(bias, predicate),
                  reduce_op=op_name(reduce_op), reduce_cmd=reduce_cmd,
                  reduce_dst=reduce_dst.access() if reduce_dst is not None else None)
    if predicate is None and reduce_op is None and reduce_dst is None and reduce_cmd == "idle":
        inputs = (src, *(t for t in (scale, bias) if isinstance(t, Tile)))
        invariant.emit_once(current_trace(), dst, inputs, Activation, **fields)
    else:
        emit(Activation, **fields)


def tensor_reduce(dst: Tile, src: Tile, op, axes: tuple[int, ...], *, negate: bool = False,
                  predicate=None, dst_tags=None) -> None:
    """Reduce the tile axes `axes` (trailing free axes of `src`)."""
    from trnsim.nki.language.compound import reduction_source

    s, ap_axes = reduction_source(src, axes, access(src, predicate))
    emit(TensorReduce, dst=access(dst, predicate, dst_tags), src=s, op=alu_op(op).name,
         axes=ap_axes, negate=negate)


def tensor_partition_reduce(dst: Tile, src: Tile, op, predicate=None) -> None:
    emit(TensorPartitionReduce, dst=dst.access(), src=access(src, predicate), op=alu_op(op).name)


def tensor_tensor(dst: Tile, in0: Tile, in1: Tile, op, *, engine=None, predicate=None,
                  tags=None) -> None:
    fields = dict(dst=access(dst, predicate, tags), in0=access(in0, predicate, tags),
                  in1=access(in1, predicate, tags), op=alu_op(op).name, engine=engine)
    if predicate is None:
        invariant.emit_once(current_trace(), dst, (in0, in1), TensorTensor, **fields)
    else:
        emit(TensorTensor, **fields)


def tensor_tensor_scan(dst: Tile, in0: Tile, in1: Tile, initial, op0, op1, *, reverse0=False,
                       reverse1=False, predicate=None) -> None:
    emit(TensorTensorScan, dst=access(dst, predicate), in0=access(in0, predicate),
         in1=access(in1, predicate), initial=operand(initial, predicate), op0=alu_op(op0).name,
         op1=alu_op(op1).name, reverse0=reverse0, reverse1=reverse1)


def scalar_tensor_tensor(dst: Tile, src: Tile, op0, operand0, op1, in1: Tile, *, reverse0=False,
                         reverse1=False, predicate=None) -> None:
    emit(ScalarTensorTensor, dst=access(dst, predicate), src=access(src, predicate),
         op0=alu_op(op0).name, operand0=operand(operand0, predicate), op1=alu_op(op1).name,
         in1=access(in1, predicate), reverse0=reverse0, reverse1=reverse1)


def tensor_scalar(dst: Tile, src: Tile, op0, operand0, *, reverse0=False, op1=None, operand1=None,
                  reverse1=False, engine=None, reduce_op=None, reduce_dst: Tile | None = None,
                  reduce_cmd: str = "reset_reduce", reduce_init=None, reduce_negate: bool = False,
                  predicate=None, tags=None) -> None:
    fields = dict(dst=access(dst, predicate, tags), src=access(src, predicate, tags),
                  op0=alu_op(op0).name, operand0=operand(operand0, predicate), reverse0=reverse0,
                  op1=op_name(op1), operand1=operand(operand1, predicate), reverse1=reverse1,
                  engine=engine, reduce_op=op_name(reduce_op),
                  reduce_dst=reduce_dst.access() if reduce_dst is not None else None,
                  reduce_cmd=reduce_cmd, reduce_init=operand(reduce_init),
                  reduce_negate=reduce_negate)
    if predicate is None and reduce_op is None and reduce_dst is None:
        inputs = (src, *(t for t in (operand0, operand1) if isinstance(t, Tile)))
        invariant.emit_once(current_trace(), dst, inputs, TensorScalar, **fields)
    else:
        emit(TensorScalar, **fields)


def tensor_copy(dst: Tile, src: Tile, *, engine=None, predicate=None, tags=None) -> None:
    emit(TensorCopy, dst=access(dst, predicate, tags), src=access(src, predicate, tags),
         engine=engine)


def tensor_copy_predicated(dst: Tile, src, predicate_tile: Tile, *, reverse: bool = False,
                           predicate=None) -> None:
    emit(TensorCopyPredicated, dst=access(dst, predicate), src=operand(src, predicate),
         predicate=access(predicate_tile, predicate), reverse=reverse)


def reciprocal(dst: Tile, src: Tile, predicate=None) -> None:
    emit(Reciprocal, dst=access(dst, predicate), src=access(src, predicate))


def iota(dst: Tile, *, base: int, partition_step: int, steps: tuple[int, ...],
         free_shape: tuple[int, ...]) -> None:
    emit(Iota, dst=dst.access(), base=int(base), partition_step=int(partition_step),
         steps=tuple(int(s) for s in steps), free_shape=tuple(int(n) for n in free_shape))


def dropout(dst: Tile, src: Tile, prob, predicate=None) -> None:
    emit(Dropout, dst=access(dst, predicate), src=access(src, predicate),
         prob=operand(prob, predicate))


def affine_select(dst: Tile, src: Tile, *, cmp: str, base: int, partition_step: int,
                  steps: tuple[int, ...], fill: float, free_shape: tuple[int, ...]) -> None:
    emit(AffineSelect, dst=dst.access(), src=src.access(), cmp=alu_op(cmp).name, base=int(base),
         partition_step=int(partition_step), steps=tuple(int(s) for s in steps), fill=float(fill),
         free_shape=tuple(int(n) for n in free_shape))


def range_select(dst: Tile, src: Tile, *, cmp0, bound0: Tile, cmp1, bound1: Tile, range_start: int,
                 fill: float, reduce_dst: Tile | None, reduce_cmd: str) -> None:
    emit(RangeSelect, dst=dst.access(), src=src.access(), cmp0=alu_op(cmp0).name,
         bound0=bound0.access(), cmp1=alu_op(cmp1).name, bound1=bound1.access(),
         range_start=int(range_start), fill=float(fill),
         reduce_dst=reduce_dst.access() if reduce_dst is not None else None, reduce_cmd=reduce_cmd)


def select_reduce(dst: Tile, predicate_tile: Tile, on_true: Tile, on_false, *, reverse: bool,
                  reduce_dst: Tile | None, reduce_cmd: str, predicate=None) -> None:
    emit(SelectReduce, dst=access(dst, predicate), predicate=access(predicate_tile, predicate),
         on_true=access(on_true, predicate), on_false=operand(on_false, predicate), reverse=reverse,
         reduce_dst=reduce_dst.access() if reduce_dst is not None else None, reduce_cmd=reduce_cmd)


def memset(dst: Tile, value: float, *, engine=None, predicate=None) -> None:
    emit(Memset, dst=access(dst, predicate), value=float(value), engine=engine)


def bn_stats(dst: Tile, src: Tile, predicate=None) -> None:
    emit(BnStats, dst=dst.access(), src=access(src, predicate))


def bn_aggr(dst: Tile, src: Tile, predicate=None) -> None:
    emit(BnAggr, dst=dst.access(), src=access(src, predicate))


def local_gather(dst: Tile, src: Tile, index: Tile, *, elems_per_index: int = 1,
                 valid_indices: int | None = None) -> None:
    emit(LocalGather, dst=dst.access(), src=src.access(), index=index.access(),
         elems_per_index=int(elems_per_index), valid_indices=valid_indices)


def dma_copy(dst: Tile, src: Tile, *, accumulate: bool = False, queue: int | None = None,
             predicate=None, tags=None, skip_out_of_bounds: bool = False) -> None:
    if dst._vector is not None or src._vector is not None:
        indirect_dma(dst, src, accumulate=accumulate, predicate=predicate, tags=tags,
                     skip_out_of_bounds=skip_out_of_bounds)
        return
    emit(DmaCopy, dst=access(dst, predicate, tags), src=access(src, predicate, tags),
         accumulate=accumulate, queue=queue)


def indirect_dma(dst: Tile, src: Tile, *, accumulate: bool = False, predicate=None, tags=None,
                 skip_out_of_bounds: bool = False) -> None:
    """A gather (src indexed by an index tile, one row per partition) or scatter (dst indexed)
    by DMA: `trnsim.isa.DmaIndirect`. A mask cuts the index tile's partitions as the data's."""
    from trnsim.isa.access import MAX_FREE_SIZE

    if dst._vector is not None and src._vector is not None:
        raise InvalidArgumentError("a DMA can index only one side with an index tile")
    indexed = "src" if src._vector is not None else "dst"
    side = src if indexed == "src" else dst
    index, step = side._vector
    trace = current_trace()
    index = trace.read_ready(index)
    index_view = Tile(trace, index._storage, (index._axes[0], type(index._axes[0])(1)),
                      index.dtype_spec, index._poffset, index._foffset, name=index.name)
    tags = tags if tags is not None else side.tags
    decl = trace.builder.program.tensors[side._storage.name]
    dtype = side.dtype_spec
    elements = decl.nbytes // dtype.itemsize
    cols = next(c for c in range(min(elements, MAX_FREE_SIZE), 0, -1) if elements % c == 0)
    extent = AccessPattern(memory=Memory.HBM, dtype=dtype, partitions=elements // cols,
                           partition_step=cols, dims=((1, cols),), tensor=decl.name)
    emit(DmaIndirect, dst=access(dst, predicate, tags), src=access(src, predicate, tags),
         index=access(index_view, predicate, (*tags[:1], None)), indexed=indexed, row_step=int(step),
         extent=extent, skip_out_of_bounds=skip_out_of_bounds, accumulate=accumulate)


def dma_transpose(dst: Tile, src: Tile, predicate=None) -> None:
    emit(DmaTranspose, dst=dst.access(), src=access(src, predicate))


def max8(dst: Tile, src: Tile, predicate=None) -> None:
    emit(Max8, dst=dst.access(), src=access(src, predicate))


def find_index8(dst: Tile, src: Tile, values: Tile, predicate=None) -> None:
    emit(FindIndex8, dst=dst.access(), src=access(src, predicate), values=values.access())


def match_replace8(dst: Tile, src: Tile, values: Tile, imm: float, index_dst: Tile | None,
                   predicate=None) -> None:
    emit(MatchReplace8, dst=dst.access(), src=access(src, predicate), values=values.access(),
         imm=float(imm), index_dst=index_dst.access() if index_dst is not None else None)


def stream_shuffle(dst: Tile, src: Tile, mask) -> None:
    emit(StreamShuffle, dst=dst.access(), src=src.access(), mask=tuple(int(m) for m in mask))
