"""k.pool2d: max / average / adaptive-average pooling of NCHW tensors.

Layout: images (N*C) on partitions, 128 per tile; each image's rows along the free axis. A band
of output rows is computed from a padded band of input rows held in SBUF (memset to the padding
value, the valid rows DMAed into its interior, each input row one contiguous run). A window
offset (kh, kw) is a strided view of the band ([out rows, out cols] with the pooling stride),
so max/avg pooling is kh*kw VectorE max/add passes over the band's outputs. Average divisors
(count_include_pad, ceil_mode overhang, divisor_override) are computed when the kernel is traced
- they depend only on shapes - and applied as one multiply by a constant map. Adaptive average
pooling sums each output row's input rows, then each output column's span of that sum.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trnsim.errors import InvalidArgumentError
from trnsim.kernels.layout import P, ceil_div, hbm_strides, hbm_view, kernel_scope, merged
from trnsim.nki import isa as nisa
from trnsim.nki import language as nl
from trnsim.nki.tile import Tile

BAND_BYTES = 48 * 1024  # fp32 bytes per partition of one padded input band
NEG = -3.0e38


def pool2d(out: Tile, x: Tile, *, kind: str, kernel: Sequence[int] = (1, 1),
           stride: Sequence[int] | None = None, padding: Sequence[int] = (0, 0),
           dilation: Sequence[int] = (1, 1), ceil_mode: bool = False,
           count_include_pad: bool = True, divisor_override: int | None = None,
           output_size: Sequence[int] | None = None) -> None:
    """See the module docstring and the contract in `trnsim.kernels`."""
    if x.ndim < 2 or kind not in ("max", "avg", "adaptive_avg"):
        raise InvalidArgumentError(f"pool2d kind {kind!r} on {list(x.shape)}")
    h, w = x.shape[-2:]
    images = merged(x, x.ndim - 2)
    outs = merged(out, out.ndim - 2)
    if images is None or outs is None or hbm_strides(images)[1] != 1:
        raise InvalidArgumentError("pool2d needs [..., H, W] operands with dense images")
    with kernel_scope("pool2d"):
        if kind == "adaptive_avg":
            _adaptive(outs, images, h, w, tuple(output_size))
            return
        stride = tuple(stride or kernel)
        oh, ow = out.shape[-2:]
        plan = _Window(h, w, tuple(kernel), stride, tuple(padding), tuple(dilation), oh, ow)
        scale = None
        if kind == "avg":
            scale = plan.divisors(ceil_mode, count_include_pad, divisor_override)
        for t in nl.affine_range(ceil_div(images.shape[0], P)):
            r0, rr = t * P, min(P, images.shape[0] - t * P)
            for b0 in range(0, oh, plan.band):
                with kernel_scope("pool band"):
                    plan.band_of(images, outs, r0, rr, b0, min(plan.band, oh - b0), kind, scale)


class _Window:
    def __init__(self, h, w, kernel, stride, padding, dilation, oh, ow) -> None:
        self.h, self.w, self.kernel, self.stride = h, w, kernel, stride
        self.padding, self.dilation, self.oh, self.ow = padding, dilation, oh, ow
        self.span = tuple((k - 1) * d + 1 for k, d in zip(kernel, dilation, strict=True))
        self.width = max(w + 2 * padding[1], (ow - 1) * stride[1] + self.span[1])
        rows_per_out = stride[0]
        self.band = max(1, min(oh, (BAND_BYTES // (4 * self.width) - self.span[0]) // rows_per_out
                               + 1))

    def divisors(self, ceil_mode: bool, count_include_pad: bool,
                 divisor_override: int | None) -> Tile | float:
        """1 / divisor per output position: a float if uniform, else an [OH*OW] constant."""
        if divisor_override:
            return 1.0 / divisor_override
        counts = np.zeros((self.oh, self.ow), np.float32)
        for i in range(self.oh):
            for j in range(self.ow):
                counts[i, j] = self._count(0, i, count_include_pad) * \
                    self._count(1, j, count_include_pad)
        inverse = (1.0 / counts).astype(np.float32)
        if np.all(inverse == inverse.flat[0]):
            return float(inverse.flat[0])
        return nl.shared_constant(inverse.reshape(-1), dtype=nl.float32)

    def _count(self, axis: int, index: int, include_pad: bool) -> int:
        size, k, s = (self.h, self.w)[axis], self.kernel[axis], self.stride[axis]
        p, d = self.padding[axis], self.dilation[axis]
        lo, hi = (0, size) if not include_pad else (-p, size + p)
        start = index * s - p
        return sum(1 for t in range(k) if lo <= start + t * d < hi)

    def band_of(self, images: Tile, outs: Tile, r0: int, rr: int, b0: int, bn: int, kind: str,
                scale) -> None:
        """Output rows b0..b0+bn of images r0..r0+rr."""
        sh, sw = self.stride
        ph, pw = self.padding
        dh, dw = self.dilation
        first = b0 * sh - ph  # input row at band row 0
        rows = (bn - 1) * sh + self.span[0]
        band = nl.ndarray((P, rows, self.width), dtype=nl.float32, buffer=nl.sbuf)
        band[0:rr] = nisa.memset((rr, rows, self.width), NEG if kind == "max" else 0.0,
                                 nl.float32)
        lo, hi = max(first, 0), min(first + rows, self.h)
        if hi > lo:
            src = hbm_view(images, (rr, hi - lo, self.w), (hbm_strides(images)[0], self.w, 1),
                           offset=r0 * hbm_strides(images)[0] + lo * self.w)
            band[0:rr, lo - first:hi - first, pw:pw + self.w] = nl.load(src)
        acc = nl.ndarray((P, bn, self.ow), dtype=nl.float32, buffer=nl.sbuf)
        op = np.maximum if kind == "max" else np.add
        for a in range(self.kernel[0]):
            for c in range(self.kernel[1]):
                view = band[0:rr, a * dh:a * dh + (bn - 1) * sh + 1:sh,
                            c * dw:c * dw + (self.ow - 1) * sw + 1:sw]
                if a == 0 and c == 0:
                    acc[0:rr] = nisa.tensor_copy(view)
                else:
                    acc[0:rr] = nisa.tensor_tensor(acc[0:rr], view, op)
        stage = nl.ndarray((P, bn, self.ow), dtype=outs.dtype, buffer=nl.sbuf)
        if kind == "max":
            stage[0:rr] = nisa.tensor_copy(acc[0:rr])
        elif isinstance(scale, float):
            stage[0:rr] = nisa.tensor_scalar(acc[0:rr], np.multiply, scale)
        else:
            factors = nl.ndarray((P, bn, self.ow), dtype=nl.float32, buffer=nl.sbuf)
            factors[0:rr] = nl.load(hbm_view(scale, (rr, bn, self.ow), (0, self.ow, 1),
                                             offset=b0 * self.ow))
            stage[0:rr] = nisa.tensor_tensor(acc[0:rr], factors[0:rr], np.multiply)
        dst = hbm_view(outs, (rr, bn, self.ow), (hbm_strides(outs)[0], self.ow, 1),
                       offset=r0 * hbm_strides(outs)[0] + b0 * self.ow)
        nl.store(dst, value=stage[0:rr])


def _adaptive(outs: Tile, images: Tile, h: int, w: int, size: tuple[int, int]) -> None:
    oh, ow = size
    step = hbm_strides(images)[0]
    for t in nl.affine_range(ceil_div(images.shape[0], P)):
        r0, rr = t * P, min(P, images.shape[0] - t * P)
        result = nl.ndarray((P, oh, ow), dtype=nl.float32, buffer=nl.sbuf)
        for i in range(oh):
            h0, h1 = (i * h) // oh, -(-((i + 1) * h) // oh)
            with kernel_scope("adaptive row"):
                rows = nl.ndarray((P, h1 - h0, w), dtype=nl.float32, buffer=nl.sbuf)
                rows[0:rr] = nl.load(hbm_view(images, (rr, h1 - h0, w), (step, w, 1),
                                              offset=r0 * step + h0 * w))
                column_sums = nl.ndarray((P, w), dtype=nl.float32, buffer=nl.sbuf)
                column_sums[0:rr] = nisa.tensor_reduce(
                    np.add, rows[0:rr].ap([[1, rr], [1, w], [w, h1 - h0]]), axis=(2,))
                for j in range(ow):
                    w0, w1 = (j * w) // ow, -(-((j + 1) * w) // ow)
                    total = nisa.tensor_reduce(np.add, column_sums[0:rr, w0:w1], axis=(1,),
                                               keepdims=True, dtype=nl.float32)
                    result[0:rr, i, j:j + 1] = nisa.tensor_scalar(
                        total, np.multiply, 1.0 / ((h1 - h0) * (w1 - w0)))
        stage = nl.ndarray((P, oh, ow), dtype=outs.dtype, buffer=nl.sbuf)
        stage[0:rr] = nisa.tensor_copy(result[0:rr])
        nl.store(hbm_view(outs, (rr, oh, ow), (hbm_strides(outs)[0], ow, 1),
                          offset=r0 * hbm_strides(outs)[0]), value=stage[0:rr])
