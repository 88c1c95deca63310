"""Data movement: nl.load/store/load_transpose2d/copy/broadcast_to/atomic_rmw, and the copies and
fills that assignments turn into."""

from __future__ import annotations

import numpy as np

from trnsim.errors import InvalidArgumentError
from trnsim.isa import (
    DmaCopy,
    DmaTranspose,
    LoadStationary,
    Memory,
    Memset,
    MultiplyMoving,
    TensorCopy,
)
from trnsim.nki.isa import lowering
from trnsim.nki.operands import mask_of, resolve_dtype, tile_arg
from trnsim.nki.tile import Tile
from trnsim.nki.trace import api, current_trace
from trnsim.numerics import dtype as as_dtype


def _is_hbm(tile: Tile) -> bool:
    return tile._storage.memory is Memory.HBM


@api("nl.load")
def load(src, *, mask=None, dtype=None, **kwargs) -> Tile:
    """HBM -> SBUF by DMA; the result is an SBUF tile of src's shape (cast to dtype if given)."""
    src = tile_arg(src, "nl.load source")
    if not _is_hbm(src):
        raise InvalidArgumentError(f"nl.load reads HBM tensors; {src.name} is in {src.buffer} "
                                   f"(use nl.copy for on-chip copies)")
    predicate = mask_of(mask)
    out_dtype = resolve_dtype(dtype) or src.dtype_spec
    tags = src.tags
    trace = current_trace()

    def emit(dst: Tile, accumulate: bool = False) -> None:
        lowering.dma_copy(dst, src, predicate=predicate, tags=tags)

    return trace.defer(src.shape, out_dtype, emit, tags=tags)


@api("nl.store")
def store(dst, value, *, mask=None, **kwargs) -> None:
    """SBUF -> HBM by DMA (a PSUM value is first copied to SBUF, as the compiler does)."""
    if not isinstance(dst, Tile) or not _is_hbm(dst):
        raise InvalidArgumentError("nl.store writes an HBM tensor (dst must be an HBM tensor view)")
    trace = current_trace()
    trace._check_writable(dst)
    predicate = mask_of(mask)
    if isinstance(value, (int, float, np.number, bool)):
        # a constant (the docs: "effectively a memset"): fill an SBUF tile, then DMA it
        shape = dst.shape if len(dst.shape) >= 2 else (1, *dst.shape)
        staged = trace.allocate(shape, dst.dtype_spec, "sbuf", name="store_constant")
        trace.flush()
        fill(staged, float(value))
        value = staged if len(dst.shape) >= 2 else staged.reshape(*dst.shape)
    if not isinstance(value, Tile):
        raise InvalidArgumentError(f"nl.store stores a tile or a number; got {type(value).__name__}")
    value = tile_arg(value, "nl.store value")
    if value.buffer == "psum":
        staged = trace.allocate(value.shape, value.dtype_spec, "sbuf", name=f"{value.name}_sb")
        trace.emit(TensorCopy, dst=staged.access(predicate, value.tags),
                   src=value.access(predicate, value.tags))
        value = staged
    tags = dst.tags if any(t is not None for t in dst.tags) else value.tags
    trace.flush()
    lowering.dma_copy(dst, value, predicate=predicate, tags=tags)


@api("nl.load_transpose2d")
def load_transpose2d(src, *, mask=None, dtype=None, **kwargs) -> Tile:
    """HBM [R, C] -> SBUF [C, R] with a DMA transpose."""
    src = tile_arg(src, "nl.load_transpose2d source")
    if len(src.shape) != 2:
        raise InvalidArgumentError(f"nl.load_transpose2d needs a 2-D source; got {list(src.shape)}")
    predicate = mask_of(mask)
    trace = current_trace()
    rows, cols = src.shape

    def emit(dst: Tile, accumulate: bool = False) -> None:
        trace.emit_now(DmaTranspose, dst=dst.access(predicate), src=src.access(predicate))

    return trace.defer((cols, rows), resolve_dtype(dtype) or src.dtype_spec, emit)


@api("nl.copy")
def copy(src, *, mask=None, dtype=None, **kwargs) -> Tile:
    src = tile_arg(src, "nl.copy source")
    predicate = mask_of(mask)
    trace = current_trace()
    tags = src.tags

    def emit(dst: Tile, accumulate: bool = False) -> None:
        copy_into(dst, src, predicate, tags)

    return trace.defer(src.shape, resolve_dtype(dtype) or src.dtype_spec, emit, tags=tags)


def copy_into(dst: Tile, src: Tile, predicate=None, tags=None) -> None:
    """dst[...] = src: TensorCopy on chip, DMA when HBM is involved."""
    trace = current_trace()
    src = trace.read_ready(src)
    tags = tags if tags is not None else src.tags
    dst_ap, src_ap = dst.access(predicate, tags), src.access(predicate, tags)
    if _is_hbm(dst) or _is_hbm(src):
        if src_ap.memory is Memory.PSUM:
            staged = trace.allocate(src.shape, src.dtype_spec, "sbuf", name=f"{src.name}_sb")
            trace.emit_now(TensorCopy, dst=staged.access(predicate, tags), src=src_ap)
            src_ap = staged.access(predicate, tags)
        trace.emit_now(DmaCopy, dst=dst_ap, src=src_ap)
    else:
        trace.emit_now(TensorCopy, dst=dst_ap, src=src_ap)


def fill(dst: Tile, value: float) -> None:
    if _is_hbm(dst):
        raise InvalidArgumentError("filling an HBM tensor with a constant is not supported; fill an "
                                   "SBUF tile and nl.store it")
    current_trace().emit_now(Memset, dst=dst.access(), value=float(value))


