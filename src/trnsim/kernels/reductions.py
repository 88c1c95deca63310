"""k.reduce, k.softmax, k.cumsum and k.topk: work along one (merged) axis of a tensor.

All four want the axis they walk along the free axis, rows on partitions:

- if that axis (the reduced axes, merged) is the innermost in HBM, rows are the other axes and
  each 128-row tile is read in long contiguous runs (`_direct`);
- reductions over leading axes with contiguous kept axes (sum over the batch of [B, C]) load
  [128 reduced, kept] blocks contiguously: a sum or mean is a ones-vector matmul on TensorE
  accumulated over the reduced axis (`_ones_matmul`: a bias gradient), other ops transpose
  the blocks on TensorE (`_transposed`), instead of element-granular DMA descriptors;
- anything else reads through a strided DMA view (correct; each descriptor is one element, so it
  is slow, and the profile shows it).

Per row tile, column chunks are reduced on VectorE and combined across chunks on [rows, 1]
columns: sum/mean/max/min/prod with tensor_reduce, any/all as max/min of (x != 0), var with
bn_stats/bn_aggr (population variance rescaled by n / (n - correction)), argmax/argmin as the
smallest column index where x equals the row maximum (first occurrence, as numpy). Softmax keeps
a running max and sum over chunks (exp on ScalarE with its accumulator) and normalises in a
second pass over the same SBUF tile; cumsum is a VectorE tensor_tensor_scan with the carry
between chunks. topk takes 8 at a time per row: max8 finds the 8 largest, match_replace8 knocks
them out (to -BIG) and writes where they were, as NKI's top-k kernels do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from trnsim.errors import InvalidArgumentError, UnsupportedError
from trnsim.kernels.layout import (
    BANK_FP32,
    BN_CHUNK,
    Evictor,
    P,
    broadcast_to_shape,
    ceil_div,
    exact_integers,
    has_gpsimd,
    hbm_strides,
    hbm_view,
    kernel_scope,
    load_block,
    load_constant,
    merged,
    numel,
    row_problems,
    tiles,
)
from trnsim.nki import isa as nisa
from trnsim.nki import language as nl
from trnsim.nki.tile import Tile

CHUNK = 4096  # columns of one SBUF block
OPS = ("sum", "mean", "amax", "amin", "prod", "any", "all", "argmax", "argmin", "var")
_ALU = {"sum": np.add, "mean": np.add, "amax": np.max, "amin": np.min, "prod": np.multiply,
        "any": np.max, "all": np.min}
BIG = 3.0e38


def _moved_last(x: Tile, axes: Sequence[int]) -> tuple[Tile, int]:
    """A view of x with the kept axes first and `axes` last; returns (view, kept count)."""
    kept = [i for i in range(x.ndim) if i not in axes]
    order = kept + list(axes)
    strides = hbm_strides(x)
    return hbm_view(x, [x.shape[i] for i in order], [strides[i] for i in order]), len(kept)


def reduce(out: Tile, x: Tile, *, op: str, axes: Sequence[int] = (), keepdim: bool = False,
           correction: float | None = None, prologue: Callable | None = None) -> None:
    """out = op over `axes` of prologue(x) (all axes when `axes` is empty)."""
    if op not in OPS:
        raise InvalidArgumentError(f"reduce op {op!r} not in {OPS}")
    if not axes and op not in ("argmax", "argmin"):  # numpy: axis=() reduces nothing
        _no_reduction(out, x, op, prologue)
        return
    axes = tuple(sorted(a % x.ndim for a in axes)) if axes else tuple(range(x.ndim))
    if op in ("argmax", "argmin") and len(axes) > 1 and len(axes) != x.ndim:
        raise InvalidArgumentError(f"{op} over several axes {axes}")
    if op in ("argmax", "argmin"):
        check_fp32_exact(x)
    if _over_unit_axes(out, x, op, axes, keepdim, prologue):
        return
    view, kept = _moved_last(x, axes)
    if merged(view[(0,) * kept] if kept else view, 0) is None:
        # reduced axes that do not step uniformly in HBM (sum over axes 0 and 2 of [4, 64, 32]):
        # make the kept-first view dense once, so they fold into one column axis
        from trnsim.kernels.elementwise import copy

        dense = nl.ndarray(tuple(view.shape), dtype=view.dtype, buffer=nl.hbm)
        copy(dense, view)
        view = dense
    if _split_over_partitions(out, view, kept, op, x, prologue):
        return
    kept_shape = view.shape[:kept]
    out_view = hbm_view(out, kept_shape or (1,), [s for i, s in enumerate(hbm_strides(out))
                                                  if not (keepdim and i in axes)] or [1])
    count = numel(view.shape[kept:])
    integer = x.dtype_spec.is_int and op in ("sum", "prod", "amax", "amin")
    with kernel_scope("reduce"), exact_integers(integer):
        reducer = _Reducer(op, count, correction if correction is not None else 1.0, prologue)
        # the output gets the reduced axes back as size-1 axes, so both views fold alike
        out_full = hbm_view(out_view, (*kept_shape, *view.shape[kept:]),
                            (*hbm_strides(out_view)[:kept], *[0] * (view.ndim - kept)))
        for columns, out_cols in row_problems([view, out_full], kept):
            out_rows = out_cols[:, 0:1]
            if (hbm_strides(columns)[1] != 1 and _kept_contiguous(columns)
                    and not x.dtype_spec.is_int):  # TensorE transposes through fp32
                if op in ("sum", "mean") and prologue is None:
                    _ones_matmul(columns, out_rows, op, count)
                else:
                    _transposed(columns, out_rows, reducer)
            else:
                done = _narrow_rows(columns, out_rows, op, count) if prologue is None else 0
                if done < columns.shape[0]:
                    _direct(columns[done:, :], out_rows[done:, :], reducer)


# A whole-tensor reduction of at least this many elements per partition is spread over all
# partitions first (one row on one partition would leave 127 of VectorE's lanes idle).
SPLIT_MIN_COLUMNS = 512
_SPLITTABLE = {"sum": "sum", "mean": "mean", "amax": "amax", "amin": "amin", "any": "any",
               "all": "all"}


def _split_over_partitions(out: Tile, view: Tile, kept: int, op: str, x: Tile,
                           prologue: Callable | None) -> bool:
    """out = op over all of a dense tensor in two stages: [128, n/128] rows reduced on every
    partition into 128 partials (fp32, in HBM), then the partials (a mean of equal-sized
    groups' means is the mean). Returns False when the shape does not call for it."""
    count = numel(view.shape)
    if kept or op not in _SPLITTABLE or x.dtype_spec.is_int or count % P \
            or count // P < SPLIT_MIN_COLUMNS:
        return False
    flat = merged(view, 0)
    if flat is None:
        return False
    step = hbm_strides(flat)[1]
    rows = hbm_view(flat, (P, count // P), (step * (count // P), step))
    partials = nl.ndarray((P,), dtype=nl.float32, buffer=nl.hbm)
    with kernel_scope("reduce"):
        reduce(partials, rows, op=op, axes=(1,), prologue=prologue)
    reduce(hbm_view(out, (1,), (1,)), partials, op=_SPLITTABLE[op], axes=(0,))
    return True


def _over_unit_axes(out: Tile, x: Tile, op: str, axes: tuple[int, ...], keepdim: bool,
                    prologue: Callable | None) -> bool:
    """A reduction whose reduced axes hold one element each (`any` over the size-1 axis of a
    [N, V, 1] one-hot mask) reduces nothing: one element-wise pass over the kept axes, not one
    [128, 1] tile per 128 rows. Returns False when the shape does not call for it."""
    if op not in _ALU or any(x.shape[a] != 1 for a in axes) or len(axes) == x.ndim \
            or (x.dtype_spec.is_int and op not in ("any", "all")):
        return False
    strides = hbm_strides(x)
    kept = [i for i in range(x.ndim) if i not in axes]
    view = x if keepdim else hbm_view(x, [x.shape[i] for i in kept], [strides[i] for i in kept])
    _no_reduction(out, view, op, prologue)
    return True


def check_fp32_exact(x: Tile) -> None:
    """Integers compared in fp32 (argmax, top-k) must be below 2^24, or two of them may compare
    equal: an integer input gets an exact-integer amax pass first, refused past 2^24 at run
    time (`exact_integers`), so the answer is PyTorch's or an error, never another index."""
    if not x.dtype_spec.is_int:
        return
    scratch = nl.ndarray((1,) * x.ndim, dtype=x.dtype_spec, buffer=nl.hbm)
    reduce(scratch, x, op="amax", axes=tuple(range(x.ndim)), keepdim=True)


def _no_reduction(out: Tile, x: Tile, op: str, prologue) -> None:
    """A reduction over no axes: each element is its own group (as numpy's axis=())."""
    from trnsim.kernels.elementwise import elementwise

    if op == "var":
        raise InvalidArgumentError("var over no axes")

    def program(tiles_: Sequence[Tile]) -> Tile:
        value = prologue(tiles_) if prologue is not None else tiles_[0]
        if op in ("any", "all"):
            return nisa.tensor_scalar(value, np.not_equal, 0.0, dtype=nl.float32)
        return nisa.tensor_copy(value, dtype=nl.float32)

    elementwise(out, [x], program=program)


# column-at-a-time ops (of `_ALU`) `_narrow_rows` reduces in one VectorE instruction per block
_NARROW_OPS = ("sum", "mean", "amax", "amin")


def _narrow_rows(columns: Tile, out_rows: Tile, op: str, count: int) -> int:
    """Many short rows (attention's [b*h*s, s] scores summed per row): each partition takes
    consecutive rows, so one DMA loads [128, rows/128 (per block), cols] and one stores the
    [128, rows/128] results, instead of a load and a store per 128 rows. Returns how many
    leading rows it reduced (0: not a shape it handles; the rest go to `_direct`)."""
    rows, cols = columns.shape
    bands = rows // P
    if op not in _NARROW_OPS or bands < 2 or 2 * cols > CHUNK or columns.dtype_spec.is_int:
        return 0
    row_step, col_step = hbm_strides(columns)
    out_step = hbm_strides(out_rows)[0]
    per = max(1, CHUNK // cols)
    scale = 1.0 / count if op == "mean" else 1.0
    for j0, jn in tiles(bands, per):
        with kernel_scope("narrow rows"):
            block = nl.ndarray((P, jn, cols), dtype=columns.dtype, buffer=nl.sbuf)
            block[...] = nl.load(hbm_view(columns, (P, jn, cols),
                                          (bands * row_step, row_step, col_step),
                                          offset=j0 * row_step))
            total = nisa.tensor_reduce(_ALU[op], block, axis=(2,), dtype=nl.float32)
            result = nl.ndarray((P, jn), dtype=out_rows.dtype, buffer=nl.sbuf)
            result[...] = nisa.tensor_scalar(total, np.multiply, scale)
            nl.store(hbm_view(out_rows, (P, jn), (bands * out_step, out_step),
                              offset=j0 * out_step), value=result)
    return P * bands


def _kept_contiguous(columns: Tile) -> bool:
    return hbm_strides(columns)[0] == 1 and columns.shape[0] > 1


def _direct(columns: Tile, out_rows: Tile, reducer: _Reducer) -> None:
    rows, cols = columns.shape
    for t in nl.affine_range(ceil_div(rows, P)):
        r0, rr = t * P, min(P, rows - t * P)
        state = reducer.start(rr)
        for c0, cw in tiles(cols, CHUNK):
            with kernel_scope("reduce chunk"):
                block = nl.ndarray((P, cw), dtype=columns.dtype, buffer=nl.sbuf)
                load_block(block[0:rr], columns[r0:r0 + rr, c0:c0 + cw])
                reducer.add(state, block[0:rr], c0)
        reducer.finish(state, out_rows[r0:r0 + rr, :])


def _transposed(columns: Tile, out_rows: Tile, reducer: _Reducer) -> None:
    """Rows (kept) are contiguous in HBM, columns (reduced) strided: load [128 reduced, 128
    kept] blocks with contiguous runs and transpose them on TensorE, BN_CHUNK columns into one
    PSUM bank, so the reducer sees the same column chunks as `_direct`'s."""
    rows, cols = columns.shape
    flipped = hbm_view(columns, (cols, rows), hbm_strides(columns)[::-1])  # [reduced, kept]
    evictor = Evictor()
    for t in nl.affine_range(ceil_div(rows, P)):
        r0, rr = t * P, min(P, rows - t * P)
        state = reducer.start(rr)
        for c0, cw in tiles(cols, BN_CHUNK):
            with kernel_scope("transposed chunk"):
                bank = nl.ndarray((P, BN_CHUNK), dtype=nl.float32, buffer=nl.psum)
                for s0, sw in tiles(cw, P):
                    block = nl.ndarray((P, P), dtype=columns.dtype, buffer=nl.sbuf)
                    block[0:sw, 0:rr] = nl.load(flipped[c0 + s0:c0 + s0 + sw, r0:r0 + rr])
                    bank[0:rr, s0:s0 + sw] = nisa.nc_transpose(block[0:sw, 0:rr])
                values = nl.ndarray((P, BN_CHUNK), dtype=nl.float32, buffer=nl.sbuf)
                evictor.copy(values[0:rr, 0:cw], bank[0:rr, 0:cw])
                reducer.add(state, values[0:rr, 0:cw], c0)
        reducer.finish(state, out_rows[r0:r0 + rr, :])


# reduced rows one DMA brings per partition in `_ones_matmul` (K tiles of 128 rows each)
ONES_TILES_PER_DMA = 8


def _ones_matmul(columns: Tile, out_rows: Tile, op: str, count: int) -> None:
    """Sum (or mean) over strided columns whose rows are contiguous (a bias gradient: [tokens,
    width] summed over the tokens) as TensorE computes it: ones[128]^T @ block[128, 512]
    accumulated in one PSUM bank over the reduced axis, 128 of it per matmul; one [1, 512]
    row of results per bank, no transposes."""
    rows, cols = columns.shape
    flipped = hbm_view(columns, (cols, rows), hbm_strides(columns)[::-1])  # [reduced, kept]
    step = hbm_strides(out_rows)[0]
    ones = nl.ndarray((P, 1), dtype=columns.dtype, buffer=nl.sbuf)
    ones[...] = nisa.memset((P, 1), 1.0, columns.dtype)
    full = cols // P
    s_red, s_kept = hbm_strides(flipped)
    for r0, rw in tiles(rows, BANK_FP32):
        with kernel_scope("ones matmul block"):
            acc = nl.zeros((1, BANK_FP32), dtype=nl.float32, buffer=nl.psum)
            for t0, tn in tiles(full, ONES_TILES_PER_DMA):
                block = nl.ndarray((P, tn, rw), dtype=columns.dtype, buffer=nl.sbuf)
                block[...] = nl.load(hbm_view(flipped, (P, tn, rw), (s_red, P * s_red, s_kept),
                                              offset=t0 * P * s_red + r0 * s_kept))
                for j in range(tn):
                    acc[0:1, 0:rw] += nisa.nc_matmul(ones, block[:, j, 0:rw])
            if cols > full * P:
                rest = cols - full * P
                tail = nl.ndarray((P, rw), dtype=columns.dtype, buffer=nl.sbuf)
                tail[0:rest, :] = nl.load(flipped[full * P:cols, r0:r0 + rw])
                acc[0:1, 0:rw] += nisa.nc_matmul(ones[0:rest, :], tail[0:rest, 0:rw])
            result = nl.ndarray((1, rw), dtype=out_rows.dtype, buffer=nl.sbuf)
            scale = 1.0 / count if op == "mean" else 1.0
            result[...] = nisa.activation(op="identity", data=acc[0:1, 0:rw], scale=scale)
            nl.store(hbm_view(out_rows, (1, rw), (0, step), offset=r0 * step), value=result)


class _Reducer:
    """Chunk-by-chunk reduction of rows held on partitions."""

    def __init__(self, op: str, count: int, correction: float, prologue) -> None:
        self.op, self.count, self.correction, self.prologue = op, count, correction, prologue
        if op in ("argmax", "argmin"):  # column numbers 0..CHUNK-1 on every partition
            self.columns = nl.ndarray((P, CHUNK), dtype=nl.float32, buffer=nl.sbuf)
            if not has_gpsimd():
                load_constant(self.columns, np.tile(np.arange(CHUNK), (P, 1)), f"columns.{CHUNK}")
                return
            i_p, i_f = nl.mgrid[0:P, 0:CHUNK]
            self.columns[...] = nisa.iota(i_f + CHUNK * i_p, dtype=nl.float32)
            i_q = nl.arange(P)[:, None]
            starts = nisa.iota(CHUNK * i_q, dtype=nl.float32)
            self.columns[...] = nisa.tensor_scalar(self.columns, np.subtract, starts)

    def start(self, rows: int) -> dict:
        state = {"rows": rows, "first": True}
        if self.op == "var":
            state["stats"] = nl.ndarray((P, 6 * ceil_div(self.count, BN_CHUNK)),
                                        dtype=nl.float32, buffer=nl.sbuf)
        state["acc"] = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        if self.op in ("argmax", "argmin"):
            state["index"] = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
            state["nan_index"] = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        return state

    def add(self, state: dict, block: Tile, c0: int) -> None:
        rr, cw = block.shape
        x = block
        if self.prologue is not None:
            staged = nl.ndarray((P, cw), dtype=nl.float32, buffer=nl.sbuf)
            staged[0:rr] = self.prologue([block])
            x = staged[0:rr]
        op = self.op
        if op == "var":
            for a0, aw in tiles(cw, BN_CHUNK):
                i = (c0 + a0) // BN_CHUNK
                state["stats"][0:rr, 6 * i:6 * i + 6] = nisa.bn_stats(x[:, a0:a0 + aw],
                                                                       dtype=nl.float32)
            return
        if op in ("argmax", "argmin"):
            self._arg(state, x, c0)
            return
        if op in ("any", "all"):
            flags = nl.ndarray((P, cw), dtype=nl.float32, buffer=nl.sbuf)
            flags[0:rr] = nisa.tensor_scalar(x, np.not_equal, 0.0, dtype=nl.float32)
            x = flags[0:rr]
        part = nisa.tensor_reduce(_ALU[op], x, axis=(1,), keepdims=True, dtype=nl.float32)
        self._combine(state, part, _ALU[op])

    def _combine(self, state: dict, part, alu) -> None:
        rr, acc = state["rows"], state["acc"]
        if state["first"]:
            acc[0:rr] = nisa.tensor_copy(part, dtype=nl.float32)
            state["first"] = False
        else:
            acc[0:rr] = nisa.tensor_tensor(acc[0:rr], part, alu)

    def _arg(self, state: dict, x: Tile, c0: int) -> None:
        """Best value and first index of it in this chunk, merged into the running pair."""
        rr, cw = x.shape
        sign = 1.0 if self.op == "argmax" else -1.0
        values = nl.ndarray((P, cw), dtype=nl.float32, buffer=nl.sbuf)
        values[0:rr] = nisa.tensor_scalar(x, np.multiply, sign, dtype=nl.float32)
        best = nisa.tensor_reduce(np.max, values[0:rr], axis=(1,), keepdims=True,
                                  dtype=nl.float32)
        # candidates: the column where values == best, BIG elsewhere; first = the minimum
        miss = nl.ndarray((P, cw), dtype=nl.float32, buffer=nl.sbuf)
        miss[0:rr] = nisa.tensor_scalar(values[0:rr], np.not_equal, best, op1=np.multiply,
                                        operand1=BIG, dtype=nl.float32)
        miss[0:rr] = nisa.tensor_tensor(miss[0:rr], self.columns[0:rr, 0:cw], np.add)
        first = nisa.tensor_scalar(nisa.tensor_reduce(np.min, miss[0:rr], axis=(1,),
                                                      keepdims=True, dtype=nl.float32),
                                   np.add, float(c0), dtype=nl.float32)
        # torch returns the first NaN's index (NaN compares above everything, for both ops)
        not_nan = nisa.tensor_tensor(x, x, np.equal, dtype=nl.float32)
        nan_cols = nisa.scalar_tensor_tensor(data=not_nan, op0=np.multiply, operand0=BIG,
                                             op1=np.add, operand1=self.columns[0:rr, 0:cw])
        nan_first = nisa.tensor_scalar(nisa.tensor_reduce(np.min, nan_cols, axis=(1,),
                                                          keepdims=True, dtype=nl.float32),
                                       np.add, float(c0), dtype=nl.float32)
        acc, where, nans = state["acc"], state["index"], state["nan_index"]
        if state["first"]:
            acc[0:rr] = nisa.tensor_copy(best, dtype=nl.float32)
            where[0:rr] = nisa.tensor_copy(first, dtype=nl.float32)
            nans[0:rr] = nisa.tensor_copy(nan_first, dtype=nl.float32)
            state["first"] = False
            return
        nans[0:rr] = nisa.tensor_tensor(nans[0:rr], nan_first, np.minimum)
        better = nisa.tensor_tensor(best, acc[0:rr], np.greater, dtype=nl.float32)
        step = nisa.tensor_tensor(first, where[0:rr], np.subtract, dtype=nl.float32)
        where[0:rr] = nisa.scalar_tensor_tensor(data=step, op0=np.multiply, operand0=better,
                                                op1=np.add, operand1=where[0:rr])
        acc[0:rr] = nisa.tensor_tensor(acc[0:rr], best, np.maximum)

    def finish(self, state: dict, out: Tile) -> None:
        rr = state["rows"]
        result = nl.ndarray((P, 1), dtype=out.dtype, buffer=nl.sbuf)
        if self.op == "var":
            mean_var = nisa.bn_aggr(state["stats"][0:rr], dtype=nl.float32)
            factor = self.count / max(self.count - self.correction, 0.0) if \
                self.count > self.correction else float("inf")
            result[0:rr] = nisa.tensor_scalar(mean_var[:, 1:2], np.multiply, factor)
        elif self.op == "mean":
            result[0:rr] = nisa.tensor_scalar(state["acc"][0:rr], np.multiply, 1.0 / self.count)
        elif self.op in ("argmax", "argmin"):
            index, nans = state["index"][0:rr], state["nan_index"][0:rr]
            # select by multiplying with 0/1 flags (a difference of the two would cancel)
            has_nan = nisa.tensor_scalar(nans, np.less, BIG / 2, dtype=nl.float32)
            no_nan = nisa.tensor_scalar(nans, np.greater_equal, BIG / 2, dtype=nl.float32)
            at_nan = nisa.tensor_tensor(nans, has_nan, np.multiply, dtype=nl.float32)
            result[0:rr] = nisa.scalar_tensor_tensor(data=index, op0=np.multiply,
                                                     operand0=no_nan, op1=np.add,
                                                     operand1=at_nan)
        else:
            result[0:rr] = nisa.tensor_copy(state["acc"][0:rr])
        nl.store(out, value=result[0:rr])


def softmax(out: Tile, x: Tile, *, axis: int, scale: float = 1.0, log: bool = False,
            mask: Tile | None = None, safe: bool = False) -> None:
    """softmax (or log_softmax) over `axis` of x * scale (+ mask), statistics in fp32. `safe`:
    a row that is all -inf gives zeros (PyTorch's `_safe_softmax`, what scaled_dot_product_
    attention's math path calls) instead of NaN, from two [rows, 1] clamps, not extra passes."""
    axis = axis % x.ndim
    with kernel_scope("softmax"):
        operands = [out, x] + ([broadcast_to_shape(mask, x.shape)] if mask is not None else [])
        moved = [_moved_last(t, (axis,))[0] for t in operands]
        for problem in row_problems(moved, x.ndim - 1):
            out2, x2 = problem[0], problem[1]
            mask2 = problem[2] if mask is not None else None
            rows, cols = x2.shape
            done = _softmax_narrow(out2, x2, mask2, float(scale), log, safe)
            for t in nl.affine_range(ceil_div(rows - done, P)):
                r0, rr = done + t * P, min(P, rows - done - t * P)
                _softmax_rows(out2, x2, mask2, r0, rr, cols, float(scale), log, safe)


def _banded_rows(view: Tile, bands: int, j0: int, jn: int) -> Tile:
    """Rows of a [rows, cols] view as [128, jn, cols]: partition p holds rows p*bands + j0 ..
    p*bands + j0 + jn - 1 (consecutive rows, one run per partition when rows are dense)."""
    row_step, col_step = hbm_strides(view)
    return hbm_view(view, (P, jn, view.shape[1]), (bands * row_step, row_step, col_step),
                    offset=j0 * row_step)


def _softmax_narrow(out: Tile, x: Tile, mask: Tile | None, scale: float, log: bool,
                    safe: bool) -> int:
    """Many short rows (attention's [b*h*sq, sk] scores): each partition takes consecutive
    rows, so one DMA per operand moves [128, rows-per-partition, cols] (runs of >= 2 KiB, the
    DMA guide's efficient size) instead of a load and a store per 128 rows. Per block, the rows'
    maxima are one VectorE reduction; exp(x - max) with its row sum is one ScalarE activation
    per row band (the per-partition bias and accumulator the row-tile path uses); the
    normalisation is one VectorE multiply by the sums' inverse broadcast through a stride-0
    access pattern. Returns how many leading rows it computed (0: rows too few or too long;
    `_softmax_rows` takes the rest)."""
    rows, cols = x.shape
    bands = rows // P
    if bands < 2 or 4 * cols > CHUNK or (mask is not None and hbm_strides(mask)[1] != 1):
        return 0
    per = max(1, CHUNK // 2 // cols)
    for j0, jn in tiles(bands, per):
        with kernel_scope("softmax rows"):
            block = nl.ndarray((P, jn, cols), dtype=x.dtype, buffer=nl.sbuf)
            block[...] = nl.load(_banded_rows(x, bands, j0, jn))
            values = block
            if mask is not None or scale != 1.0:
                values = nl.ndarray((P, jn, cols), dtype=nl.float32, buffer=nl.sbuf)
                if mask is not None:
                    bias = nl.ndarray((P, jn, cols), dtype=mask.dtype, buffer=nl.sbuf)
                    bias[...] = nl.load(_banded_rows(mask, bands, j0, jn))
                    values[...] = nisa.scalar_tensor_tensor(data=block, op0=np.multiply,
                                                            operand0=scale, op1=np.add,
                                                            operand1=bias)
                else:
                    values[...] = nisa.tensor_scalar(block, np.multiply, scale)
            # the maximum of bf16 values is a bf16 value: reduced in bf16 (VectorE's fast mode)
            neg_max = nisa.tensor_reduce(np.max, values, axis=(2,), negate=True,
                                         dtype=values.dtype)
            if safe:  # an all -inf row: -max = +inf would make exp(-inf + inf) NaN
                neg_max = nisa.tensor_scalar(neg_max, np.minimum, BIG, dtype=nl.float32)
            probs = nl.ndarray((P, jn, cols), dtype=nl.float32, buffer=nl.sbuf)
            total = nl.ndarray((P, jn), dtype=nl.float32, buffer=nl.sbuf)
            for j in range(jn):
                probs[:, j, :] = nisa.activation(op=nl.exp, data=values[:, j, :],
                                                 bias=neg_max[:, j:j + 1], reduce_op=nl.add,
                                                 reduce_res=total[:, j:j + 1],
                                                 reduce_cmd=nisa.reduce_cmd.reset_reduce)
            result = nl.ndarray((P, jn, cols), dtype=out.dtype, buffer=nl.sbuf)
            if log:  # x - max - log(sum)
                shift = nisa.tensor_tensor(neg_max, nisa.activation(op=nl.log, data=total),
                                           np.subtract, dtype=nl.float32)
                result[...] = nisa.tensor_tensor(values, shift.ap([[jn, P], [1, jn], [0, cols]]),
                                                 np.add)
            else:
                inverse = nisa.reciprocal(total, dtype=nl.float32)
                if safe:  # an all -inf row sums to 0: 1/0 clamped, so its zeros stay zeros
                    inverse = nisa.tensor_scalar(inverse, np.minimum, BIG, dtype=nl.float32)
                result[...] = nisa.tensor_tensor(probs, inverse.ap([[jn, P], [1, jn], [0, cols]]),
                                                 np.multiply)
            nl.store(_banded_rows(out, bands, j0, jn), value=result)
    return P * bands


# Rows up to this many fp32 bytes per partition stay in SBUF between the two passes; longer
# rows (a language model's vocabulary: 30522 or 50257 logits) are read from HBM again in the
# second pass, as a streaming softmax does, so the kernel fits any row length.
KEEP_ROW_BYTES = 64 * 1024


def _shifted_chunk(view: Tile, x: Tile, mask: Tile | None, r0: int, rr: int, c0: int, cw: int,
                   scale: float, bias: Tile | None) -> None:
    """view = x[rows, c0:c0+cw] * scale (+ mask, loaded through `bias`), in fp32."""
    view[...] = nl.load(x[r0:r0 + rr, c0:c0 + cw])
    if mask is not None:
        load_block(bias[0:rr, 0:cw], mask[r0:r0 + rr, c0:c0 + cw])
        view[...] = nisa.scalar_tensor_tensor(data=view, op0=np.multiply, operand0=scale,
                                              op1=np.add, operand1=bias[0:rr, 0:cw])
    elif scale != 1.0:
        view[...] = nisa.tensor_scalar(view, np.multiply, scale)


def _softmax_rows(out: Tile, x: Tile, mask: Tile | None, r0: int, rr: int, cols: int,
                  scale: float, log: bool, safe: bool = False) -> None:
    """Pass 1: per chunk, shifted = x * scale + mask (kept in SBUF when the row is short), running
    max and sum (the sum rescaled by exp(old max - new max)); pass 2: exp(shifted - max) / sum,
    or shifted - max - log(sum)."""
    chunks = tiles(cols, CHUNK)
    keep = cols * 4 <= KEEP_ROW_BYTES
    shifted = nl.ndarray((P, cols), dtype=nl.float32, buffer=nl.sbuf) if keep else None
    scratch = None if keep else nl.ndarray((P, CHUNK), dtype=nl.float32, buffer=nl.sbuf)

    def block(dt):  # a chunk's buffer: fresh per chunk (chunks overlap) unless streaming, where
        # one buffer is reused (a trace keeps every tile it allocates until the kernel ends)
        shared = None if keep else nl.ndarray((P, CHUNK), dtype=dt, buffer=nl.sbuf)
        return lambda cw: shared if shared is not None else \
            nl.ndarray((P, cw), dtype=dt, buffer=nl.sbuf)

    new_bias, new_junk = block(nl.float32), block(nl.bfloat16)
    new_probs, new_stage = block(nl.float32), block(out.dtype)
    run_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    run_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    for i, (c0, cw) in enumerate(chunks):
        view = shifted[0:rr, c0:c0 + cw] if keep else scratch[0:rr, 0:cw]
        bias = new_bias(cw) if mask is not None else None
        _shifted_chunk(view, x, mask, r0, rr, c0, cw, scale, bias)
        chunk_max = nisa.tensor_reduce(np.max, view, axis=(1,), keepdims=True, dtype=nl.float32)
        new_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        new_max[0:rr] = (nisa.tensor_copy(chunk_max) if i == 0
                         else nisa.tensor_tensor(run_max[0:rr], chunk_max, np.maximum))
        neg = nisa.tensor_scalar(new_max[0:rr], np.multiply, -1.0, dtype=nl.float32)
        if safe:  # an all -inf row so far: keep exp(-inf - max) at 0, not NaN
            neg = nisa.tensor_scalar(neg, np.minimum, BIG, dtype=nl.float32)
        chunk_sum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        junk = new_junk(cw)
        junk[0:rr, 0:cw] = nisa.activation(op=nl.exp, data=view, bias=neg, reduce_op=nl.add,
                                     reduce_res=chunk_sum[0:rr],
                                     reduce_cmd=nisa.reduce_cmd.reset_reduce)
        if i == 0:
            run_sum[0:rr] = nisa.tensor_copy(chunk_sum[0:rr])
        else:  # run_sum * exp(old max - new max) + chunk_sum
            decay = nisa.activation(op=nl.exp, data=run_max[0:rr], bias=neg, dtype=nl.float32)
            run_sum[0:rr] = nisa.scalar_tensor_tensor(data=run_sum[0:rr], op0=np.multiply,
                                                      operand0=decay, op1=np.add,
                                                      operand1=chunk_sum[0:rr])
        run_max[0:rr] = nisa.tensor_copy(new_max[0:rr])
    neg_max = nisa.tensor_scalar(run_max[0:rr], np.multiply, -1.0, dtype=nl.float32)
    if safe:
        neg_max = nisa.tensor_scalar(neg_max, np.minimum, BIG, dtype=nl.float32)
    if log:
        log_sum = nisa.activation(op=nl.log, data=run_sum[0:rr], dtype=nl.float32)
        shift = nisa.tensor_tensor(neg_max, log_sum, np.subtract, dtype=nl.float32)
    else:
        inverse = nisa.reciprocal(run_sum[0:rr], dtype=nl.float32)
        if safe:
            inverse = nisa.tensor_scalar(inverse, np.minimum, BIG, dtype=nl.float32)
    for c0, cw in chunks:
        if keep:
            chunk = shifted[0:rr, c0:c0 + cw]
        else:  # read the row's chunk again from HBM
            chunk = scratch[0:rr, 0:cw]
            _shifted_chunk(chunk, x, mask, r0, rr, c0, cw, scale,
                           new_bias(cw) if mask is not None else None)
        stage, probs = new_stage(cw), new_probs(cw)
        if log:
            stage[0:rr, 0:cw] = nisa.activation(op="identity", data=chunk, bias=shift)
        else:
            probs[0:rr, 0:cw] = nisa.activation(op=nl.exp, data=chunk, bias=neg_max)
            stage[0:rr, 0:cw] = nisa.tensor_scalar(probs[0:rr, 0:cw], np.multiply, inverse)
        nl.store(out[r0:r0 + rr, c0:c0 + cw], value=stage[0:rr, 0:cw])


def cumsum(out: Tile, x: Tile, *, axis: int) -> None:
    """Running sum along `axis` (fp32 carry), a VectorE scan per chunk. Integers are exact to
    2^24 this way; a larger integer sum is refused (`exact_integers`), never rounded."""
    axis = axis % x.ndim
    with kernel_scope("cumsum"), exact_integers(x.dtype_spec.is_int):
        moved = [_moved_last(t, (axis,))[0] for t in (out, x)]
        for out2, x2 in row_problems(moved, x.ndim - 1):
            _cumsum_rows(out2, x2)


def _cumsum_rows(out2: Tile, x2: Tile) -> None:
    rows, cols = x2.shape
    for t in nl.affine_range(ceil_div(rows, P)):
        r0, rr = t * P, min(P, rows - t * P)
        carry = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        for i, (c0, cw) in enumerate(tiles(cols, CHUNK)):
            with kernel_scope("cumsum chunk"):
                block = nl.ndarray((P, cw), dtype=nl.float32, buffer=nl.sbuf)
                block[0:rr] = nl.load(x2[r0:r0 + rr, c0:c0 + cw])
                sums = nl.ndarray((P, cw), dtype=nl.float32, buffer=nl.sbuf)
                sums[0:rr] = nisa.tensor_tensor_scan(
                    block[0:rr], block[0:rr], 0.0 if i == 0 else carry[0:rr], np.add,
                    "bypass", dtype=nl.float32)
                carry[0:rr] = nisa.tensor_copy(sums[0:rr, cw - 1:cw])
                stage = nl.ndarray((P, cw), dtype=out2.dtype, buffer=nl.sbuf)
                stage[0:rr] = nisa.tensor_copy(sums[0:rr])
                nl.store(out2[r0:r0 + rr, c0:c0 + cw], value=stage[0:rr])


MAX8_COLUMNS = 16384  # the most elements per partition max8 reads


def topk(out: Tile, x: Tile, *, k: int, axis: int, largest: bool = True,
         part: str = "values") -> None:
    """out = the k largest (smallest) values of x along `axis`, best first, or (part "indices")
    their positions; ties go to the lower index."""
    if part not in ("values", "indices"):
        raise InvalidArgumentError(f"topk part {part!r} is not 'values' or 'indices'")
    axis = axis % x.ndim
    n = x.shape[axis]
    if not 0 < k <= n:
        raise InvalidArgumentError(f"topk k = {k} out of range for {n} elements")
    if n > MAX8_COLUMNS:
        raise UnsupportedError(f"topk over {n} elements along one axis (max8 reads at most "
                               f"{MAX8_COLUMNS} per partition; a two-pass top-k is not "
                               f"implemented)")
    check_fp32_exact(x)
    with kernel_scope("topk"):
        moved = [_moved_last(t, (axis,))[0] for t in (out, x)]
        for out2, x2 in row_problems(moved, x.ndim - 1):
            _topk_rows(out2, x2, k, largest, part)


def _topk_rows(out2: Tile, x2: Tile, k: int, largest: bool, part: str) -> None:
    rows, cols = x2.shape
    width = max(cols, 8)  # max8 reads at least 8 elements: pad with -BIG
    rounds = ceil_div(k, 8)
    sign = 1.0 if largest else -1.0
    for t in nl.affine_range(ceil_div(rows, P)):
        r0, rr = t * P, min(P, rows - t * P)
        with kernel_scope("topk rows"):
            data = nl.ndarray((P, width), dtype=nl.float32, buffer=nl.sbuf)
            if cols < width:
                data[0:rr] = nisa.memset((rr, width), -BIG, nl.float32)
            load_block(data[0:rr, 0:cols], x2[r0:r0 + rr, :])
            if not largest:
                data[0:rr, 0:cols] = nisa.tensor_scalar(data[0:rr, 0:cols], np.multiply, -1.0)
            best = nl.ndarray((P, 8 * rounds), dtype=nl.float32, buffer=nl.sbuf)
            where = nl.ndarray((P, 8 * rounds), dtype=nl.uint32, buffer=nl.sbuf)
            for r in range(rounds):
                found = slice(8 * r, 8 * r + 8)
                best[0:rr, found] = nisa.max8(src=data[0:rr])
                if part == "indices" or r < rounds - 1:
                    data[0:rr] = nisa.nc_match_replace8(data=data[0:rr], vals=best[0:rr, found],
                                                        imm=-BIG, dst_idx=where[0:rr, found])
            stage = nl.ndarray((P, k), dtype=out2.dtype, buffer=nl.sbuf)
            if part == "values":
                stage[0:rr] = nisa.tensor_scalar(best[0:rr, 0:k], np.multiply, sign)
            else:
                stage[0:rr] = nisa.tensor_copy(where[0:rr, 0:k])
            nl.store(out2[r0:r0 + rr, :], value=stage[0:rr])
