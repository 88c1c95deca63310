"""Fused single-head attention forward: softmax(q k^T * scale [+ causal mask]) v, all on chip.

Layouts: qT and kT are [D, S] (head dim on partitions, as TensorE contracts over partitions), v is
[S, D]. Per block of 128 queries: scores [128, S] in PSUM, softmax on the free axis, then P v
accumulates over 128-key chunks, each P chunk transposed on TensorE to become the stationary.
"""

import numpy as np

from trnsim import nki
from trnsim.nki import isa as nisa
from trnsim.nki import language as nl

NEG = -30000.0


@nki.jit
def attention_fwd(qT, kT, v, causal=False):
    d, seq = qT.shape
    scale = 1.0 / float(np.sqrt(d))
    out = nl.ndarray((seq, d), dtype=v.dtype, buffer=nl.shared_hbm)
    k_all = nl.load(kT)
    v_chunks = nl.ndarray((seq // 128, nl.par_dim(128), d), dtype=v.dtype, buffer=nl.sbuf)
    for c in nl.affine_range(seq // 128):
        v_chunks[c] = nl.load(v[c * 128:(c + 1) * 128, :])
    for qb in nl.affine_range(seq // 128):
        q_block = nl.load(qT[:, qb * 128:(qb + 1) * 128])
        scores = nl.ndarray((nl.par_dim(128), seq), dtype=nl.float32, buffer=nl.psum)
        scores[...] = nisa.nc_matmul(q_block, k_all)
        scaled = nl.multiply(scores, scale, dtype=nl.float32)
        if causal:
            i_q, i_k = nl.mgrid[0:128, 0:seq]
            scaled = nisa.affine_select(qb * 128 + i_q - i_k >= 0, scaled, NEG)
        probs = nl.softmax(scaled, axis=1, dtype=v.dtype)
        acc = nl.zeros((128, d), nl.float32, buffer=nl.psum)
        for c in nl.affine_range(seq // 128):
            p_t = nl.copy(nisa.nc_transpose(probs[:, c * 128:(c + 1) * 128]), dtype=v.dtype)
            acc += nisa.nc_matmul(p_t, v_chunks[c])
        nl.store(out[qb * 128:(qb + 1) * 128, :], value=nl.copy(acc, dtype=v.dtype))
    return out


def attention_reference(q, k, v, causal=False):
    q, k, v = (t.astype(np.float32) for t in (q, k, v))
    scores = q @ k.T / np.sqrt(q.shape[1])
    if causal:
        scores = np.where(np.tril(np.ones(scores.shape, bool)), scores, NEG)
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return p @ v