@api("nl.broadcast_to")
def broadcast_to(src, shape, **kwargs) -> Tile:
    """Broadcast along the free axes (a stride-0 copy) and/or from one partition to many (a
    TensorE matmul with a row of ones, the standard way to cross partitions: NKI's own
    ``nc_matmul(ones, x, is_stationary_onezero=True)``, arch guide "Alternative Use Case").

    A partition broadcast left for the compiler to place stays in PSUM where TensorE wrote it
    when it fits (fp32, at most PSUM's free size): Vector/ScalarE read one PSUM operand at no
    cost beyond their SBUF rate (tensor_tensor is then N, not 2N, cycles: [L] nki.isa
    tensor_tensor), so the compiler does not copy it to SBUF first. The row of ones is made
    once per kernel (`ones_row`)."""
    src = tile_arg(src, "nl.broadcast_to source")
    shape = tuple(int(s) for s in shape)
    if len(shape) != len(src.shape) or any(s != t and s != 1 for s, t in zip(src.shape, shape, strict=True)):
        raise InvalidArgumentError(f"cannot broadcast {list(src.shape)} to {list(shape)}")
    trace = current_trace()
    from trnsim.nki.tile import Axis

    def emit(dst: Tile, accumulate: bool = False) -> None:
        axes = tuple(Axis(n, a.pstep, a.fstep if s == n else 0, a.tag)
                     for a, s, n in zip(src._axes, src.shape, shape, strict=True))
        if src.shape[0] == shape[0] or trace.core.partitions == 1:
            wide = Tile(trace, src._storage, axes, src.dtype_spec, src._poffset, src._foffset)
            trace.emit_now(TensorCopy, dst=dst.access(), src=wide.access())
            return
        if src.shape[0] != 1:
            raise InvalidArgumentError("nl.broadcast_to can broadcast the partition axis from size 1 only")
        flat_src = src.access()
        if flat_src.partitions != 1 or len(shape) != 2:
            raise InvalidArgumentError("partition broadcast takes a [1, F] tile")
        ones = ones_row(trace, shape[0], src.dtype_spec)
        trace.emit_now(LoadStationary, src=ones.access())
        width = trace.core.tensor.max_moving_free
        direct = _matmul_writable(trace, dst, width)
        for start in range(0, shape[1], width):
            n = min(width, shape[1] - start)
            staged = dst[:, start:start + n] if direct else \
                trace.allocate((shape[0], n), "float32", "psum", name="bcast")
            moving = Tile(trace, src._storage, (Axis(1, 1, 0), Axis(n, 0, src._axes[1].fstep)),
                          src.dtype_spec, src._poffset, src._foffset + start * src._axes[1].fstep)
            trace.emit_now(MultiplyMoving, dst=staged.access(), moving=moving.access(),
                           stationary=ones.access(), stationary_onezero=True)
            if not direct:
                trace.emit_now(TensorCopy, dst=dst[:, start:start + n].access(), src=staged.access())
                trace.release(staged)

    in_psum = (trace.compiler_psum_allowed and src.shape[0] == 1 and shape[0] > 1
               and len(shape) == 2 and trace.core.partitions > 1
               and as_dtype(src.dtype_spec).name == "float32"
               and shape[1] <= trace.core.max_free_elements_psum
               and shape[1] * 4 <= trace.core.psum_bytes_per_partition)
    if in_psum:
        return trace.defer(shape, src.dtype_spec, emit, buffer="psum", fallback="sbuf")
    return trace.defer(shape, src.dtype_spec, emit)


def ones_row(trace, partitions: int, dtype) -> Tile:
    """A [1, partitions] SBUF row of ones, the stationary of partition broadcasts: made once per
    kernel (a compiler constant) and kept for the rest of it, not memset before every use."""
    key = ("ones", partitions, as_dtype(dtype).name)
    ones = trace.constants.get(key)
    if ones is None or ones._storage.freed:
        ones = trace.allocate((1, partitions), dtype, "sbuf", name="ones")
        for scope in trace.scopes:  # a kernel-wide constant, not freed with a loop iteration
            if ones._storage in scope.tiles:
                scope.tiles.remove(ones._storage)
        trace.emit_now(Memset, dst=ones.access(), value=1.0)
        trace.constants[key] = ones
    return trace.read_ready(ones)


def _matmul_writable(trace, dst: Tile, width: int) -> bool:
    """Can TensorE write the broadcast straight into `dst`: a dense fp32 PSUM tile whose every
    `width`-column chunk lies within one PSUM bank (a matmul writes one bank)."""
    ap = dst.access()
    if ap.memory is not Memory.PSUM or ap.dtype.name != "float32" or not ap.is_contiguous:
        return False
    bank = trace.core.psum_bank_bytes_per_partition
    lo, hi = ap.byte_span()
    return all((lo + s * 4) // bank == (min(lo + (s + width) * 4, hi) - 1) // bank
               for s in range(0, (hi - lo) // 4, width))


@api("nl.atomic_rmw")
def atomic_rmw(dst, value, op, *, mask=None, **kwargs) -> None:
    """dst (HBM) op= value, by a DMA read-modify-write (add only, as on hardware)."""
    from trnsim.isa import alu_op

    if alu_op(op).name != "add":
        raise InvalidArgumentError(f"nl.atomic_rmw supports op=add only; got {alu_op(op).name}")
    if not isinstance(dst, Tile) or not _is_hbm(dst):
        raise InvalidArgumentError("nl.atomic_rmw updates an HBM tensor")
    value = tile_arg(value, "nl.atomic_rmw value")
    predicate = mask_of(mask)
    trace = current_trace()
    trace._check_writable(dst)
    trace.emit(DmaCopy, dst=dst.access(predicate, value.tags), src=value.access(predicate, value.tags),
               accumulate=True)
