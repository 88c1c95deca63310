"""k.gather: rows or elements picked by indices known only at run time.

Rows (embedding, index_select, index on leading dims) use the ISA's indirect DMA (`DmaIndirect`,
what NKI's ``dma_copy`` with a ``vector_offset`` lowers to): 128 indices are DMAed into an SBUF
[128, 1] column, then one instruction moves row ``index[p]`` of the table to output row p,
HBM -> HBM, one descriptor per row. Nothing about the indices is known when the program is built,
and the timing does not depend on their values.

Elements (torch.gather) along the last axis load each row of x onto a partition and pick with
GpSimd's per-partition gather (`NGather`, nisa.nc_n_gather); other axes are first read through
a view that makes the gathered axis the last (strided DMA).

Indices must be an integer dtype the core supports (int32/uint32/... on NeuronCore-v2, which has
no int64: the compiler narrows torch's int64 indices). Boolean masks (data-dependent shapes) are
not supported.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from trnsim.errors import InvalidArgumentError, UnsupportedError
from trnsim.isa import AccessPattern, DmaIndirect, Memory, NGather
from trnsim.isa.access import MAX_FREE_SIZE  # an access pattern dimension's size is a uint16
from trnsim.kernels.layout import (
    P,
    ceil_div,
    hbm_strides,
    hbm_view,
    kernel_scope,
    merged,
    numel,
    row_problems,
    tiles,
)
from trnsim.nki import language as nl
from trnsim.nki.tile import Tile
from trnsim.nki.trace import current_trace

KINDS = ("embedding", "gather", "index", "index_select")


def gather(out: Tile, table: Tile, *indices: Tile, kind: str, axis: int = 0,
           dims: Sequence[int] = ()) -> None:
    """See the module docstring and the contract in `trnsim.kernels`."""
    if kind not in KINDS:
        raise InvalidArgumentError(f"gather kind {kind!r} not in {KINDS}")
    if not indices:
        raise InvalidArgumentError("gather needs an index tensor")
    if any(not _is_int(i) for i in indices):
        raise UnsupportedError(f"gather with {[i.dtype_spec.name for i in indices]} indices: only "
                               f"integer index tensors (boolean masks give data-dependent shapes)")
    with kernel_scope(f"gather {kind}"):
        if kind == "embedding":
            _rows(out, table, indices[0], 0)
        elif kind == "index_select":
            _rows(out, table, indices[0], axis % table.ndim)
        elif kind == "gather":
            _elements(out, table, indices[0], axis % table.ndim)
        else:
            _index(out, table, indices, tuple(d % table.ndim for d in dims))


def _is_int(tile: Tile) -> bool:
    dt = tile.dtype_spec
    return dt.is_int and dt.name != "bool_"


def _rows(out: Tile, table: Tile, index: Tile, axis: int) -> None:
    """out = take(table, index.ravel(), axis): for each leading index of table before `axis`,
    rows of the trailing block are gathered by indirect DMA."""
    lead = table.shape[:axis]
    row_shape = table.shape[axis + 1:]
    count = numel(index.shape)
    width = numel(row_shape)
    flat_index = merged(index, 0) if index.ndim else hbm_view(index, (1, 1), (0, 1))
    if flat_index is None or hbm_strides(flat_index)[1] not in (0, 1):
        raise InvalidArgumentError("gather: the index tensor must be dense")
    # out viewed as [*lead, count, width]
    out_view = hbm_view(out, (*lead, count, width), _dense_strides((*lead, count, width)))
    step = hbm_strides(table)[axis]
    row = merged(hbm_view(table, (1, *row_shape), (0, *hbm_strides(table)[axis + 1:])), 1) \
        if row_shape else hbm_view(table, (1, 1), (0, 1))
    if row is None or (width > 1 and hbm_strides(row)[1] != 1):
        raise UnsupportedError("gather: table rows must be contiguous")
    for i0, ir in tiles(count, P):
        with kernel_scope("index block"):
            ids = nl.ndarray((P, 1), dtype=index.dtype, buffer=nl.sbuf)
            ids[0:ir, :] = nl.load(hbm_view(flat_index, (ir, 1), (1, 1), offset=i0))
            for key in (np.ndindex(*lead) if lead else [()]):
                offset = sum(int(k) * s for k, s in zip(key, hbm_strides(table), strict=False))
                dst = out_view[tuple(int(k) for k in key)][i0:i0 + ir, :] if key else \
                    out_view[i0:i0 + ir, :]
                for c0, cw in tiles(width, MAX_FREE_SIZE):  # rows wider than a pattern's dim
                    src = hbm_view(table, (ir, cw), (0, 1), offset=offset + c0)
                    _indirect(dst[:, c0:c0 + cw], src, ids[0:ir, :], table, step)


def _indirect(dst: Tile, src: Tile, ids: Tile, table: Tile, step: int) -> None:
    """dst[p, :] = table elements src_offset + ids[p] * step + (0..width-1)."""
    trace = current_trace()
    trace.flush()
    rows = ids.shape[0]
    trace.emit_now(DmaIndirect, dst=_rows_access(dst, rows), src=_rows_access(src, rows),
                   index=ids.access(), indexed="src", row_step=int(step), extent=_whole(table))


def scatter(out: Tile, x: Tile, values: Tile, index: Tile, *, accumulate: bool = False,
            fill: float | None = None) -> None:
    """out = x, then rows index[i] of axis 0 set to values[i] (`accumulate`: values[i] added to
    them, every repeat of an index summed): a copy, and per 128 indices one indirect DMA moving
    value rows HBM -> HBM into out (the index side, as gathers read; accumulating, the DMA
    engines read, add and write each row: ``dst_rmw_op=add``).

    `fill`: every element of x is this value (a gradient's zeros): out is written from one
    memset SBUF tile instead of reading x. This is an embedding's backward as the DMA engines do
    it: 2048 token rows added into the table's gradient, not a [V, 2048] one-hot and a matmul."""
    from trnsim.kernels.elementwise import copy
    from trnsim.kernels.elementwise import fill as fill_hbm
    from trnsim.kernels.layout import broadcast_to_shape

    if not _is_int(index):
        raise InvalidArgumentError(f"scatter: indices must be integers, got {index.dtype}")
    width = numel(out.shape[1:])
    count = numel(index.shape)
    flat_index = merged(index, 0) if index.ndim else hbm_view(index, (1, 1), (0, 1))
    if flat_index is None or hbm_strides(flat_index)[1] not in (0, 1):
        raise InvalidArgumentError("scatter: the index tensor must be dense")
    rows = merged(broadcast_to_shape(values, (*index.shape, *out.shape[1:])), index.ndim) \
        if index.ndim else hbm_view(broadcast_to_shape(values, tuple(out.shape[1:])),
                                    (1, width), (0, 1))
    with kernel_scope("scatter"):
        if rows is None or (width > 1 and hbm_strides(rows)[1] != 1) or (
                accumulate and rows.dtype_spec != out.dtype_spec):
            # dense rows in out's dtype (the DMA engines add in the destination's type)
            dense = nl.ndarray((count, width), dtype=out.dtype if accumulate else values.dtype,
                               buffer=nl.hbm)
            copy(dense, broadcast_to_shape(values, (*index.shape, *out.shape[1:])))
            rows = dense
        if fill is not None:
            fill_hbm(out, fill)
        else:
            copy(out, x)
        step = width
        for i0, ir in tiles(count, P):
            with kernel_scope("index block"):
                ids = nl.ndarray((P, 1), dtype=index.dtype, buffer=nl.sbuf)
                ids[0:ir, :] = nl.load(hbm_view(flat_index, (ir, 1), (1, 1), offset=i0))
                for c0, cw in tiles(width, MAX_FREE_SIZE):
                    _indirect_write(hbm_view(out, (ir, cw), (0, 1), offset=c0),
                                    rows[i0:i0 + ir, c0:c0 + cw], ids[0:ir, :], out, step,
                                    accumulate)


def _indirect_write(dst: Tile, src: Tile, ids: Tile, table: Tile, step: int,
                    accumulate: bool = False) -> None:
    """table elements dst_offset + ids[p] * step + (0..width-1) = src[p, :] (+= with
    `accumulate`)."""
    trace = current_trace()
    trace.flush()
    trace.emit_now(DmaIndirect, dst=_rows_access(dst, ids.shape[0]),
                   src=_rows_access(src, ids.shape[0]), index=ids.access(), indexed="dst",
                   row_step=int(step), extent=_whole(table), accumulate=accumulate)


def _whole(table: Tile) -> AccessPattern:
    """The whole HBM tensor behind `table`, as [total / run rows, run] (one free dim of `total`
    elements would break the 65535 free-size limit of an access pattern)."""
    decl = current_trace().builder.program.tensors[table._storage.name]
    dtype = table.dtype_spec
    total = decl.nbytes // dtype.itemsize
    run = _largest_divisor(total, MAX_FREE_SIZE)
    return AccessPattern(memory=Memory.HBM, dtype=dtype, partitions=total // run,
                         partition_step=run, dims=((1, run),), tensor=decl.name)


def _rows_access(tile: Tile, rows: int) -> AccessPattern:
    """`tile` as an HBM pattern of `rows` partitions. HBM patterns drop size-1 axes, so a single
    gathered row [1, width] would otherwise read as `width` partitions of one element."""
    ap = tile.access()
    if rows != 1 or ap.partitions == 1:
        return ap
    inner = () if ap.dims == ((1, 1),) else ap.dims
    return dataclasses.replace(ap, partitions=1, partition_step=0,
                               dims=((ap.partition_step, ap.partitions), *inner))


def _largest_divisor(n: int, limit: int) -> int:
    for d in range(min(n, limit), 0, -1):
        if n % d == 0:
            return d
    return 1


def _dense_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def _elements(out: Tile, x: Tile, index: Tile, axis: int) -> None:
    """out = take_along_axis(x, index, axis): rows of x on partitions, NGather along the row."""
    rank = x.ndim
    order = [i for i in range(rank) if i != axis] + [axis]

    def moved(t: Tile) -> Tile:
        st = hbm_strides(t)
        return hbm_view(t, [t.shape[i] for i in order], [st[i] for i in order])

    xs, ids, os_ = moved(x), moved(index), moved(out)
    lead = xs.shape[:-1]
    if tuple(ids.shape[:-1]) != tuple(lead):
        raise UnsupportedError(f"gather: index {list(index.shape)} must match x "
                               f"{list(x.shape)} outside axis {axis} (no partial index ranges)")
    length, picks = xs.shape[-1], ids.shape[-1]
    for x2, i2, o2 in row_problems([xs, ids, os_], rank - 1):
        _element_rows(out, x2, i2, o2, length, picks)


def _element_rows(out: Tile, x2: Tile, i2: Tile, o2: Tile, length: int, picks: int) -> None:
    rows = x2.shape[0]
    for t in nl.affine_range(ceil_div(rows, P)):
        r0, rr = t * P, min(P, rows - t * P)
        data = nl.ndarray((P, length), dtype=x2.dtype, buffer=nl.sbuf)
        data[0:rr] = nl.load(x2[r0:r0 + rr, :])
        where = nl.ndarray((P, picks), dtype=nl.uint32, buffer=nl.sbuf)
        where[0:rr] = nl.load(i2[r0:r0 + rr, :])
        picked = nl.ndarray((P, picks), dtype=x2.dtype, buffer=nl.sbuf)
        trace = current_trace()
        trace.flush()
        trace.emit_now(NGather, dst=picked[0:rr].access(), src=data[0:rr].access(),
                       indices=where[0:rr].access())
        stage = nl.ndarray((P, picks), dtype=out.dtype, buffer=nl.sbuf)
        stage[0:rr] = nl.copy(picked[0:rr], dtype=out.dtype)
        nl.store(o2[r0:r0 + rr, :], value=stage[0:rr])


def _index(out: Tile, x: Tile, indices: Sequence[Tile], dims: tuple[int, ...]) -> None:
    """x[..., i0, i1, ...] with integer index tensors on `dims` (numpy advanced indexing):
    one index tensor is an index_select; several on adjacent leading dims become one flat row
    index (sum of index * stride, exact in fp32 below 2^24) for an indirect DMA."""
    if len(indices) == 1:
        d = dims[0]
        shape = indices[0].shape
        # numpy puts the index's shape in place of dim d
        flat_out = hbm_view(out, (*x.shape[:d], numel(shape), *x.shape[d + 1:]),
                            _dense_strides((*x.shape[:d], numel(shape), *x.shape[d + 1:])))
        _rows(flat_out, x, indices[0], d)
        return
    if tuple(dims) != tuple(range(len(dims))):
        raise UnsupportedError(f"gather kind 'index' on dims {dims}: several index tensors are "
                               f"supported on the leading dims only")
    shape = indices[0].shape
    if any(tuple(i.shape) != tuple(shape) for i in indices):
        raise UnsupportedError("gather kind 'index': index tensors must have one shape")
    count = numel(shape)
    strides = hbm_strides(x)
    width = numel(x.shape[len(dims):])
    out_view = hbm_view(out, (count, width), (width, 1))
    import numpy as _np

    for i0, ir in tiles(count, P):
        with kernel_scope("index block"):
            flat = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            for j, (tile, d) in enumerate(zip(indices, dims, strict=True)):
                part = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
                part[0:ir] = nl.load(hbm_view(merged(tile, 0), (ir, 1), (1, 1), offset=i0))
                scaled = nl.multiply(part[0:ir], float(strides[d]), dtype=nl.float32)
                flat[0:ir] = scaled if j == 0 else nl.add(flat[0:ir], scaled)
            ids = nl.ndarray((P, 1), dtype=nl.int32, buffer=nl.sbuf)
            ids[0:ir] = nl.copy(flat[0:ir], dtype=nl.int32)
            for c0, cw in tiles(width, MAX_FREE_SIZE):  # rows wider than a pattern's dim
                src = hbm_view(x, (ir, cw), (0, 1), offset=c0)
                _indirect(out_view[i0:i0 + ir, c0:c0 + cw], src, ids[0:ir], x, 1)
    del _np
