"""k.norm: layer norm and RMS norm over the trailing `normalized` axes (statistics in fp32).

Layout: rows (the leading axes, folded) on partitions, 128 per tile; the normalised axes (folded)
along the free axis. Per tile, one pass per engine where the hardware allows:

- residual add on GpSimd (fp32 SBUF), leaving VectorE to the statistics;
- layer: VectorE bn_stats per 512 columns + one bn_aggr -> mean, var; rms: one ScalarE
  activation(square) whose accumulator gives the sum of squares;
- rstd = rsqrt(var + eps) and -mean * rstd on [128, 1] columns;
- normalisation on ScalarE as activation(identity, x, scale=rstd, bias=-mean*rstd), or, with a
  weight, (x - mean) * w in one VectorE scalar_tensor_tensor and then * rstd (+ bias) in a
  second one on GpSimd; the last pass writes the output dtype.

Weight and bias rows are broadcast to 128 partitions once per kernel (`broadcast_row`). Rows
wider than `ONE_PASS_BYTES` per partition are processed in column chunks over two passes (the
statistics pass, then the normalisation pass re-reading x).

One row alone (a norm of a batch-1 decode step) would leave 127 partitions idle and run each
ScalarE/VectorE pass over the whole hidden width on one lane. Neuron's token-generation graphs
instead keep the hidden axis on partitions (transformers-neuronx: the default "HSB" layout,
hidden first; ``rms_norm`` calls its ``AwsNeuronRmsNorm`` kernel when there is one token, "for
batch == 1, token generation", and ``layer_norm`` reduces over that hidden axis, a batch norm
with the tokens as features). So a single row whose width divides into 128 partitions is folded
(`_one_row`) across as many partitions as bring each share to one minimum-width engine pass
(`_fold_parts`; more would only spread each DMA over more DMA engines): each partition reduces
its share, a TensorE product with a ones matrix sums the partitions' partial sums and gives
every partition the total (the cross-partition reduction NKI kernels do on TensorE), and each
partition normalises its share. RMS: one such sum (of squares). Layer: two, as the unfolded
path's bn_aggr centres its variance: the sum gives the mean, then each partition sums its
squared deviations from it (no E[x^2] - mean^2 cancellation), and a second product gives the
variance.
"""

from __future__ import annotations

import numpy as np

from trnsim.errors import InvalidArgumentError
from trnsim.kernels.layout import (
    BN_CHUNK,
    TILED_FOR,
    Evictor,
    P,
    broadcast_row,
    ceil_div,
    hbm_strides,
    hbm_view,
    kernel_scope,
    merged,
    numel,
    row_problems,
    spare_engine,
    tiles,
)
from trnsim.nki import isa as nisa
from trnsim.nki import language as nl
from trnsim.nki.tile import Tile

ONE_PASS_BYTES = 16 * 1024  # fp32 bytes per partition of one row tile kept on chip
# A single row is folded until each partition's share is at most this many elements: an engine
# pass costs max(MIN_II, N) cycles, so more partitions would not shorten it, only spread each
# DMA over more DMA engines (8 partitions each), every one paying its per-transfer overhead.
FOLD_SHARE = TILED_FOR.costs.min_ii_cycles
CHUNK = 2048  # columns per chunk in the two-pass path


def norm(out: Tile, x: Tile, *, kind: str = "layer", normalized: int = 1, eps: float = 1e-5,
         residual: Tile | None = None, weight: Tile | None = None,
         bias: Tile | None = None) -> None:
    """See the module docstring and the contract in `trnsim.kernels`."""
    if kind not in ("layer", "rms"):
        raise InvalidArgumentError(f"norm kind {kind!r}; use 'layer' or 'rms'")
    if not 1 <= normalized <= x.ndim:
        raise InvalidArgumentError(f"norm over {normalized} trailing axes of {list(x.shape)}")
    split = x.ndim - normalized
    cols = numel(x.shape[split:])
    operands = [t for t in (out, x, residual) if t is not None]
    lead = [_columns_last(t, split, cols) for t in operands]
    params = [merged(t, 0) for t in (weight, bias) if t is not None]
    if any(v is None for v in lead + params):
        raise InvalidArgumentError(f"norm: the normalised axes of {list(x.shape)} are not one "
                                   f"strided run in every operand; copy first")
    with kernel_scope("norm"):
        evictor = Evictor()
        two_pass = cols * 4 > ONE_PASS_BYTES
        w_hbm = params[0][0] if weight is not None else None
        b_hbm = params[-1][0] if bias is not None else None
        problems = row_problems(lead, split)
        if cols % P == 0 and all(problem[1].shape[0] == 1 for problem in problems):
            for problem in problems:  # single rows: folded over the partitions
                _one_row(problem[0], problem[1], problem[2] if residual is not None else None,
                         cols, kind, eps, w_hbm, b_hbm)
            return
        if two_pass:  # broadcast per column chunk (the whole rows would not fit)
            w_rows, b_rows = w_hbm, b_hbm
        else:
            w_rows = broadcast_row(w_hbm, evictor) if w_hbm is not None else None
            b_rows = broadcast_row(b_hbm, evictor) if b_hbm is not None else None
        for problem in problems:
            out2, x2 = problem[0], problem[1]
            res2 = problem[2] if residual is not None else None
            rows = x2.shape[0]
            for t in nl.affine_range(ceil_div(rows, P)):
                r0, rr = t * P, min(P, rows - t * P)
                ctx = _RowTile(out2, x2, res2, r0, rr, cols, kind, eps, w_rows, b_rows, evictor)
                if two_pass:
                    ctx.two_pass()
                else:
                    ctx.one_pass()


