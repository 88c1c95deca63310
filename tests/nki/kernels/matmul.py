"""Matmul kernels from naive to fully optimised, written against the legacy NKI API.

All compute C[M, N] = A[M, K] @ B[K, N] with A passed transposed (lhsT[K, M]), the layout TensorE
wants for its stationary operand. The variants differ only in data movement and tiling, so their
simulated latencies must order naive > tiled > hoisted > blocked > optimised.
"""

import numpy as np

from trnsim import nki
from trnsim.kernels import tutorials
from trnsim.nki import isa as nisa
from trnsim.nki import language as nl

TK = 128  # contraction tile (partitions)
TM = 128  # stationary free size
TN = 512  # moving free size (one PSUM bank of fp32)


def reference(lhsT, rhs):
    return lhsT.astype(np.float32).T @ rhs.astype(np.float32)


@nki.jit
def matmul_naive(lhsT, rhs):
    """One [128 x 128 x 512] tile at a time: both operands reloaded for every output tile."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TK):
                a = nl.load(lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                b = nl.load(rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                acc += nisa.nc_matmul(a, b)
            nl.store(out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], value=nl.copy(acc, dtype=out.dtype))
    return out


@nki.jit
def matmul_hoisted(lhsT, rhs):
    """The stationary column block is loaded once per m and reused across every n."""
    K, M = lhsT.shape
    _, N = rhs.shape
    KT = K // TK
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        a_tiles = nl.ndarray((KT, nl.par_dim(TK), TM), dtype=lhsT.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(KT):
            a_tiles[k] = nl.load(lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
        for n in nl.affine_range(N // TN):
            b_tiles = nl.ndarray((KT, nl.par_dim(TK), TN), dtype=rhs.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(KT):
                b_tiles[k] = nl.load(rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
            acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(KT):
                acc += nisa.nc_matmul(a_tiles[k], b_tiles[k])
            result = nl.copy(acc, dtype=out.dtype)
            nl.store(out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], value=result)
    return out


@nki.jit
def matmul_blocked(lhsT, rhs, tiles_in_n=4):
    """Hoisted stationary tiles plus a blocked free dimension: each moving load is a wide
    [128, tiles_in_n * 512] block feeding tiles_in_n PSUM accumulators (fewer, larger DMAs)."""
    K, M = lhsT.shape
    _, N = rhs.shape
    KT = K // TK
    block_n = TN * tiles_in_n
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        a_tiles = nl.ndarray((KT, nl.par_dim(TK), TM), dtype=lhsT.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(KT):
            a_tiles[k] = nl.load(lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
        for nb in nl.affine_range(N // block_n):
            accs = nl.zeros((tiles_in_n, nl.par_dim(TM), TN), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(KT):
                b_block = nl.load(rhs[k * TK:(k + 1) * TK, nb * block_n:(nb + 1) * block_n])
                for n in nl.affine_range(tiles_in_n):
                    accs[n] += nisa.nc_matmul(a_tiles[k], b_block[:, n * TN:(n + 1) * TN])
            row = nl.ndarray((nl.par_dim(TM), block_n), dtype=out.dtype, buffer=nl.sbuf)
            for n in nl.affine_range(tiles_in_n):
                row[:, n * TN:(n + 1) * TN] = nl.copy(accs[n], dtype=out.dtype)
            nl.store(out[m * TM:(m + 1) * TM, nb * block_n:(nb + 1) * block_n], value=row)
    return out


matmul_optimized = tutorials.matmul_optimized  # the packaged copy (trnsim validate runs it)


@nki.jit
def matmul_nl(x, y):
    """nl.matmul on a single tile (x not pre-transposed: TensorE transposes it first)."""
    out = nl.ndarray((x.shape[0], y.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    a, b = nl.load(x), nl.load(y)
    nl.store(out, value=nl.copy(nl.matmul(a, b)))
    return out
