"""Destination-first DMA and cross-core instructions: dma_copy, dma_transpose, dma_compute,
sendrecv (LNC pairs) and core_barrier."""

from __future__ import annotations

from trnsim.errors import InvalidArgumentError, UnsupportedError
from trnsim.isa import AccessPattern, CoreBarrier, DmaCompute, DmaIndirect, Memory, SendRecv, alu_op
from trnsim.isa.access import MAX_FREE_SIZE
from trnsim.nki.current.isa.calls import dst_arg, engine_arg, nisa_call, src_arg
from trnsim.nki.current.isa.enums import dma_engine as dma_engines
from trnsim.nki.isa import lowering
from trnsim.nki.trace import current_trace


def _oob_skip(oob_mode) -> bool:
    return getattr(oob_mode, "name", oob_mode) in ("skip", 1)


@nisa_call("nisa.dma_copy")
def dma_copy(dst, src, priority=None, oob_mode=0, dge_mode=0, engine=None, name=None):
    """dst = src by DMA (cast if the dtypes differ). With ``oob_mode=skip`` a register-addressed
    access that falls outside its tensor is skipped instead of raising."""
    target, source = dst_arg(dst), src_arg(src, "src")
    if _oob_skip(oob_mode):
        target, source = _skipping(target), _skipping(source)
    if source._vector is not None or target._vector is not None:
        _indirect_copy(target, source, _oob_skip(oob_mode))
        return
    lowering.dma_copy(target, source)


def _rows_of(elements: int, shape: tuple[int, ...]) -> tuple[int, int]:
    """The whole tensor as rows x columns with columns inside a uint16 size field."""
    cols = shape[-1] if shape and 0 < shape[-1] <= MAX_FREE_SIZE else 1
    if elements % cols or cols == 1:
        cols = next(c for c in range(min(elements, MAX_FREE_SIZE), 0, -1) if elements % c == 0)
    return elements // cols, cols


def _indirect_copy(target, source, skip: bool) -> None:
    """Gather (src indexed per partition) or scatter (dst indexed) by DMA."""
    if source._vector is not None and target._vector is not None:
        raise InvalidArgumentError("nisa.dma_copy: only one side can use a vector_offset")
    indexed = "src" if source._vector is not None else "dst"
    side = source if indexed == "src" else target
    index, step = side._vector
    index = src_arg(index, "vector_offset")
    trace = current_trace()
    decl = trace.builder.program.tensors[side._storage.name]
    dtype = side.dtype_spec
    rows, cols = _rows_of(decl.nbytes // dtype.itemsize, decl.shape)
    extent = AccessPattern(memory=Memory.HBM, dtype=dtype, partitions=rows, partition_step=cols,
                           dims=((1, cols),), tensor=decl.name)
    trace.allow_vector_offset = True
    try:
        trace.emit_now(DmaIndirect, dst=target.access(), src=source.access(), index=index.access(),
                       indexed=indexed, row_step=int(step), extent=extent, skip_out_of_bounds=skip)
    finally:
        trace.allow_vector_offset = False


def _skipping(tile):
    """A register-addressed view whose out-of-bounds accesses are skipped (oob_mode.skip)."""
    if tile._dynamic is None:
        return tile
    register, step, _ = tile._dynamic
    view = tile._with(tile._axes)
    view._dynamic = (register, step, True)
    return view


@nisa_call("nisa.dma_transpose")
def dma_transpose(dst, src, axes=None, priority=None, dge_mode=0, oob_mode=0, name=None):
    source = src_arg(src, "src")
    if source.ndim != 2 or (axes is not None and tuple(axes) != (1, 0)):
        raise UnsupportedError("nisa.dma_transpose: trnsim supports 2-D transposes (axes (1, 0))")
    lowering.dma_transpose(dst_arg(dst), source)


@nisa_call("nisa.dma_compute")
def dma_compute(dst, srcs, reduce_op, scales=None, unique_indices=True, oob_mode=0, name=None):
    if alu_op(reduce_op).name != "add":
        raise InvalidArgumentError(f"nisa.dma_compute: reduce_op must be nl.add; got {reduce_op}")
    if scales is not None and any(float(s) != 1.0 for s in scales):
        raise InvalidArgumentError("nisa.dma_compute: scales must all be 1.0")
    current_trace().emit_now(DmaCompute, dst=dst_arg(dst).access(),
                             srcs=tuple(src_arg(s, "srcs").access() for s in srcs))


@nisa_call("nisa.sendrecv")
def sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id, dma_engine=dma_engines.dma,
             name=None):
    """Send src to core `send_to_rank`'s dst while receiving core `recv_from_rank`'s src into
    dst (the physical cores of a logical NeuronCore, LNC=2)."""
    source, target = src_arg(src, "src"), dst_arg(dst)
    for tile, what in ((source, "src"), (target, "dst")):
        if tile._storage.memory is not Memory.SBUF:
            raise InvalidArgumentError(f"nisa.sendrecv: {what} must be in SBUF")
    engine = "gpsimd" if getattr(dma_engine, "name", dma_engine) == "gpsimd_dma" else "sync"
    current_trace().emit_now(SendRecv, src=source.access(), dst=target.access(),
                             send_to=int(send_to_rank), recv_from=int(recv_from_rank),
                             pipe=int(pipe_id), engine=engine)


@nisa_call("nisa.core_barrier")
def core_barrier(data, cores, engine="gpsimd", name=None):
    tile = src_arg(data, "data")
    current_trace().emit_now(CoreBarrier, data=tile.access(), cores=tuple(int(c) for c in cores),
                             engine=engine_arg(engine) or "gpsimd")