def _fold_parts(cols: int) -> int:
    """Partitions one row of `cols` (a multiple of 128) is folded over: the fewest, a power of
    two, that bring each share to `FOLD_SHARE` elements or fewer (at most 128)."""
    parts = 1
    while parts < P and cols > parts * FOLD_SHARE:
        parts *= 2
    return parts


def _folded(row: Tile, cols: int) -> Tile:
    """A one-row HBM view ([1, cols] or [cols]) as [parts, cols / parts]: partition p holds
    columns p * w .. (p + 1) * w."""
    step = hbm_strides(row)[-1]
    parts = _fold_parts(cols)
    width = cols // parts
    start = row[0] if row.ndim == 2 else row
    return hbm_view(start, (parts, width), (width * step, step))


def _one_row(out: Tile, x: Tile, residual: Tile | None, cols: int, kind: str, eps: float,
             weight: Tile | None, bias: Tile | None) -> None:
    """A layer or RMS norm of one row folded over the partitions (module docstring)."""
    parts = _fold_parts(cols)
    width = cols // parts
    value = _load_folded(x, cols)
    if residual is not None:
        value[...] = nisa.tensor_tensor(value, _load_folded(residual, cols), np.add,
                                        engine=spare_engine())
    ones = nl.ndarray((parts, parts), dtype=nl.float32, buffer=nl.sbuf)
    ones[...] = nisa.memset((parts, parts), 1.0, nl.float32)
    offset = None  # -mean, per partition (layer norm)
    if kind == "layer":
        sums = nl.ndarray((parts, 1), dtype=nl.float32, buffer=nl.sbuf)
        sums[...] = nisa.tensor_reduce(np.add, value, axis=(1,), keepdims=True,
                                       dtype=nl.float32)
        offset = nl.ndarray((parts, 1), dtype=nl.float32, buffer=nl.sbuf)
        offset[...] = nisa.tensor_scalar(_all_partitions(ones, sums), np.multiply, -1.0 / cols)
    squares = nl.ndarray((parts, width), dtype=nl.bfloat16, buffer=nl.sbuf)  # discarded
    partial = nl.ndarray((parts, 1), dtype=nl.float32, buffer=nl.sbuf)
    squares[...] = nisa.activation(op=nl.square, data=value, bias=offset, reduce_op=nl.add,
                                   reduce_res=partial, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    scale = nl.ndarray((parts, 1), dtype=nl.float32, buffer=nl.sbuf)
    scale[...] = nisa.activation(op=nl.rsqrt, data=_all_partitions(ones, partial),
                                 scale=1.0 / cols, bias=float(eps))
    stage = nl.ndarray((parts, width), dtype=out.dtype, buffer=nl.sbuf)
    _one_row_normalise(stage, value, cols, offset, scale, weight, bias)
    nl.store(_folded(out, cols), value=stage)


def _all_partitions(ones: Tile, partial: Tile) -> Tile:
    """Every partition's copy of the sum of `partial` ([parts, 1]) over the partitions: a
    TensorE product with a ones matrix, in PSUM."""
    total = nl.ndarray((partial.shape[0], 1), dtype=nl.float32, buffer=nl.psum)
    total[...] = nisa.nc_matmul(ones, partial)
    return total


def _one_row_normalise(stage: Tile, value: Tile, cols: int, offset: Tile | None, scale: Tile,
                       weight: Tile | None, bias: Tile | None) -> None:
    """stage = (value + offset) * scale (* weight) (+ bias) of a folded row (offset None: 0),
    the last pass writing stage's dtype."""
    parts, width = stage.shape
    w, b = (_load_folded(vector, cols) if vector is not None else None
            for vector in (weight, bias))
    target = stage if b is None else nl.ndarray((parts, width), dtype=nl.float32,
                                                buffer=nl.sbuf)
    if w is None:
        shift = None
        if offset is not None:
            shift = nl.ndarray((parts, 1), dtype=nl.float32, buffer=nl.sbuf)
            shift[...] = nisa.tensor_tensor(offset, scale, np.multiply)
        target[...] = nisa.activation(op="identity", data=value, scale=scale, bias=shift)
    elif offset is None:
        target[...] = nisa.scalar_tensor_tensor(data=value, op0=np.multiply, operand0=scale,
                                                op1=np.multiply, operand1=w)
    else:  # (x - mean) * w, then * rstd (+ bias) in one pass below
        weighted = nl.ndarray((parts, width), dtype=nl.float32, buffer=nl.sbuf)
        weighted[...] = nisa.scalar_tensor_tensor(data=value, op0=np.add, operand0=offset,
                                                  op1=np.multiply, operand1=w)
        if b is not None:
            stage[...] = nisa.scalar_tensor_tensor(data=weighted, op0=np.multiply,
                                                   operand0=scale, op1=np.add, operand1=b)
            return
        target[...] = nisa.activation(op="identity", data=weighted, scale=scale)
    if b is not None:
        stage[...] = nisa.tensor_tensor(target, b, np.add, engine=spare_engine())


def _load_folded(row: Tile, cols: int) -> Tile:
    """A one-row HBM vector folded over the partitions, fp32 in SBUF."""
    parts = _fold_parts(cols)
    loaded = nl.ndarray((parts, cols // parts), dtype=nl.float32, buffer=nl.sbuf)
    loaded[...] = nl.load(_folded(row, cols))
    return loaded


def _columns_last(t: Tile, split: int, cols: int) -> Tile | None:
    """t as [*leading axes, normalised axes merged] (None if they do not merge)."""
    normalised = merged(hbm_view(t, (1, *t.shape[split:]), (0, *hbm_strides(t)[split:])), 1)
    if normalised is None:
        return None
    step = hbm_strides(normalised)[1]
    return hbm_view(t, (*t.shape[:split], cols), (*hbm_strides(t)[:split], step))


class _RowTile:
    def __init__(self, out, x, residual, r0, rr, cols, kind, eps, weight, bias,
                 evictor: Evictor) -> None:
        self.out, self.x, self.residual = out, x, residual
        self.r0, self.rr, self.cols, self.kind, self.eps = r0, rr, cols, kind, eps
        self.weight, self.bias, self.evictor = weight, bias, evictor

    def _load(self, c0: int, cw: int) -> Tile:
        """x (+ residual) columns c0..c0+cw of this row tile, fp32 in SBUF."""
        rr = self.rr
        value = nl.ndarray((P, cw), dtype=nl.float32, buffer=nl.sbuf)
        value[0:rr] = nl.load(self.x[self.r0:self.r0 + rr, c0:c0 + cw])
        if self.residual is not None:
            other = nl.ndarray((P, cw), dtype=nl.float32, buffer=nl.sbuf)
            other[0:rr] = nl.load(self.residual[self.r0:self.r0 + rr, c0:c0 + cw])
            value[0:rr] = nisa.tensor_tensor(value[0:rr], other[0:rr], np.add,
                                             engine=spare_engine())
        return value

    def one_pass(self) -> None:
        value = self._load(0, self.cols)
        stats = _Stats(self.kind, self.cols, self.rr)
        stats.add(value[0:self.rr], 0)
        self._normalise(value, 0, self.cols, *stats.finish(self.eps))

    def two_pass(self) -> None:
        stats = _Stats(self.kind, self.cols, self.rr)
        for c0, cw in tiles(self.cols, CHUNK):
            with kernel_scope("statistics chunk"):
                stats.add(self._load(c0, cw)[0:self.rr], c0)
        terms = stats.finish(self.eps)
        weight, bias = self.weight, self.bias  # HBM vectors here
        for c0, cw in tiles(self.cols, CHUNK):
            with kernel_scope("normalise chunk"):
                self.weight = (broadcast_row(weight[c0:c0 + cw], self.evictor)
                               if weight is not None else None)
                self.bias = (broadcast_row(bias[c0:c0 + cw], self.evictor)
                             if bias is not None else None)
                self._normalise(self._load(c0, cw), 0, cw, *terms, column=c0)
        self.weight, self.bias = weight, bias

    def _normalise(self, value: Tile, c0: int, cw: int, scale: Tile, shift: Tile,
                   offset: Tile, column: int | None = None) -> None:
        """out = (value * scale + shift) (* weight) (+ bias), cast to out's dtype, stored;
        offset = shift / scale (-mean, or 0 for rms). Weight/bias columns start at c0, the
        output's at `column` (default c0)."""
        rr = self.rr
        column = c0 if column is None else column
        x = value[0:rr]
        stage = nl.ndarray((P, cw), dtype=self.out.dtype, buffer=nl.sbuf)
        if self.weight is None:
            target = stage if self.bias is None else nl.ndarray((P, cw), dtype=nl.float32,
                                                                buffer=nl.sbuf)
            target[0:rr] = nisa.activation(op="identity", data=x, scale=scale[0:rr],
                                           bias=shift[0:rr])
            if self.bias is not None:
                stage[0:rr] = nisa.tensor_tensor(target[0:rr], self.bias[0:rr, c0:c0 + cw],
                                                 np.add, engine=spare_engine())
        else:
            # (x * scale + shift) * w = (x + offset) * w * scale
            weighted = nl.ndarray((P, cw), dtype=nl.float32, buffer=nl.sbuf)
            weighted[0:rr] = nisa.scalar_tensor_tensor(
                data=x, op0=np.add, operand0=offset[0:rr], op1=np.multiply,
                operand1=self.weight[0:rr, c0:c0 + cw])
            if self.bias is None:
                stage[0:rr] = nisa.activation(op="identity", data=weighted[0:rr],
                                              scale=scale[0:rr])
            else:
                stage[0:rr] = nisa.scalar_tensor_tensor(
                    data=weighted[0:rr], op0=np.multiply, operand0=scale[0:rr], op1=np.add,
                    operand1=self.bias[0:rr, c0:c0 + cw])
        nl.store(self.out[self.r0:self.r0 + rr, column:column + cw], value=stage[0:rr])


class _Stats:
    """Row statistics accumulated over column chunks: bn_stats records (layer) or a running sum
    of squares (rms)."""

    def __init__(self, kind: str, cols: int, rows: int) -> None:
        self.kind, self.cols, self.rows = kind, cols, rows
        if kind == "layer":
            self.records = nl.ndarray((P, 6 * ceil_div(cols, BN_CHUNK)), dtype=nl.float32,
                                      buffer=nl.sbuf)
        else:
            chunks = ceil_div(cols, CHUNK)
            self.partial = nl.ndarray((P, chunks), dtype=nl.float32, buffer=nl.sbuf)

    def add(self, x: Tile, c0: int) -> None:
        rr, cw = x.shape
        if self.kind == "layer":
            for a0, aw in tiles(cw, BN_CHUNK):
                i = (c0 + a0) // BN_CHUNK
                self.records[0:rr, 6 * i:6 * i + 6] = nisa.bn_stats(x[:, a0:a0 + aw],
                                                                    dtype=nl.float32)
            return
        i = c0 // CHUNK
        squares = nl.ndarray((P, cw), dtype=nl.bfloat16, buffer=nl.sbuf)  # discarded values
        squares[0:rr] = nisa.activation(op=nl.square, data=x, reduce_op=nl.add,
                                        reduce_res=self.partial[0:rr, i:i + 1],
                                        reduce_cmd=nisa.reduce_cmd.reset_reduce)

    def finish(self, eps: float) -> tuple[Tile, Tile, Tile]:
        """Per-row (scale, shift, offset): normalised = x * scale + shift = (x + offset) *
        scale."""
        rr = self.rows
        scale = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        shift = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        offset = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        if self.kind == "layer":
            mean_var = nisa.bn_aggr(self.records[0:rr], dtype=nl.float32)
            scale[0:rr] = nisa.activation(op=nl.rsqrt, data=mean_var[:, 1:2], bias=float(eps))
            offset[0:rr] = nisa.tensor_scalar(mean_var[:, 0:1], np.multiply, -1.0)
            shift[0:rr] = nisa.tensor_tensor(offset[0:rr], scale[0:rr], np.multiply)
            return scale, shift, offset
        total = nisa.tensor_reduce(np.add, self.partial[0:rr], axis=(1,), keepdims=True,
                                   dtype=nl.float32)
        scale[0:rr] = nisa.activation(op=nl.rsqrt, data=total, scale=1.0 / self.cols,
                                      bias=float(eps))
        shift[0:rr] = nisa.memset((rr, 1), 0.0, nl.float32)
        offset[0:rr] = nisa.memset((rr, 1), 0.0, nl.float32)
        return scale, shift, offset
