"""Softmax and layernorm over the free axis, written against the current NKI API."""

import numpy as np

from trnsim.nki import current as nki
from trnsim.nki.current import isa as nisa
from trnsim.nki.current import language as nl


def softmax_reference(x):
    x = x.astype(np.float32)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def layernorm_reference(x, gamma, beta, eps=1e-5):
    x = x.astype(np.float32)
    mean = x.mean(axis=1, keepdims=True)
    var = x.var(axis=1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


@nki.jit
def softmax(x):
    """max (negated) on VectorE, exp(x - max) with its row sum fused on ScalarE, 1/sum, scale."""
    rows, cols = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(rows // 128):
        tile = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[t * 128:(t + 1) * 128, :])
        neg_max = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max, op=nl.max, data=tile, axis=1, negate=True)
        exps = nl.ndarray((128, cols), dtype=nl.float32, buffer=nl.sbuf)
        sums = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=exps, op=nl.exp, data=tile, bias=neg_max, reduce_op=nl.add,
                        reduce_res=sums, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        nisa.reciprocal(dst=sums, data=sums)
        result = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=result, data=exps, op0=nl.multiply, operand0=sums)
        nisa.dma_copy(dst=out[t * 128:(t + 1) * 128, :], src=result)
    return out


@nki.jit
def softmax_values(x):
    """The same with nl operations as values (nl.load / nl.softmax / nl.store)."""
    rows, _ = x.shape
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for t in nl.affine_range(rows // 128):
        nl.store(out[t * 128:(t + 1) * 128, :], value=nl.softmax(nl.load(x[t * 128:(t + 1) * 128, :])))
    return out


@nki.jit
def layernorm(x, gamma, beta, eps=1e-5):
    """bn_stats per 512-column chunk, bn_aggr, rsqrt(var + eps) on ScalarE, then
    (x - mean) * rstd * gamma + beta with gamma/beta broadcast over partitions by a stride-0 DMA."""
    rows, cols = x.shape
    chunks = -(-cols // nl.tile_size.bn_stats_fmax)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.ndarray((128, cols), dtype=nl.float32, buffer=nl.sbuf)
    b = nl.ndarray((128, cols), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=g, src=gamma.ap([[0, 128], [1, cols]]))  # partition stride 0: broadcast
    nisa.dma_copy(dst=b, src=beta.ap([[0, 128], [1, cols]]))
    eps_column = nl.full((128, 1), eps, dtype=nl.float32)  # NeuronCore-v2 biases are [P, 1] tiles
    for t in nl.affine_range(rows // 128):
        tile = nl.ndarray((128, cols), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[t * 128:(t + 1) * 128, :])
        stats = nl.ndarray((128, 6 * chunks), dtype=nl.float32, buffer=nl.sbuf)
        for c in range(chunks):
            lo, hi = c * 512, min(cols, (c + 1) * 512)
            nisa.bn_stats(dst=stats[:, 6 * c:6 * (c + 1)], data=tile[:, lo:hi])
        moments = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=moments, data=stats)
        rstd = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=rstd, op=nl.rsqrt, data=moments[:, 1:2], bias=eps_column)
        normed = nl.ndarray((128, cols), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=normed, data=tile, op0=nl.subtract, operand0=moments[:, 0:1],
                           op1=nl.multiply, operand1=rstd)
        nisa.tensor_tensor(dst=normed, data1=normed, data2=g, op=nl.multiply)
        result = nl.ndarray((128, cols), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=result, data1=normed, data2=b, op=nl.add)
        nisa.dma_copy(dst=out[t * 128:(t + 1) * 128, :], src=result)
    return out
