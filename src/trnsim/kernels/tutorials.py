"""NKI-tutorial-style kernels that calibration rows name, packaged so `trnsim validate` can run them.

`matmul_optimized` has the structure of the NKI matrix multiplication tutorial's fully optimised
kernel (blocked in M, N and K; each K block of both operands loaded once; PSUM accumulation per
tile; partial sums accumulated in SBUF across K blocks), written from the public API docs.
"""

from __future__ import annotations

import re

from trnsim import nki
from trnsim.errors import TrnsimError
from trnsim.nki import isa as nisa
from trnsim.nki import language as nl

TK = 128  # contraction tile (partitions)
TM = 128  # stationary free size
TN = 512  # moving free size (one PSUM bank of fp32)


@nki.jit
def matmul_optimized(lhsT, rhs, tiles_in_block_m=16, tiles_in_block_n=2, tiles_in_block_k=8):
    """Blocked in M, N and K: each K block of both operands is loaded once into SBUF, all M x N
    tiles of the block accumulate in PSUM, and partial sums accumulate in SBUF across K blocks."""
    K, M = lhsT.shape
    _, N = rhs.shape
    block_m, block_n, block_k = TM * tiles_in_block_m, TN * tiles_in_block_n, TK * tiles_in_block_k
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    n_blocks_m = M // block_m
    ip_k, if_n = nl.mgrid[0:TK, 0:block_n]
    for nb in nl.affine_range(N // block_n):
        partial = nl.zeros((n_blocks_m, tiles_in_block_m, tiles_in_block_n, nl.par_dim(TM), TN),
                           dtype=lhsT.dtype, buffer=nl.sbuf)
        for kb in nl.sequential_range(K // block_k):
            b_tiles = nl.ndarray((tiles_in_block_k, nl.par_dim(TK), block_n), dtype=rhs.dtype)
            for bk in nl.affine_range(tiles_in_block_k):
                row0 = (kb * tiles_in_block_k + bk) * TK
                b_tiles[bk, ip_k, if_n] = nl.load(rhs[row0 + ip_k, nb * block_n + if_n])
            for mb in nl.affine_range(n_blocks_m):
                ip_a, if_a = nl.mgrid[0:TK, 0:block_m]
                a_tiles = nl.ndarray((tiles_in_block_k, nl.par_dim(TK), block_m), dtype=lhsT.dtype)
                for bk in nl.affine_range(tiles_in_block_k):
                    row0 = (kb * tiles_in_block_k + bk) * TK
                    a_tiles[bk, ip_a, if_a] = nl.load(lhsT[row0 + ip_a, mb * block_m + if_a])
                for bn in nl.affine_range(tiles_in_block_n):
                    for bm in nl.affine_range(tiles_in_block_m):
                        acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
                        for bk in nl.affine_range(tiles_in_block_k):
                            acc[...] += nisa.nc_matmul(a_tiles[bk, :, bm * TM:(bm + 1) * TM],
                                                       b_tiles[bk, :, bn * TN:(bn + 1) * TN])
                        partial[mb, bm, bn] += acc
        for mb in nl.affine_range(n_blocks_m):
            for bm in nl.affine_range(tiles_in_block_m):
                packed = nl.ndarray((nl.par_dim(TM), block_n), dtype=partial.dtype, buffer=nl.sbuf)
                for bn in nl.affine_range(tiles_in_block_n):
                    packed[:, bn * TN:(bn + 1) * TN] = nl.copy(partial[mb, bm, bn])
                rows = (mb * tiles_in_block_m + bm) * TM
                nl.store(out[rows:rows + TM, nb * block_n:(nb + 1) * block_n], value=packed)
    return out


_SHAPES = re.compile(r"\[\s*(\d+)\s*,\s*(\d+)\s*\]\s*@\s*\[\s*(\d+)\s*,\s*(\d+)\s*\]")


def predict_named_kernel(name: str, instance: str, dtype: str = "bf16") -> float:
    """Latency (ms) of a calibration row's kernel: '... matmul ... optimized ... [M,K] @ [K,N]'."""
    from trnsim import hardware
    from trnsim.nki import typing as nt

    text = name.lower()
    match = _SHAPES.search(name)
    if "matmul" not in text or "optimi" not in text or match is None:
        raise TrnsimError(f"no kernel in trnsim's library matches {name!r}")
    m, k, k2, n = (int(g) for g in match.groups())
    if k != k2:
        raise TrnsimError(f"{name!r}: contraction sizes {k} and {k2} differ")
    dt = {"bf16": nl.bfloat16, "bfloat16": nl.bfloat16, "fp32": nl.float32}.get(dtype.lower())
    if dt is None:
        raise TrnsimError(f"kernel dtype {dtype!r} not supported here")
    core = hardware.instance(instance).chip.core
    matmul_optimized.run((nt.tensor[[k, m], dt], nt.tensor[[k, n], dt]), {}, mode="timing",
                         target=core)
    return matmul_optimized.last_run.latency_ns / 1e6
