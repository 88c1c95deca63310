"""k.conv2d: NCHW convolution as implicit GEMM on TensorE (depthwise on VectorE).

out[n, o, y, x] = sum over (c, kh, kw) of w[o, c, kh, kw] * xpad[n, c, y*s + kh*d, x*s + kw*d].

- Contraction over input channels on partitions, one accumulation matmul per (channel tile, kh,
  kw): stationary = W[:, c, kh, kw]^T ([c, o], from TensorE transposes of the weight rows, done
  once), moving = a strided view of the padded input band ([c, out rows, out cols], the conv
  stride as the view's step), PSUM = [o, positions]: output channels on partitions, positions
  along the free axis - already NCHW, so each output row block is stored contiguously.
- The input is held as padded bands of rows in SBUF (memset 0, valid rows DMAed in, cast to the
  compute dtype), so no im2col copy is ever materialised.
- Bias is per output channel = per partition: it rides on the ScalarE eviction; the epilogue
  gets [o, positions] accumulator blocks and the matching extras blocks.
- Grouped convolutions run group by group; depthwise ones (one input channel per group and one
  output per group) put channels on partitions and accumulate kh*kw per-partition-scalar
  multiply-adds on VectorE, which beats a 1-row contraction on TensorE.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from trnsim.errors import InvalidArgumentError, UnsupportedError
from trnsim.kernels.layout import (
    BANK_FP32,
    Evictor,
    P,
    broadcast_to_shape,
    hbm_strides,
    hbm_view,
    kernel_scope,
    load_block,
    tiles,
)
from trnsim.nki import isa as nisa
from trnsim.nki import language as nl
from trnsim.nki.tile import Tile

BAND_BYTES = 48 * 1024  # SBUF bytes per partition for one padded input band


def conv2d(out: Tile, x: Tile, w: Tile, *, bias: Tile | None = None, extras: Sequence[Tile] = (),
           stride: Sequence[int] = (1, 1), padding: Sequence[int] = (0, 0),
           dilation: Sequence[int] = (1, 1), groups: int = 1, compute_dtype="bfloat16",
           epilogue: Callable | None = None) -> None:
    """See the module docstring and the contract in `trnsim.kernels`."""
    if x.ndim != 4 or w.ndim != 4 or out.ndim != 4:
        raise InvalidArgumentError(f"conv2d needs NCHW/OIHW operands; got {list(x.shape)}, "
                                   f"{list(w.shape)} -> {list(out.shape)}")
    _, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if c != cg * groups or o % groups:
        raise InvalidArgumentError(f"conv2d: {c} input channels, weight {list(w.shape)}, "
                                   f"groups {groups}")
    geometry = _Geometry(h, wd, out.shape[2], out.shape[3], (kh, kw), tuple(stride),
                         tuple(padding), tuple(dilation))
    with kernel_scope("conv2d"):
        extras_full = [broadcast_to_shape(e, out.shape) for e in extras]
        evictor = Evictor()
        og = o // groups
        if cg == 1 and og == 1:
            _depthwise(out, x, w, bias, extras_full, geometry, compute_dtype, epilogue, evictor)
            return
        for g in range(groups):
            with kernel_scope("conv group"):
                _group(out, x, w, bias, extras_full, geometry, compute_dtype, epilogue, evictor,
                       c0=g * cg, channels=cg, o0=g * og, outputs=og)


class _Geometry:
    def __init__(self, h, w, oh, ow, kernel, stride, padding, dilation) -> None:
        self.h, self.w, self.oh, self.ow = h, w, oh, ow
        self.kernel, self.stride, self.padding, self.dilation = kernel, stride, padding, dilation
        self.span = tuple((k - 1) * d + 1 for k, d in zip(kernel, dilation, strict=True))
        self.width = max(w + 2 * padding[1], (ow - 1) * stride[1] + self.span[1])
        if ow > BANK_FP32:
            raise UnsupportedError(f"conv2d output rows of {ow} > {BANK_FP32} columns are not tiled yet")

    def bands(self, bytes_per_row: int, rows_per_block: int) -> list[tuple[int, int]]:
        """Output row bands: each a whole number of PSUM blocks, its input band within budget."""
        sh = self.stride[0]
        fit = max(1, ((BAND_BYTES // max(bytes_per_row, 1)) - self.span[0]) // sh + 1)
        band = max(rows_per_block, fit // rows_per_block * rows_per_block)
        return tiles(self.oh, band)

    def load_band(self, dst: Tile, x_rows: Tile, channels: int, b0: int, bn: int) -> None:
        """dst [channels, rows, width] = input rows of output rows b0..b0+bn, zero padded.
        `x_rows` is x[n, channel range] as [channels, H, W]."""
        sh = self.stride[0]
        ph, pw = self.padding
        first = b0 * sh - ph
        rows = (bn - 1) * sh + self.span[0]
        dst[0:channels, 0:rows, :] = nisa.memset((channels, rows, self.width), 0.0, dst.dtype)
        lo, hi = max(first, 0), min(first + rows, self.h)
        if hi > lo:
            dst[0:channels, lo - first:hi - first, pw:pw + self.w] = nl.load(x_rows[:, lo:hi, :])

    def window(self, band: Tile, channels: int, a: int, b: int, rows: int) -> Tile:
        """The [channels, rows, ow] view of the band under kernel offset (a, b)."""
        sh, sw = self.stride
        dh, dw = self.dilation
        return band[0:channels, a * dh:a * dh + (rows - 1) * sh + 1:sh,
                    b * dw:b * dw + (self.ow - 1) * sw + 1:sw]


def _group(out, x, w, bias, extras, geo: _Geometry, cdt, epilogue, evictor, *, c0: int,
           channels: int, o0: int, outputs: int) -> None:
    kh, kw = geo.kernel
    c_tiles = tiles(channels, P)
    o_tiles = tiles(outputs, P)
    taps = kh * kw
    weights = _transposed_weights(w, o0, outputs, channels, taps, cdt, evictor)
    bias_cols = _bias_columns(bias, o0, outputs) if bias is not None else None
    rows_per_block = max(1, BANK_FP32 // geo.ow)
    itemsize = 2 if str(cdt) in ("bfloat16", "float16") else 4
    bands = geo.bands(len(c_tiles) * geo.width * itemsize, rows_per_block)
    for image in range(x.shape[0]):
        x_img = x[image]
        for b0, bn in bands:
            with kernel_scope("conv band"):
                rows = (bn - 1) * geo.stride[0] + geo.span[0]
                band = nl.ndarray((P, len(c_tiles), rows, geo.width), dtype=cdt, buffer=nl.sbuf)
                for t, (ci, cr) in enumerate(c_tiles):
                    geo.load_band(band[:, t], x_img[c0 + ci:c0 + ci + cr], cr, b0, bn)
                for r0, rn in tiles(bn, rows_per_block):
                    for (oi, orr) in o_tiles:
                        with kernel_scope("conv block"):
                            acc = nl.zeros((P, BANK_FP32), dtype=nl.float32, buffer=nl.psum)
                            view = acc[0:orr, 0:rn * geo.ow]
                            for t, (_, cr) in enumerate(c_tiles):
                                for a in range(kh):
                                    for b in range(kw):
                                        view[...] += nisa.nc_matmul(
                                            weights[0:cr, t, a * kw + b, oi:oi + orr],
                                            _shift_rows(band[:, t], geo, cr, a, b, r0, rn))
                            _finish(out, image, o0 + oi, orr, b0 + r0, rn, geo, view,
                                    bias_cols[0:orr, oi // P:oi // P + 1]
                                    if bias_cols is not None else None,
                                    extras, epilogue, evictor)


def _shift_rows(band: Tile, geo: _Geometry, channels: int, a: int, b: int, r0: int,
                rn: int) -> Tile:
    """The moving operand: kernel tap (a, b) over output rows r0..r0+rn of the band."""
    sh, sw = geo.stride
    dh, dw = geo.dilation
    top = r0 * sh + a * dh
    return band[0:channels, top:top + (rn - 1) * sh + 1:sh,
                b * dw:b * dw + (geo.ow - 1) * sw + 1:sw]


def _transposed_weights(w: Tile, o0: int, outputs: int, channels: int, taps: int, cdt,
                        evictor: Evictor) -> Tile:
    """SBUF [128 (c), c tiles, taps, outputs]: W[o0 + o, c, tap]^T (c is the group's local
    channel), via TensorE transposes of contiguous weight rows."""
    c_tiles = tiles(channels, P)
    resident = nl.ndarray((P, len(c_tiles), taps, outputs), dtype=cdt, buffer=nl.sbuf)
    for oi, orr in tiles(outputs, P):
        with kernel_scope("weight rows"):
            rows = nl.ndarray((P, channels * taps), dtype=cdt, buffer=nl.sbuf)
            _load_weight_rows(rows[0:orr], w, o0 + oi, orr)
            pairs = [(t, tap) for t in range(len(c_tiles)) for tap in range(taps)]
            for i in range(0, len(pairs), 4):
                with kernel_scope("weight transposes"):
                    bank = nl.ndarray((P, 4, P), dtype=nl.float32, buffer=nl.psum)
                    chunk = pairs[i:i + 4]
                    for j, (t, tap) in enumerate(chunk):
                        ci, cr = c_tiles[t]
                        cols = rows[0:orr, ci * taps + tap:(ci + cr) * taps:taps]
                        bank[0:cr, j, 0:orr] = nisa.nc_transpose(cols)
                    for j, (t, tap) in enumerate(chunk):
                        cr = c_tiles[t][1]
                        evictor.copy(resident[0:cr, t, tap, oi:oi + orr], bank[0:cr, j, 0:orr])
    return resident


def _load_weight_rows(dst: Tile, w: Tile, o0: int, count: int) -> None:
    """dst [count, C * kh * kw] = rows o0.. of the OIHW weight. A weight that is a view (the
    flipped, channel-swapped weight of a convolution's backward) is read through its strides."""
    _, c, kh, kw = w.shape
    steps = hbm_strides(w)
    dense = all(size == 1 or step == want for size, step, want in
                zip((c, kh, kw), steps[1:], (kh * kw, kw, 1), strict=True))
    if dense:
        dst[...] = nl.load(hbm_view(w, (count, c * kh * kw), (steps[0], 1), offset=o0 * steps[0]))
    else:
        dst.reshape((count, c, kh, kw))[...] = nl.load(w[o0:o0 + count])


def _bias_columns(bias: Tile, o0: int, outputs: int) -> Tile:
    """bias[o0:o0+outputs] as [128, output tiles] fp32: column t is output tile t."""
    cols = nl.ndarray((P, -(-outputs // P)), dtype=nl.float32, buffer=nl.sbuf)
    step = hbm_strides(bias)[0]
    for t, (oi, orr) in enumerate(tiles(outputs, P)):
        cols[0:orr, t:t + 1] = nl.load(hbm_view(bias, (orr, 1), (step, 1),
                                                offset=(o0 + oi) * step))
    return cols


def _finish(out: Tile, image: int, o0: int, orr: int, y0: int, rn: int, geo: _Geometry,
            acc: Tile, bias_col: Tile | None, extras, epilogue, evictor: Evictor) -> None:
    """Bias on the eviction, epilogue with the extras' [o, positions] blocks, store."""
    positions = rn * geo.ow
    value = acc
    if bias_col is not None:
        value = nl.ndarray((P, positions), dtype=nl.float32, buffer=nl.sbuf)
        value[0:orr] = nisa.activation(op="identity", data=acc, bias=bias_col)
        value = value[0:orr]
    stage = nl.ndarray((P, positions), dtype=out.dtype, buffer=nl.sbuf)
    if epilogue is not None:
        blocks = []
        for extra in extras:
            block = nl.ndarray((P, positions), dtype=extra.dtype, buffer=nl.sbuf)
            load_block(block[0:orr], _positions(extra, image, o0, orr, y0, rn, geo))
            blocks.append(block[0:orr])
        stage[0:orr] = epilogue(value, blocks)
    else:
        evictor.copy(stage[0:orr], value)
    nl.store(_positions(out, image, o0, orr, y0, rn, geo), value=stage[0:orr])


def _positions(t: Tile, image: int, o0: int, orr: int, y0: int, rn: int,
               geo: _Geometry) -> Tile:
    """[channels o0..o0+orr, rows y0..y0+rn x all columns] of an NCHW view, as 2-D."""
    sn, so, sy, sx = hbm_strides(t)
    offset = image * sn + o0 * so + y0 * sy
    if sy == geo.ow * sx:
        return hbm_view(t, (orr, rn * geo.ow), (so, sx), offset=offset)
    return hbm_view(t, (orr, rn, geo.ow), (so, sy, sx), offset=offset)


def _depthwise(out, x, w, bias, extras, geo: _Geometry, cdt, epilogue, evictor) -> None:
    """One channel per group: channels on partitions, kh*kw multiply-adds on VectorE."""
    n, c = x.shape[:2]
    kh, kw = geo.kernel
    taps = kh * kw
    rows_per_block = max(1, BANK_FP32 // geo.ow)
    bands = geo.bands(geo.width * 4, rows_per_block)
    for ci, cr in tiles(c, P):
        with kernel_scope("depthwise channels"):
            taps_w = nl.ndarray((P, taps), dtype=cdt, buffer=nl.sbuf)  # rounded on load
            _load_weight_rows(taps_w[0:cr], w, ci, cr)
            bias_col = None
            if bias is not None:
                bias_col = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
                bias_col[0:cr] = nl.load(hbm_view(bias, (cr, 1), (hbm_strides(bias)[0], 1),
                                                  offset=ci * hbm_strides(bias)[0]))
            for image in range(n):
                for b0, bn in bands:
                    with kernel_scope("depthwise band"):
                        rows = (bn - 1) * geo.stride[0] + geo.span[0]
                        band = nl.ndarray((P, rows, geo.width), dtype=cdt, buffer=nl.sbuf)
                        geo.load_band(band, x[image, ci:ci + cr], cr, b0, bn)
                        acc = nl.ndarray((P, bn, geo.ow), dtype=nl.float32, buffer=nl.sbuf)
                        for tap in range(taps):
                            view = geo.window(band, cr, tap // kw, tap % kw, bn)
                            weight = taps_w[0:cr, tap:tap + 1]
                            if tap == 0:
                                acc[0:cr] = nisa.tensor_scalar(view, np.multiply, weight,
                                                               dtype=nl.float32)
                            else:
                                acc[0:cr] = nisa.scalar_tensor_tensor(
                                    data=view, op0=np.multiply, operand0=weight, op1=np.add,
                                    operand1=acc[0:cr])
                        flat = acc[0:cr].ap([[1, cr], [1, bn * geo.ow]])
                        for r0, rn in tiles(bn, rows_per_block):
                            part = flat[:, r0 * geo.ow:(r0 + rn) * geo.ow]
                            _finish(out, image, ci, cr, b0 + r0, rn, geo, part,
                                    bias_col[0:cr] if bias_col is not None else None,
                                    extras, epilogue, evictor)
