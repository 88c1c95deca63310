"""k.elementwise and the data-movement kernels: copy (materialise a view), concat, pad.

Element-wise work is cut into 2-D [rows, columns] problems (`layout.problems_2d`): dense
operands become [128, numel/128] so every partition streams one contiguous run, broadcast
operands keep rows on partitions with their stride-0 axes. Per 128-row block and column chunk:
one DMA per operand into SBUF (a stride-0 column is broadcast on chip), the fused `program` (the
lowering's nl calls: ScalarE activations, VectorE/GpSimd arithmetic), a cast into the output
dtype, one DMA out. Blocks allocated inside loop iterations rotate, so loads, compute and
stores of consecutive blocks overlap.

copy/concat/pad move data without compute where they can: one HBM -> SBUF -> HBM round trip per
block (DMA engines do not compute, and a direct HBM -> HBM descriptor stream would read with the
same strides). Transposing views (a stride-1 axis that is not the last) go through TensorE
transposes instead of element-granular DMA descriptors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from trnsim.errors import InvalidArgumentError
from trnsim.kernels.layout import (
    TILED_FOR,
    Evictor,
    P,
    broadcast_to_shape,
    column_chunk,
    hbm_strides,
    hbm_view,
    itemsize,
    kernel_scope,
    load_block,
    numel,
    problems_2d,
    tiles,
)
from trnsim.nki import isa as nisa
from trnsim.nki import language as nl
from trnsim.nki.tile import Tile

Program = Callable[[Sequence[Tile]], Tile]
# A transposing copy's loads and stores move runs this long per partition: the DMA guide's size
# from which transfers are efficient (hardware.md section 6, fact 7).
TRANSPOSE_RUN_BYTES = TILED_FOR.dma.efficient_bytes_per_partition


def elementwise(out: Tile, inputs: Sequence[Tile], *, program: Program) -> None:
    """out = program(inputs broadcast to out), block by block."""
    views = [broadcast_to_shape(t, out.shape) for t in inputs]
    with kernel_scope("elementwise"):
        _blocked(out, views, lambda blocks: program(blocks))


def _blocked(out: Tile, views: Sequence[Tile], compute: Callable[[list[Tile]], Tile] | None,
             evictor: Evictor | None = None) -> None:
    """For each 2-D block: load every view, compute (or copy the single view), store."""
    evictor = evictor or Evictor()
    chunk = column_chunk(max(itemsize(out.dtype), 4), len(views) + 2)
    for problem in problems_2d(out.shape, [out, *views], banded=True):
        if problem[0].ndim == 3:
            _banded(problem[0], problem[1:], compute, out.dtype, chunk)
            continue
        out2, ins2 = problem[0], problem[1:]
        rows, cols = out2.shape
        bands = rows // P
        if compute is not None and bands > 1 and 2 * cols <= chunk:
            # narrow rows (attention's [b*h*s, s] scores with a per-row statistic): each
            # partition takes `bands` consecutive rows, so one DMA per operand moves several
            # 128-row tiles instead of one
            banded = [_rows_per_partition(v, bands) for v in (out2, *ins2)]
            _banded(banded[0], banded[1:], compute, out.dtype, chunk)
            if rows == P * bands:
                continue
            out2, ins2 = out2[P * bands:rows, :], [v[P * bands:rows, :] for v in ins2]
            rows = out2.shape[0]
        blocks = [(r0, rr, c0, cw) for r0, rr in tiles(rows, P) for c0, cw in tiles(cols, chunk)]
        for b in nl.affine_range(len(blocks)):
            r0, rr, c0, cw = blocks[b]
            loaded = []
            for view in ins2:
                tile = nl.ndarray((P, cw), dtype=view.dtype, buffer=nl.sbuf)
                load_block(tile[0:rr], view[r0:r0 + rr, c0:c0 + cw])
                loaded.append(tile[0:rr])
            stage = nl.ndarray((P, cw), dtype=out.dtype, buffer=nl.sbuf)
            if compute is None:
                stage[0:rr] = nl.load(ins2[0][r0:r0 + rr, c0:c0 + cw])
            else:
                result = compute(loaded)
                if isinstance(result, Tile):
                    stage[0:rr] = result
                else:  # a program that folded to a constant
                    stage[0:rr] = nisa.memset((rr, cw), float(result), out.dtype)
            nl.store(out2[r0:r0 + rr, c0:c0 + cw], value=stage[0:rr])


def _rows_per_partition(view: Tile, bands: int) -> Tile:
    """Rows 0..128*bands of a [rows, cols] view as [128, bands, cols]: partition p holds rows
    p*bands .. p*bands+bands-1."""
    row_step, col_step = hbm_strides(view)
    return hbm_view(view, (P, bands, view.shape[1]), (bands * row_step, row_step, col_step))


def _banded(out3: Tile, ins3: Sequence[Tile], compute, dtype, chunk: int) -> None:
    """One [rows, a, b] problem: blocks of whole b-runs, each one DMA per operand with two free
    axes, computed on as [rows, a' * b] tiles."""
    rows, a_size, b_size = out3.shape
    per = max(1, chunk // b_size)
    blocks = [(r0, rr, a0, aw) for r0, rr in tiles(rows, P) for a0, aw in tiles(a_size, per)]
    for i in nl.affine_range(len(blocks)):
        r0, rr, a0, aw = blocks[i]
        cw = aw * b_size
        stage = nl.ndarray((P, cw), dtype=dtype, buffer=nl.sbuf)
        if compute is None:  # a copy: DMA in and out
            load_block(stage[0:rr], ins3[0][r0:r0 + rr, a0:a0 + aw, :])
        else:
            loaded = []
            for view in ins3:
                tile = nl.ndarray((P, cw), dtype=view.dtype, buffer=nl.sbuf)
                load_block(tile[0:rr], view[r0:r0 + rr, a0:a0 + aw, :])
                loaded.append(tile[0:rr])
            result = compute(loaded)
            if isinstance(result, Tile):
                stage[0:rr] = result
            else:
                stage[0:rr] = nisa.memset((rr, cw), float(result), dtype)
        nl.store(out3[r0:r0 + rr, a0:a0 + aw, :], value=stage[0:rr].reshape((rr, aw, b_size)))


def copy(out: Tile, x: Tile) -> None:
    """out = x (materialise a strided view). A view whose stride-1 axis is not the last is a
    transpose: it goes through TensorE; anything else is DMA with x's access pattern. With
    another shape (same element count) it is a reshape in row-major element order: both sides
    are viewed in the shapes' common refinement, or, if there is none ([6, 4] vs [4, 6] of a
    strided view), x is first made dense in an internal HBM tensor."""
    if numel(x.shape) != numel(out.shape):
        raise InvalidArgumentError(f"copy: view {list(x.shape)} and output {list(out.shape)} "
                                   f"hold different numbers of elements")
    if tuple(x.shape) != tuple(out.shape):
        with kernel_scope("reshape copy"):
            if _unit_stride_axis(x) is not None and not x.dtype_spec.is_int:
                # a transposed view: transpose it once in its own shape (128 x 128 blocks), then
                # reshape the dense result; refined first, the transpose would run on the
                # refinement's small blocks (ConvBERT's [2, 200, 1728] -> [1200, 64, 9]: 3072
                # instructions instead of 230)
                dense = nl.ndarray(tuple(x.shape), dtype=x.dtype, buffer=nl.hbm)
                copy(dense, x)
                x = dense
            refined = _refine(tuple(x.shape), tuple(out.shape))
            if refined is None:
                dense = nl.ndarray(tuple(x.shape), dtype=x.dtype, buffer=nl.hbm)
                copy(dense, x)
                x = hbm_view(dense, (numel(x.shape),), (1,))  # one axis refines with anything
                refined = _refine(tuple(x.shape), tuple(out.shape))
            copy(_split(out, refined), _split(x, refined))
        return
    with kernel_scope("copy"):
        axis = _unit_stride_axis(x)
        if axis is not None and out.ndim >= 2 and not x.dtype_spec.is_int:
            # (integers keep every bit through DMA; a TensorE transpose passes through fp32)
            out, x = _coalesced(out, x)
            axis = _unit_stride_axis(x)
            if axis is not None and out.ndim >= 2:
                _transposing_copy(out, x, axis)
                return
        _blocked(out, [x], None)


def _coalesced(out: Tile, x: Tile) -> tuple[Tile, Tile]:
    """`out` and `x` (HBM views of one shape) with each run of adjacent axes that both step
    through as one axis merged, and unit axes dropped: a transpose's blocks then span the
    merged axis (ViT's patch gradient [64, 14, 14, 768] read 14 at a time along a [64, 768, 196]
    buffer becomes [64, 196, 768]: 128-wide blocks, not 14-wide)."""
    so, sx = hbm_strides(out), hbm_strides(x)
    shape: list[int] = []
    steps_o: list[int] = []
    steps_x: list[int] = []
    for size, o, s in zip(out.shape, so, sx, strict=True):
        if size == 1:
            continue
        if shape and steps_o[-1] == o * size and steps_x[-1] == s * size:
            shape[-1] *= size
            steps_o[-1], steps_x[-1] = o, s
        else:
            shape.append(size)
            steps_o.append(o)
            steps_x.append(s)
    if len(shape) == out.ndim:
        return out, x
    return hbm_view(out, shape, steps_o), hbm_view(x, shape, steps_x)


def _refine(a: tuple[int, ...], b: tuple[int, ...]) -> list[list[int]] | None:
    """Per axis of `a`, its factors in the common refinement of shapes a and b (row-major), or
    None when an axis boundary of one falls inside an axis of the other unevenly."""
    a, b = [s for s in a if s != 1] or [1], [s for s in b if s != 1] or [1]
    i = j = 0
    ra, rb = a[0], b[0]
    factors: list[list[int]] = [[] for _ in a]
    while i < len(a) and j < len(b):
        m = min(ra, rb)
        if max(ra, rb) % m:
            return None
        factors[i].append(m)
        ra, rb = ra // m, rb // m
        if ra == 1:
            i += 1
            ra = a[i] if i < len(a) else 1
        if rb == 1:
            j += 1
            rb = b[j] if j < len(b) else 1
    return factors


def _split(t: Tile, factors_of_a: list[list[int]]) -> Tile:
    """`t` viewed in the refined shape (its non-unit axes split into the refinement's factors,
    matched by element count)."""
    sizes = [f for group in factors_of_a for f in group]
    axes = [(size, step) for size, step in zip(t.shape, hbm_strides(t), strict=True) if size != 1]
    shape, strides = [], []
    k = 0
    for size, step in axes or [(1, 1)]:
        parts, total = [], 1
        while total < size:
            parts.append(sizes[k])
            total *= sizes[k]
            k += 1
        inner = step
        part_strides = []
        for part in reversed(parts):
            part_strides.append(inner)
            inner *= part
        shape += parts
        strides += list(reversed(part_strides))
    return hbm_view(t, shape, strides)


def _unit_stride_axis(x: Tile) -> int | None:
    """The axis a transposing copy reads contiguously, or None when x is not a transpose: no
    stride-1 axis, or its last axis of size > 1 already has stride 1 (rows are contiguous,
    even if an earlier axis also steps by 1, as a sliding window's does)."""
    strides = hbm_strides(x)
    moving = [(i, step) for i, (size, step) in enumerate(zip(x.shape, strides, strict=True))
              if size > 1]
    if not moving or moving[-1][1] == 1:
        return None
    return next((i for i, step in moving if step == 1), None)


def _transposing_copy(out: Tile, x: Tile, axis: int) -> None:
    """out[..., i, ..., j] = x[...] where x's stride-1 axis is `axis`, through TensorE
    transposes of 128 x 128 pieces. Each block spans `TRANSPOSE_RUN_BYTES` along both sides:
    one load per 128 rows of out's last axis whose runs along `axis` are that long, and one
    store per 128 rows of `axis` whose runs along out's last axis are that long. (Blocks of
    128 x 128 moved 256-byte bf16 runs: the DMA engines' descriptor overhead halved their rate.)"""
    import numpy as np

    rank = x.ndim
    last = rank - 1
    lead = [i for i in range(rank) if i not in (axis, last)]
    evictor = Evictor()
    lead_shape = [x.shape[i] for i in lead]
    run = max(P, TRANSPOSE_RUN_BYTES // x.dtype_spec.itemsize)  # elements of `axis` per load
    group = max(1, TRANSPOSE_RUN_BYTES // (P * out.dtype_spec.itemsize))  # 128-row tiles per store
    for index in (np.ndindex(*lead_shape) if lead else [()]):
        key = [slice(None)] * rank
        for i, v in zip(lead, index, strict=True):
            key[i] = int(v)
        xs, os_ = x[tuple(key)], out[tuple(key)]
        # xs / os_ are 2-D [A (axis), L (last)] with xs contiguous along A
        a_size, l_size = xs.shape
        xt = hbm_view(xs, (l_size, a_size), hbm_strides(xs)[::-1])  # [L, A], rows contiguous
        full = l_size // P
        groups = [(g0 * P, min(group, full - g0), P) for g0 in range(0, full, group)]
        if l_size > full * P:  # the partial tile of L on its own: every group's tiles agree
            groups.append((full * P, 1, l_size - full * P))
        for l0, count, lr in groups:
            for a0, an in tiles(a_size, run):
                with kernel_scope("transpose block"):
                    _transpose_block(os_, xt, l0, count, lr, a0, an, evictor)


def _transpose_block(os_: Tile, xt: Tile, l0: int, count: int, lr: int, a0: int, an: int,
                     evictor: Evictor) -> None:
    """os_[a0:a0+an, l0:l0+count*lr] = xt[l0:..., a0:a0+an]^T: `count` loads of [lr, an],
    per 128 columns of A the pieces' transposes (four to a PSUM bank) and one store."""
    rows = nl.ndarray((P, count, an), dtype=xt.dtype, buffer=nl.sbuf)
    for j in range(count):
        rows[0:lr, j, :] = nl.load(xt[l0 + j * lr:l0 + (j + 1) * lr, a0:a0 + an])
    steps = hbm_strides(os_)
    for t0, tr in tiles(an, P):
        with kernel_scope("transpose piece"):
            stage = nl.ndarray((P, count, lr), dtype=os_.dtype, buffer=nl.sbuf)
            for b0, bn in tiles(count, 4):
                with kernel_scope("transpose bank"):
                    bank = nl.ndarray((P, 4, P), dtype=nl.float32, buffer=nl.psum)
                    for j in range(bn):
                        bank[0:tr, j, 0:lr] = nisa.nc_transpose(rows[0:lr, b0 + j, t0:t0 + tr])
                    evictor.copy(stage[0:tr, b0:b0 + bn, :], bank[0:tr, 0:bn, 0:lr])
            target = hbm_view(os_, (tr, count, lr), (steps[0], lr * steps[1], steps[1]),
                              offset=(a0 + t0) * steps[0] + l0 * steps[1])
            nl.store(target, value=stage[0:tr])


def concat(out: Tile, inputs: Sequence[Tile], *, axis: int) -> None:
    """out = concatenation of inputs along `axis`: each input is copied into its slice."""
    axis = axis % out.ndim
    with kernel_scope("concat"):
        start = 0
        for tile in inputs:
            size = tile.shape[axis]
            key = tuple(slice(start, start + size) if i == axis else slice(None)
                        for i in range(out.ndim))
            _blocked(out[key], [tile], None)
            start += size
        if start != out.shape[axis]:
            raise InvalidArgumentError(f"concat: inputs cover {start} of {out.shape[axis]} "
                                       f"along axis {axis}")


def pad(out: Tile, x: Tile, *, pads: Sequence[tuple[int, int]], value: float = 0.0) -> None:
    """out = x padded by (before, after) per axis (negative values crop) with `value`.

    The border slabs are filled from one memset SBUF tile; x's kept part is copied into the
    interior."""
    if len(pads) != x.ndim:
        raise InvalidArgumentError(f"pad: {len(pads)} (before, after) pairs for rank {x.ndim}")
    with kernel_scope("pad"):
        src_key, dst_key = [], []
        for (before, after), size in zip(pads, x.shape, strict=True):
            lo, hi = max(0, -before), size - max(0, -after)
            src_key.append(slice(lo, hi))
            dst_key.append(slice(max(0, before), max(0, before) + max(0, hi - lo)))
        for axis, (before, after) in enumerate(pads):
            for start, count in ((0, max(0, before)), (out.shape[axis] - max(0, after),
                                                       max(0, after))):
                if count:
                    key = tuple(slice(start, start + count) if i == axis else slice(None)
                                for i in range(out.ndim))
                    fill(out[key], value)
        if all(s.stop > s.start for s in src_key):
            _blocked(out[tuple(dst_key)], [x[tuple(src_key)]], None)


def fill(region: Tile, value: float) -> None:
    """Write `value` to every element of an HBM region (one memset tile, repeated stores)."""
    for problem in problems_2d(region.shape, [region]):
        view = problem[0]
        rows, cols = view.shape
        chunk = min(cols, 8192)
        tile = nl.ndarray((P, chunk), dtype=region.dtype, buffer=nl.sbuf)
        tile[...] = nisa.memset((P, chunk), float(value), region.dtype)
        for r0, rr in tiles(rows, P):
            for c0, cw in tiles(cols, chunk):
                nl.store(view[r0:r0 + rr, c0:c0 + cw], value=tile[0:rr, 0:cw])
