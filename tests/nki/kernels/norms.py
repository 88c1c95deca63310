"""Softmax, layernorm (by hand and with bn_stats/bn_aggr) and rmsnorm over the free axis."""

import numpy as np

from trnsim import nki
from trnsim.nki import isa as nisa
from trnsim.nki import language as nl


@nki.jit
def softmax_rows(x):
    """Row softmax of x [R, C], rows on partitions, 128 rows at a time."""
    rows, _cols = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(rows // 128):
        tile = nl.load(x[t * 128:(t + 1) * 128, :])
        nl.store(out[t * 128:(t + 1) * 128, :], value=nl.softmax(tile, axis=1))
    return out


@nki.jit
def softmax_by_hand(x):
    """The same with explicit instructions: max, exp(x - max) with a fused sum, reciprocal, scale."""
    rows, _cols = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(rows // 128):
        tile = nl.load(x[t * 128:(t + 1) * 128, :])
        neg_max = nisa.tensor_reduce(np.max, tile, axis=(1,), negate=True, keepdims=True)
        sums = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        exps = nisa.activation(op=nl.exp, data=tile, bias=neg_max, reduce_op=nl.add, reduce_res=sums,
                               reduce_cmd=nisa.reduce_cmd.reset_reduce)
        inv = nisa.reciprocal(sums)
        nl.store(out[t * 128:(t + 1) * 128, :], value=nisa.tensor_scalar(exps, np.multiply, inv))
    return out


def softmax_reference(x):
    x = x.astype(np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@nki.jit
def layernorm_by_hand(x, gamma, beta, eps=1e-5):
    """(x - mean) / sqrt(var + eps) * gamma + beta with nl reductions; gamma/beta are [1, C]."""
    rows, cols = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.broadcast_to(nl.load(gamma), shape=(128, cols))
    b = nl.broadcast_to(nl.load(beta), shape=(128, cols))
    for t in nl.affine_range(rows // 128):
        tile = nl.load(x[t * 128:(t + 1) * 128, :])
        mean = nl.mean(tile, axis=1, keepdims=True)
        centred = nl.subtract(tile, mean)
        var = nl.mean(nl.square(centred), axis=1, keepdims=True)
        inv_std = nl.rsqrt(nl.add(var, eps))
        normed = nl.multiply(centred, inv_std)
        nl.store(out[t * 128:(t + 1) * 128, :], value=nl.add(nl.multiply(normed, g), b))
    return out


@nki.jit
def layernorm_bn(x, gamma, beta, eps=1e-5):
    """Mean and variance from bn_stats over 512-wide chunks, combined by bn_aggr."""
    rows, cols = x.shape
    chunk = nl.tile_size.bn_stats_fmax
    n_chunks = (cols + chunk - 1) // chunk
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.broadcast_to(nl.load(gamma), shape=(128, cols))
    b = nl.broadcast_to(nl.load(beta), shape=(128, cols))
    for t in nl.affine_range(rows // 128):
        tile = nl.load(x[t * 128:(t + 1) * 128, :])
        stats = nl.ndarray((128, 6 * n_chunks), dtype=nl.float32, buffer=nl.sbuf)
        for c in nl.affine_range(n_chunks):
            width = min(chunk, cols - c * chunk)
            stats[:, 6 * c:6 * c + 6] = nisa.bn_stats(tile[:, c * chunk:c * chunk + width],
                                                      dtype=nl.float32)
        mean_var = nisa.bn_aggr(stats)
        inv_std = nisa.activation(op=nl.rsqrt, data=mean_var[:, 1:2], bias=None, scale=1.0)
        inv_std = nl.rsqrt(nl.add(mean_var[:, 1:2], eps))
        normed = nisa.tensor_scalar(tile, np.subtract, mean_var[:, 0:1], op1=np.multiply,
                                    operand1=inv_std)
        nl.store(out[t * 128:(t + 1) * 128, :], value=nl.add(nl.multiply(normed, g), b))
    return out


def layernorm_reference(x, gamma, beta, eps=1e-5):
    x = x.astype(np.float32)
    mean = x.mean(axis=1, keepdims=True)
    var = x.var(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma.astype(np.float32) + beta.astype(np.float32)


@nki.jit
def rmsnorm(x, weight, eps=1e-6):
    rows, cols = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    w = nl.broadcast_to(nl.load(weight), shape=(128, cols))
    for t in nl.affine_range(rows // 128):
        tile = nl.load(x[t * 128:(t + 1) * 128, :])
        nl.store(out[t * 128:(t + 1) * 128, :], value=nl.rms_norm(tile, w, axis=1, n=cols, epsilon=eps))
    return out


def rmsnorm_reference(x, weight, eps=1e-6):
    x = x.astype(np.float32)
    return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * weight.astype(np.float32)
