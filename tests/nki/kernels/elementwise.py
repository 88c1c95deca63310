"""Tensor add (single tile loop, SPMD grid, two NeuronCores), 2-D transpose, average pooling."""

import numpy as np

from trnsim import nki
from trnsim.nki import isa as nisa
from trnsim.nki import language as nl


@nki.jit
def tensor_add(a, b):
    """Row tiles of 128 partitions; the last partial tile is masked."""
    rows, cols = a.shape
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(cols)[None, :]
    for t in nl.affine_range((rows + 127) // 128):
        in_range = i_p + t * 128 < rows
        x = nl.load(a[t * 128 + i_p, i_f], mask=in_range)
        y = nl.load(b[t * 128 + i_p, i_f], mask=in_range)
        nl.store(out[t * 128 + i_p, i_f], value=nl.add(x, y, mask=in_range), mask=in_range)
    return out


@nki.jit
def tensor_add_spmd(a, b):
    """One [128, 512] tile per SPMD instance: launch as tensor_add_spmd[rows // 128, cols // 512]."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    p0 = nl.program_id(0) * 128
    f0 = nl.program_id(1) * 512
    x = nl.load(a[p0:p0 + 128, f0:f0 + 512])
    y = nl.load(b[p0:p0 + 128, f0:f0 + 512])
    nl.store(out[p0:p0 + 128, f0:f0 + 512], value=x + y)
    return out


@nki.jit
def transpose2d(x):
    """[P, F] -> [F, P] through TensorE in 128 x 128 blocks."""
    rows, cols = x.shape
    out = nl.ndarray((cols, rows), dtype=x.dtype, buffer=nl.shared_hbm)
    for r in nl.affine_range(rows // 128):
        for c in nl.affine_range(cols // 128):
            block = nl.load(x[r * 128:(r + 1) * 128, c * 128:(c + 1) * 128])
            flipped = nisa.nc_transpose(block)
            nl.store(out[c * 128:(c + 1) * 128, r * 128:(r + 1) * 128], value=nl.copy(flipped, dtype=x.dtype))
    return out


@nki.jit
def transpose2d_dma(x):
    out = nl.ndarray((x.shape[1], x.shape[0]), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load_transpose2d(x))
    return out


@nki.jit
def avgpool2d(x, pool):
    """x [C, H, W] (C <= 128 on partitions) -> [C, H/pool, W/pool], window = stride = pool.

    One index-tile view walks every window: [C, OH, OW, POOL, POOL]; one reduction sums it.
    """
    channels, height, width = x.shape
    oh, ow = height // pool, width // pool
    out = nl.ndarray((channels, oh, ow), dtype=x.dtype, buffer=nl.shared_hbm)
    image = nl.load(x)
    ic, ih, iw, kh, kw = nl.mgrid[0:channels, 0:oh, 0:ow, 0:pool, 0:pool]
    windows = image[ic, ih * pool + kh, iw * pool + kw]
    summed = nl.sum(windows, axis=(3, 4), dtype=nl.float32)
    nl.store(out, value=nl.multiply(summed, 1.0 / (pool * pool), dtype=x.dtype))
    return out


def avgpool2d_reference(x, pool):
    c, h, w = x.shape
    return x.astype(np.float32).reshape(c, h // pool, pool, w // pool, pool).mean(axis=(2, 4))
