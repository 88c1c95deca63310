"""NKI-tutorial-style kernels that calibration rows name, packaged so `trnsim validate` can run them.

The four variants of the NKI matrix multiplication tutorial (general/nki/tutorials/
matrix_multiplication), each with the tutorial's loop structure, written from the public API docs:

- `matmul_naive` (the tutorial's ``nki_matmul_tiled_``): for every [128, 512] output tile, load
  each K tile of both operands and accumulate in PSUM;
- `matmul_hoisted` (``nki_matmul_hoist_load_``): the K tiles of the stationary operand are loaded
  once per M tile, outside the N loop;
- `matmul_block_free_dim` (``nki_matmul_block_free_dimension_``): blocks of 2 M tiles and 2 N
  tiles share their loads;
- `matmul_optimized` (``nki_matmul_fully_optimized_``): blocked in M, N and K; each K block of
  both operands loaded once; PSUM accumulation per tile; partial sums accumulated in SBUF across
  K blocks.
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
def matmul_naive(lhsT, rhs):
    """One [128, 512] output tile at a time; both operands' K tiles reloaded for every tile."""
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
            tile = nl.copy(acc, dtype=out.dtype)
            nl.store(out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], value=tile)
    return out


@nki.jit
def matmul_hoisted(lhsT, rhs):
    """The stationary operand's K tiles loaded once per M tile, before the N loop."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    ip_a, if_a = nl.mgrid[0:TK, 0:TM]
    ip_b, if_b = nl.mgrid[0:TK, 0:TN]
    for m in nl.affine_range(M // TM):
        a_tiles = nl.ndarray((K // TK, nl.par_dim(TK), TM), dtype=lhsT.dtype)
        for k in nl.affine_range(K // TK):
            a_tiles[k, ip_a, if_a] = nl.load(lhsT[k * TK + ip_a, m * TM + if_a])
        for n in nl.affine_range(N // TN):
            b_tiles = nl.ndarray((K // TK, nl.par_dim(TK), TN), dtype=rhs.dtype)
            for k in nl.affine_range(K // TK):
                b_tiles[k, ip_b, if_b] = nl.load(rhs[k * TK + ip_b, n * TN + if_b])
            acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TK):
                acc += nisa.nc_matmul(a_tiles[k, ip_a, if_a], b_tiles[k, ip_b, if_b])
            tile = nl.copy(acc, dtype=out.dtype)
            nl.store(out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], value=tile)
    return out


@nki.jit
def matmul_block_free_dim(lhsT, rhs, tiles_in_block_m=2, tiles_in_block_n=2):
    """Blocks of `tiles_in_block_m` x `tiles_in_block_n` output tiles share their operand tiles
    (each still loaded as its own [128, 128] or [128, 512] tile, as the tutorial does)."""
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    ip_a, if_a = nl.mgrid[0:TK, 0:TM]
    ip_b, if_b = nl.mgrid[0:TK, 0:TN]
    for m in nl.affine_range(M // (TM * tiles_in_block_m)):
        a_tiles = nl.ndarray((tiles_in_block_m, K // TK, nl.par_dim(TK), TM), dtype=lhsT.dtype)
        for bm in nl.affine_range(tiles_in_block_m):
            col = (m * tiles_in_block_m + bm) * TM
            for k in nl.affine_range(K // TK):
                a_tiles[bm, k, ip_a, if_a] = nl.load(lhsT[k * TK + ip_a, col + if_a])
        for n in nl.affine_range(N // (TN * tiles_in_block_n)):
            b_tiles = nl.ndarray((tiles_in_block_n, K // TK, nl.par_dim(TK), TN), dtype=rhs.dtype)
            for bn in nl.affine_range(tiles_in_block_n):
                col = (n * tiles_in_block_n + bn) * TN
                for k in nl.affine_range(K // TK):
                    b_tiles[bn, k, ip_b, if_b] = nl.load(rhs[k * TK + ip_b, col + if_b])
            for bm in nl.affine_range(tiles_in_block_m):
                for bn in nl.affine_range(tiles_in_block_n):
                    acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(K // TK):
                        acc += nisa.nc_matmul(a_tiles[bm, k, ip_a, if_a],
                                              b_tiles[bn, k, ip_b, if_b])
                    tile = nl.copy(acc, dtype=out.dtype)
                    rows = (m * tiles_in_block_m + bm) * TM
                    cols = (n * tiles_in_block_n + bn) * TN
                    nl.store(out[rows:rows + TM, cols:cols + TN], value=tile)
    return out


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


# the words a row's name uses for each tutorial variant (checked in this order)
MATMUL_VARIANTS = (("optimi", "matmul_optimized"), ("block", "matmul_block_free_dim"),
                   ("hoist", "matmul_hoisted"), ("naive", "matmul_naive"),
                   ("tiled_", "matmul_naive"))


def named_matmul(name: str):
    """The tutorial kernel a row names: 'tiled matmul, <naive|hoisted loads|blocked free dim|
    fully optimized> ...' (or the tutorial's function name)."""
    text = name.lower()
    if "matmul" in text:
        for word, kernel in MATMUL_VARIANTS:
            if word in text:
                return globals()[kernel]
    return None


def predict_named_kernel(name: str, instance: str, dtype: str = "bf16") -> float:
    """Latency (ms) of a calibration row's kernel: '... matmul ... <variant> ... [M,K] @ [K,N]'."""
    from trnsim import hardware
    from trnsim.nki import typing as nt

    kernel = named_matmul(name)
    match = _SHAPES.search(name)
    if kernel is None or match is None:
        raise TrnsimError(f"no kernel in trnsim's library matches {name!r} (the NKI matmul "
                          "tutorial's naive, hoisted loads, blocked free dimension and fully "
                          "optimized variants, with shapes '[M,K] @ [K,N]')")
    m, k, k2, n = (int(g) for g in match.groups())
    if k != k2:
        raise TrnsimError(f"{name!r}: contraction sizes {k} and {k2} differ")
    dt = {"bf16": nl.bfloat16, "bfloat16": nl.bfloat16, "fp32": nl.float32}.get(dtype.lower())
    if dt is None:
        raise TrnsimError(f"kernel dtype {dtype!r} not supported here")
    core = hardware.instance(instance).chip.core
    kernel.run((nt.tensor[[k, m], dt], nt.tensor[[k, n], dt]), {}, mode="timing", target=core)
    return kernel.last_run.latency_ns / 1e6
