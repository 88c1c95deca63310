"""Shared tiling, view and data-movement helpers of the kernel library.

Kernels receive HBM `Tile` views in the model's logical (row-major, possibly strided or
broadcast) layout. These helpers turn them into what the engines want:

- `kernel_scope`: every kernel (and every output block's temporaries) runs in its own trace
  scope, so its SBUF/PSUM tiles are freed when it returns and the next kernel of a model reuses
  the space (the ring allocator still places the next kernel's tiles after this one's, so the
  two can overlap in time).
- `hbm_strides`, `hbm_view`, `broadcast_to_shape`, `fold_rows`, `merged`: explicit
  access-pattern views over HBM (a stride of 0 broadcasts) and folding of axes into [rows,
  columns] when their strides allow.
- `load_block`: one DMA of a 2-D HBM block into SBUF, broadcasting a stride-0 column on chip (a
  stride-0 innermost axis would otherwise cost one DMA descriptor per element).
- `broadcast_row`: a vector on all 128 partitions via one TensorE ones-matmul per 512 columns.
- `Evictor`: PSUM -> SBUF copies, alternated between ScalarE and VectorE.
- `spare_engine`: GpSimd for side work that would otherwise queue on VectorE, where the core has
  one (NeuronCore-v1 does not; there the work goes to VectorE).
- `has_gpsimd`, `load_constant`: patterns GpSimd generates on chip (identity, causal masks, column
  numbers) are, on a core without it, constants the compiler embeds in HBM and one DMA loads.
- `problems_2d`, `row_problems`: N-D element-wise work cut into 2-D [rows, columns] problems.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from math import prod

import numpy as np

from trnsim import hardware
from trnsim.errors import InvalidArgumentError
from trnsim.nki import isa as nisa
from trnsim.nki import language as nl
from trnsim.nki.tile import Tile
from trnsim.nki.trace import current_trace, user_location
from trnsim.numerics import dtype as as_dtype

# The library is tiled for the limits of NeuronCore-v2, which every core it runs on allows
# (NeuronCore-v1 runs it on its own figures; v3 and v4 allow more), read from that core's spec.
TILED_FOR = hardware.core("v2")
P = TILED_FOR.partitions  # partitions; TensorE contraction tile and stationary free size
# fp32 elements per partition in one PSUM bank (2 KiB); TensorE moving limit
BANK_FP32 = TILED_FOR.psum_bank_bytes_per_partition // 4
BN_CHUNK = TILED_FOR.bn_stats_max_free  # elements one BnStats instruction takes per partition
# SBUF bytes per partition a kernel leaves outside its operand buffers, for staging, evictions
# and the next kernel's prefetch; operands get the rest (128 KiB of NeuronCore-v2's 176 usable).
KERNEL_HEADROOM_BYTES = 48 * 1024
# A broadcast bias row is staged through SBUF this many fp32 columns (16 KiB) at a time.
ROW_STAGE_COLUMNS = 4096
# A DMA moves one descriptor per contiguous run; runs of at least this many bytes per partition
# keep the engines above ~90% of their rate (hardware.md section 6, fact 7: they saturate there).
EFFICIENT_RUN_BYTES = TILED_FOR.dma.saturating_bytes_per_partition
# Bytes per partition one DMA of a streamed operand moves: big enough to amortise the ~1.3 us
# start latency (it overlaps the previous transfer on the queue; from this size DMA saturates),
# small enough that TensorE can start on the first piece while the rest is in flight.
DMA_PIECE_BYTES = TILED_FOR.dma.saturating_bytes_per_partition

_scope_ids = itertools.count(1 << 30)


@contextmanager
def exact_integers(on: bool = True) -> Iterator[None]:
    """Inside: every instruction that can check it must store exact integers (PyTorch's integer
    semantics through fp32 engines; see trnsim.isa.integers), or the run is refused."""
    trace = current_trace()
    trace.flush()
    before, trace.exact_int = trace.exact_int, trace.exact_int or on
    try:
        yield
    finally:
        trace.flush()
        trace.exact_int = before


@contextmanager
def kernel_scope(name: str) -> Iterator[None]:
    """Free every on-chip tile allocated inside when the block ends (a kernel, or one output
    block's temporaries), as a loop iteration's tiles are freed when it ends."""
    trace = current_trace()
    trace.enter(next(_scope_ids), 0, f"kernel {name}", user_location())
    try:
        yield
    except BaseException:
        trace.pending = None  # do not emit half-traced work while unwinding
        raise
    finally:
        trace.exit()


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def tiles(total: int, size: int) -> list[tuple[int, int]]:
    """(start, length) of consecutive tiles of `size` covering `total`."""
    return [(s, min(size, total - s)) for s in range(0, total, size)]


def itemsize(dtype) -> int:
    """Bytes per element of a dtype given by name, numpy dtype or `DType`."""
    return as_dtype(dtype).itemsize


# --- HBM views -----------------------------------------------------------------------------------

def hbm_strides(tile: Tile) -> tuple[int, ...]:
    """Element strides of an HBM view, one per axis (0 where an axis is broadcast)."""
    return tuple(axis.fstep for axis in tile._axes)


def hbm_view(tile: Tile, shape: Sequence[int], strides: Sequence[int], offset: int = 0) -> Tile:
    """An explicit access-pattern view over `tile`'s storage, starting `offset` elements after it."""
    if not shape:
        shape, strides = (1,), (1,)
    return tile.ap([[int(st), int(sz)] for st, sz in zip(strides, shape, strict=True)], int(offset))


def broadcast_to_shape(tile: Tile, shape: Sequence[int]) -> Tile:
    """`tile` broadcast (numpy rules) to `shape`: broadcast axes get stride 0."""
    shape = tuple(int(s) for s in shape)
    own, steps = tile.shape, hbm_strides(tile)
    if len(own) > len(shape):
        if any(s != 1 for s in own[:len(own) - len(shape)]):
            raise InvalidArgumentError(f"cannot broadcast {list(own)} to {list(shape)}")
        own, steps = own[len(own) - len(shape):], steps[len(steps) - len(shape):]
    lead = len(shape) - len(own)
    strides = [0] * lead
    for size, step, want in zip(own, steps, shape[lead:], strict=True):
        if size == want:
            strides.append(step)
        elif size == 1:
            strides.append(0)
        else:
            raise InvalidArgumentError(f"cannot broadcast {list(tile.shape)} to {list(shape)}")
    return hbm_view(tile, shape, strides)


def fold_rows(tile: Tile) -> Tile | None:
    """A [*lead, R, C] view as [prod(lead) * R, C] when the leading axes step uniformly, else None."""
    shape, strides = tile.shape, hbm_strides(tile)
    if len(shape) <= 2:
        return tile if len(shape) == 2 else None
    rows, row_step = shape[-2], strides[-2]
    for size, step in zip(reversed(shape[:-2]), reversed(strides[:-2]), strict=True):
        if size != 1 and step != row_step * rows:
            return None
        rows *= size
    return hbm_view(tile, (rows, shape[-1]), (row_step, strides[-1]))


def _merge_uniform(sizes, steps) -> tuple[int, int] | None:
    """Axes of `sizes` and `steps` as one axis (size, step) if they step uniformly (size-1 axes
    ignored; none: size 1, step 1), else None."""
    total, step = 1, None
    for size, st in reversed(list(zip(sizes, steps, strict=True))):
        if size == 1:
            continue
        if step is None:
            step = st
        elif st != step * total:
            return None
        total *= size
    return total, (step if step is not None else 1)


def merged(tile: Tile, split: int) -> Tile | None:
    """A view as 2-D [prod(shape[:split]), prod(shape[split:])] when each side's axes step
    uniformly (size-1 axes ignored), else None."""
    shape, strides = tile.shape, hbm_strides(tile)
    rows = _merge_uniform(shape[:split], strides[:split])
    cols = _merge_uniform(shape[split:], strides[split:])
    if rows is None or cols is None:
        return None
    return hbm_view(tile, (rows[0], cols[0]), (rows[1], cols[1]))


def as_matrix(tile: Tile) -> Tile:
    """A [n] or [..., C] view as 2-D [rows, C] (rows folded when the strides allow)."""
    if tile.ndim == 1:
        return hbm_view(tile, (1, tile.shape[0]), (0, hbm_strides(tile)[0]))
    folded = fold_rows(tile)
    if folded is None:
        raise InvalidArgumentError(f"view {list(tile.shape)} with strides {hbm_strides(tile)} "
                                   f"cannot be folded into rows")
    return folded


KERNEL_CONSTANT_PREFIX = "kernel_const."  # HBM constants a kernel (not the model) supplies


def operand_budget_bytes(core=None) -> int:
    """SBUF bytes per partition a kernel may plan to hold in operand buffers on `core`."""
    core = core or current_trace().core
    return core.sbuf_usable_bytes_per_partition - KERNEL_HEADROOM_BYTES


def has_gpsimd() -> bool:
    return current_trace().core.gpsimd is not None


def spare_engine():
    """The engine for element-wise side work kept off VectorE: GpSimd if the target core has one."""
    return nisa.gpsimd_engine if has_gpsimd() else nisa.vector_engine


def load_constant(dst: Tile, values: np.ndarray, name: str) -> None:
    """dst <- values through a constant HBM tensor (cast to dst's dtype when the program loads)."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    src = current_trace().hbm_tensor(KERNEL_CONSTANT_PREFIX + name, values.shape, dst.dtype,
                                     kind="constant", data=values)
    dst[...] = nl.load(src)


# --- loads ---------------------------------------------------------------------------------------

def load_block(dst: Tile, src: Tile) -> None:
    """DMA an HBM block [rows, cols] into the SBUF view `dst` (same shape; cast to dst's dtype).
    `src` may split the columns over two axes ([rows, a, b], a band of image rows that are not
    adjacent in memory); `dst` is then read in that shape.

    A stride-0 innermost axis (a per-row value broadcast along the row) is loaded as one column and
    broadcast on chip by one copy; a stride-0 row axis is a DMA with partition step 0.
    """
    if src.ndim == 3:
        rows, a, b = src.shape
        _, a_step, b_step = hbm_strides(src)
        if (a_step == 0 and a > 1) or (b_step == 0 and b > 1):
            # a broadcast inside: the distinct values in one DMA ([rows, b], [rows, a] or
            # [rows, 1]), spread over the block on chip by one copy with stride-0 axes
            a_kept, b_kept = (a if a_step else 1), (b if b_step else 1)
            part = hbm_view(src, (rows, a_kept, b_kept), hbm_strides(src))
            values = nl.ndarray((rows, a_kept * b_kept), dtype=src.dtype, buffer=nl.sbuf)
            values.reshape((rows, a_kept, b_kept))[...] = nl.load(part)
            spread = values.ap([[1, rows], [b_kept if a_step else 0, a], [1 if b_step else 0, b]])
            dst.reshape(src.shape)[...] = nisa.tensor_copy(spread, engine=spare_engine())
            return
        dst.reshape(src.shape)[...] = nl.load(src)
        return
    rows, cols = src.shape
    col_stride = hbm_strides(src)[1]
    if col_stride == 0 and cols > 1:
        column = nl.ndarray((rows, 1), dtype=src.dtype, buffer=nl.sbuf)
        column[...] = nl.load(src[:, 0:1])
        dst[...] = nisa.tensor_copy(column.ap([[1, rows], [0, cols]]), engine=spare_engine())
        return
    dst[...] = nl.load(src)


def broadcast_row(vector: Tile, evictor: Evictor) -> Tile:
    """An HBM vector [n] as an SBUF [128, n] fp32 tile, every partition a copy.

    One small DMA, then ones[1, 128]^T @ row[1, 512] on TensorE per 512 columns (fp32, exact):
    cheaper than a 128x larger partition-broadcast DMA, which would compete with the weights."""
    n = vector.shape[0]
    ones = nl.ndarray((1, P), dtype=nl.float32, buffer=nl.sbuf)
    ones[...] = nisa.memset((1, P), 1.0, nl.float32)
    rows = nl.ndarray((P, n), dtype=nl.float32, buffer=nl.sbuf)
    matrix = as_matrix(vector)
    row = nl.ndarray((1, min(n, ROW_STAGE_COLUMNS)), dtype=nl.float32, buffer=nl.sbuf)
    for s0 in range(0, n, ROW_STAGE_COLUMNS):  # one staging DMA per piece: SBUF stays small
        sw = min(ROW_STAGE_COLUMNS, n - s0)
        row[:, 0:sw] = nl.load(matrix[:, s0:s0 + sw])
        for i in nl.affine_range(ceil_div(sw, BANK_FP32)):
            c0, cw = i * BANK_FP32, min(BANK_FP32, sw - i * BANK_FP32)
            ps = nl.ndarray((P, BANK_FP32), dtype=nl.float32, buffer=nl.psum)
            ps[:, 0:cw] = nisa.nc_matmul(ones, row[:, c0:c0 + cw])
            evictor.copy(rows[:, s0 + c0:s0 + c0 + cw], ps[:, 0:cw])
    return rows


class Evictor:
    """PSUM -> SBUF copies (casting to the destination dtype), alternating ScalarE and VectorE.

    On NeuronCore-v2 the two share PSUM's read port, so alternating does not add PSUM bandwidth;
    it keeps one engine free for the SBUF-only work (bias adds, epilogues) between evictions.
    """

    def __init__(self) -> None:
        self.turn = 0

    def copy(self, dst: Tile, src: Tile, engine: str | None = None) -> None:
        engine = engine or ("scalar" if self.turn % 2 == 0 else "vector")
        self.turn += 1
        if engine == "scalar":
            dst[...] = nisa.activation(op="identity", data=src)
        else:
            dst[...] = nisa.tensor_copy(src, engine=nisa.vector_engine)


def numel(shape: Sequence[int]) -> int:
    return int(prod(shape))


# --- 2-D tiling of N-D element-wise work --------------------------------------------------------

def problems_2d(shape: Sequence[int], views: Sequence[Tile], banded: bool = False
                ) -> list[list[Tile]]:
    """Cut same-shape HBM views (already broadcast to `shape`) into 2-D [rows, cols] problems.

    Dense operands that share strides become [128, numel / 128] (+ a [1, rest] tail): every
    partition gets one contiguous run, whatever the tensor's shape. Otherwise the axes are split
    into looped outer axes, rows and columns, choosing the split that keeps the most partitions
    and the longest rows while every operand's rows and columns stay single strided axes.
    With `banded`, the columns may also be two strided axes ([rows, a, b] problems: a DMA access
    pattern has several free axes), when that moves more per transfer: attention's heads merged
    back into the hidden axis, [b, s, h, d] read from [b, h, s, d], are then [s, h, d] blocks
    instead of [h, d] ones (128 partitions instead of 16, 16x fewer transfers).
    """
    shape = tuple(int(s) for s in shape)
    total = numel(shape)
    if total == 0:
        return []
    flat = [merged(v, 0) for v in views]
    if all(f is not None and hbm_strides(f)[1] == 1 for f in flat):
        per = total // P
        out: list[list[Tile]] = []
        if per:
            out.append([hbm_view(f, (P, per), (per, 1)) for f in flat])
        if total - per * P:
            out.append([hbm_view(f, (1, total - per * P), (0, 1), offset=per * P) for f in flat])
        return out
    # elementwise work may take its axes in any order (every view the same): besides the
    # views' own order, try each axis moved forward, so that a broadcast operand's stride-0 axis
    # (attention's mask over heads, [b, 1, s, s] against [b, h, s, s] scores) becomes a free axis
    # of the access pattern and the rows behind it fill the partitions ([s, h, s] blocks on 128
    # partitions instead of [h, s * s] on 16)
    best = None
    for order in _axis_orders(len(shape)):
        moved = [_permuted(v, order) for v in views] if order is not None else list(views)
        plan = _best_plan(tuple(shape[i] for i in order) if order else shape, moved, banded)
        if best is None or plan[0] > best[0]:
            best = (*plan, moved)
    if best is None or best[1] is None:  # cannot happen: k = rank - 1 always merges
        raise InvalidArgumentError(f"cannot tile views of shape {list(shape)}")
    _, choice, moved = best
    loops = moved[0].shape[:choice[0]]
    import numpy as np

    out = []
    for index in (np.ndindex(*loops) if choice[0] else [()]):
        key = tuple(int(i) for i in index)
        picked = [v[key] if key else v for v in moved]
        if len(choice) == 3:
            k, s, t = choice
            out.append([_grouped(v, (s - k, t - k)) for v in picked])
        else:
            k, s = choice
            out.append([merged(v, s - k) for v in picked])
    return out


def _axis_orders(rank: int) -> list[tuple[int, ...] | None]:
    """The views' own axis order (None) and every order with one axis but the last moved forward
    (the last stays last: it is the axis DMA reads contiguously)."""
    orders: list[tuple[int, ...] | None] = [None]
    for j in range(1, rank - 1):
        for i in range(j):
            axes = [a for a in range(rank) if a != j]
            axes.insert(i, j)
            orders.append(tuple(axes))
    return orders


def _permuted(view: Tile, order: tuple[int, ...]) -> Tile:
    shape, strides = view.shape, hbm_strides(view)
    return hbm_view(view, tuple(shape[i] for i in order), tuple(strides[i] for i in order))


def _best_plan(shape: tuple[int, ...], views: Sequence[Tile], banded: bool
               ) -> tuple[tuple, tuple[int, ...] | None]:
    """(score, choice) of the best tiling of views in this axis order: choice (k, s) loops over
    axes [:k] with rows [k:s] and columns [s:], or (k, s, t) with [rows, a, b] bands."""
    rank = len(shape)
    best: tuple[tuple, tuple[int, ...] | None] = ((-1, 0), None)
    for k in range(rank):
        for s in range(k, rank + 1):
            rows, cols = numel(shape[k:s]), numel(shape[s:])
            probe = [v[(0,) * k] if k else v for v in views]
            if any(merged(p, s - k) is None for p in probe):
                continue
            score = (min(rows, P) * min(cols, 4096), -k)
            if score > best[0]:
                best = (score, (k, s))
    band = _best_band(shape, views, best[0]) if banded and best[1] is not None else None
    return best if band is None else band


def _grouped(view: Tile, bounds: tuple[int, int]) -> Tile | None:
    """`view` as [rows, a, b]: axes [:bounds[0]], [bounds[0]:bounds[1]] and [bounds[1]:] each
    merged into one strided axis (the rows not of stride 0: `load_block` broadcasts a or b on
    chip), or None."""
    shape, strides = view.shape, hbm_strides(view)
    edges = (0, *bounds, len(shape))
    sizes, steps = [], []
    for lo, hi in itertools.pairwise(edges):
        axis = _merge_uniform(shape[lo:hi], strides[lo:hi])
        if axis is None or (lo == 0 and axis[0] > 1 and axis[1] == 0):
            return None
        sizes.append(axis[0])
        steps.append(axis[1])
    return hbm_view(view, tuple(sizes), tuple(steps))


def _best_band(shape: tuple[int, ...], views: Sequence[Tile], flat_score: tuple
               ) -> tuple[tuple, tuple[int, int, int]] | None:
    """(score, (loop axes, row axes end, band split)) of the best [rows, a, b] tiling, if it
    beats the best 2-D one's score."""
    rank = len(shape)
    best = None
    for k in range(rank):
        for s in range(k + 1, rank):
            for t in range(s + 1, rank):
                rows, a, b = numel(shape[k:s]), numel(shape[s:t]), numel(shape[t:])
                if a == 1 or b == 1:
                    continue
                probe = [v[(0,) * k] if k else v for v in views]
                if any(_grouped(p, (s - k, t - k)) is None for p in probe):
                    continue
                score = (min(rows, P) * min(a * b, 4096), -k)
                if score > flat_score and (best is None or score > best[0]):
                    best = (score, k, s, t)
    return None if best is None else (best[0], best[1:])


def row_problems(views: Sequence[Tile], kept: int) -> list[list[Tile]]:
    """[rows, cols] views of kept-first views, looping over leading kept axes until the rest of
    the kept axes fold into one row axis for every view."""
    for lead in range(kept + 1):
        probe = [v[(0,) * lead] if lead else v for v in views]
        if all(merged(p, kept - lead) is not None for p in probe):
            break
    else:  # lead == kept always folds (one row); unreachable
        raise InvalidArgumentError("cannot fold rows")
    out = []
    for index in (__import__("numpy").ndindex(*views[0].shape[:lead]) if lead else [()]):
        key = tuple(int(i) for i in index)
        out.append([_fold(v[key] if key else v, kept - lead) for v in views])
    return out



def _fold(view: Tile, kept: int) -> Tile:
    """[rows, cols] of a kept-first view (a size-1 row axis when nothing is kept)."""
    two = merged(view, kept) if kept else merged(view, 0)
    if two is None:
        raise InvalidArgumentError(f"view {list(view.shape)} (strides {hbm_strides(view)}) cannot "
                                   f"be read as [rows, columns]")
    return two


def column_chunk(dtype_bytes: int, operands: int) -> int:
    """Columns per SBUF block so `operands` fp32-sized tiles stay within ~48 KiB a partition."""
    return max(512, min(8192, 48 * 1024 // (max(operands, 1) * max(dtype_bytes, 4)) // 512 * 512))
