"""Matmul kernels in the current NKI API: tiles addressed with explicit access patterns.

C[M, N] = A[M, K] @ B[K, N] with A given transposed (lhsT[K, M]), TensorE's stationary layout.
"""

import numpy as np

from trnsim.nki import current as nki
from trnsim.nki.current import isa as nisa
from trnsim.nki.current import language as nl

TK, TM, TN = 128, 128, 512


def reference(lhsT, rhs):
    return lhsT.astype(np.float32).T @ rhs.astype(np.float32)


@nki.jit
def matmul_ap(lhsT, rhs):
    """Every tile is read through `.ap`: [[row stride, rows], [1, columns]] from an element
    offset; PSUM accumulates over K with accumulate=None (first write overwrites)."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TK):
                a = nl.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT.ap([[M, TK], [1, TM]], offset=k * TK * M + m * TM))
                nisa.dma_copy(dst=b, src=rhs.ap([[N, TK], [1, TN]], offset=k * TK * N + n * TN))
                nisa.nc_matmul(dst=acc, stationary=a, moving=b)
            res = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], src=res)
    return out


@nki.jit
def matmul_explicit_accumulate(lhsT, rhs):
    """One PSUM tile reused for every output tile: accumulate=(k > 0) restarts each group."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
    res = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.sbuf)
    for m in range(M // TM):
        for n in range(N // TN):
            for k in range(K // TK):
                a = nl.load(lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                b = nl.load(rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                nisa.nc_matmul(dst=acc, stationary=a, moving=b, accumulate=(k > 0))
            nisa.tensor_copy(dst=res, src=acc)
            nl.store(out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], value=res)
    return out


@nki.jit
def matmul_views(lhsT, rhs):
    """The same product through NkiTensor views: slice/select on a [KT, 128, M] view of lhsT and
    a reshape_dim/permute of the moving tile."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    blocks = lhsT.reshape_dim(0, (K // TK, TK))  # [KT, 128, M]
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    for k in range(K // TK):
        a = nl.ndarray((TK, M), dtype=lhsT.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=blocks.select(0, k))
        b = nl.ndarray((TK, N), dtype=rhs.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=b, src=rhs.slice(0, k * TK, (k + 1) * TK))
        nisa.nc_matmul(dst=acc, stationary=a, moving=b)
    res = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out
