"""Synthetic programs for the simulator's own tests and benchmarks, built with `ProgramBuilder`.

These are not trnsim's kernel library (that is `trnsim.kernels`); they are the few fixed shapes
the simulator is measured on: a tiled GEMM as a compiler would emit it (DMA in, LoadStationary /
MultiplyMoving over K, PSUM eviction, DMA out, double-buffered), and the weight-stationary
compute loop SCALE-Sim models, with SCALE-Sim's closed form beside it.
"""

from __future__ import annotations

from math import ceil

from trnsim.isa import (
    AccessPattern,
    DmaCopy,
    LoadStationary,
    Memory,
    MultiplyMoving,
    Program,
    ProgramBuilder,
    TensorCopy,
)

PE = 128  # PE array rows = columns = partitions
BANK_FP32 = 512  # fp32 elements of one PSUM bank per partition


def _slice(tile: AccessPattern, index: int, width: int) -> AccessPattern:
    """Columns [index*width, (index+1)*width) of a [P, n, width] tile, as a [P, width] pattern."""
    return AccessPattern(memory=tile.memory, dtype=tile.dtype, partitions=tile.partitions,
                         dims=((1, width),), offset=tile.offset + index * width * tile.dtype.itemsize,
                         partition_start=tile.partition_start, tensor=tile.tensor)


def _hbm_block(name: str, dtype, row_elements: int, row0: int, col0: int, outer: int,
               width: int) -> AccessPattern:
    """HBM pattern [128, outer, width] of a row-major [R, row_elements] tensor: element (p, o, w)
    is row ``row0 + o*128 + p``, column ``col0 + w``."""
    from trnsim.numerics import dtype as as_dtype

    dt = as_dtype(dtype)
    return AccessPattern(memory=Memory.HBM, dtype=dt, partitions=PE,
                         dims=((PE * row_elements, outer), (1, width)),
                         offset=(row0 * row_elements + col0) * dt.itemsize,
                         partition_step=row_elements, tensor=name)


def tiled_matmul(m: int, k: int, n: int, *, core="v2", dtype="bfloat16", out_dtype="float32",
                 n_tile: int = BANK_FP32) -> Program:
    """C[m, n] = A[m, k] @ B[k, n] from inputs ``at`` = A.T [k, m] and ``b`` [k, n].

    For each 128-row block of C and each `n_tile`-column block: DMA in B's column block (A's row
    block once per row), K/128 LoadStationary + MultiplyMoving accumulating in one PSUM bank,
    a VectorE copy out of PSUM, a DMA store. Tiles are double-buffered. m, k multiples of 128;
    n a multiple of n_tile.
    """
    kt, mt, nt = k // PE, m // PE, n // n_tile
    if kt * PE != k or mt * PE != m or nt * n_tile != n:
        raise ValueError("tiled_matmul needs m, k multiples of 128 and n a multiple of n_tile")
    b = ProgramBuilder(f"matmul_{m}x{k}x{n}", core)
    b.input("at", (k, m), dtype)
    b.input("b", (k, n), dtype)
    b.output("c", (m, n), out_dtype)
    a_tiles = [b.tile((PE, kt, PE), dtype, name=f"a{i}") for i in range(2)]
    b_tiles = [b.tile((PE, kt, n_tile), dtype, name=f"b{i}") for i in range(2)]
    banks = [b.tile((PE, n_tile), "float32", memory=Memory.PSUM, name=f"p{i}") for i in range(2)]
    c_tiles = [b.tile((PE, n_tile), out_dtype, name=f"c{i}") for i in range(2)]
    step = 0
    for mi in range(mt):
        a_tile = a_tiles[mi % 2]
        b.emit(DmaCopy(dst=a_tile, src=_hbm_block("at", dtype, m, 0, mi * PE, kt, PE)))
        for ni in range(nt):
            b_tile, bank, c_tile = b_tiles[step % 2], banks[step % 2], c_tiles[step % 2]
            b.emit(DmaCopy(dst=b_tile, src=_hbm_block("b", dtype, n, 0, ni * n_tile, kt, n_tile)))
            for ki in range(kt):
                stationary = _slice(a_tile, ki, PE)
                b.emit(LoadStationary(src=stationary),
                       MultiplyMoving(dst=bank, moving=_slice(b_tile, ki, n_tile), stationary=stationary,
                                      accumulate=ki > 0))
            b.emit(TensorCopy(dst=c_tile, src=bank),
                   DmaCopy(dst=_hbm_block("c", out_dtype, n, mi * PE, ni * n_tile, 1, n_tile),
                           src=c_tile))
            step += 1
    return b.build()


def weight_stationary_gemm(m: int, k: int, n: int, *, core="v2", dtype="bfloat16") -> Program:
    """The compute of C = A @ B as SCALE-Sim's weight-stationary dataflow runs it on TensorE.

    A fold is one [128 (K) x 128 (N)] tile of B loaded as the stationary operand; A.T streams
    through it as the moving operand in chunks of up to 512 columns (rows of A), accumulating
    over K in PSUM. Operands are assumed on chip (no DMA): this measures TensorE alone.
    m <= 4096 (the PSUM banks hold one fold's outputs).
    """
    b = ProgramBuilder(f"ws_gemm_{m}x{k}x{n}", core)
    k_tiles, n_tiles = ceil(k / PE), ceil(n / PE)
    chunks = [(c, min(BANK_FP32, m - c)) for c in range(0, m, BANK_FP32)]
    if len(chunks) > 8:
        raise ValueError("weight_stationary_gemm holds one fold's outputs in PSUM: m <= 4096")
    weights = b.tile((PE, k_tiles, PE), dtype, name="b")  # a K-column of stationary tiles, reused per N block
    inputs = b.tile((PE, k_tiles, m), dtype, name="at")  # A.T, K-row blocks
    banks = [b.tile((PE, BANK_FP32), "float32", memory=Memory.PSUM, name=f"p{i}")
             for i in range(len(chunks))]
    for ni in range(n_tiles):
        cols = min(PE, n - ni * PE)
        for ki in range(k_tiles):
            rows = min(PE, k - ki * PE)
            stationary = AccessPattern(memory=Memory.SBUF, dtype=weights.dtype, partitions=rows,
                                       dims=((1, cols),),
                                       offset=weights.offset + ki * PE * weights.dtype.itemsize)
            b.emit(LoadStationary(src=stationary))
            for (c0, width), bank in zip(chunks, banks, strict=True):
                moving = AccessPattern(memory=Memory.SBUF, dtype=inputs.dtype, partitions=rows,
                                       dims=((1, width),),
                                       offset=inputs.offset + (ki * m + c0) * inputs.dtype.itemsize)
                dst = AccessPattern(memory=Memory.PSUM, dtype=bank.dtype, partitions=cols,
                                    dims=((1, width),), offset=bank.offset)
                b.emit(MultiplyMoving(dst=dst, moving=moving, stationary=stationary, accumulate=ki > 0))
    return b.build()


def scalesim_ws_cycles(m: int, k: int, n: int, rows: int = PE, cols: int = PE) -> int:
    """SCALE-Sim's closed-form compute cycles of a weight-stationary GEMM on a rows x cols array:
    ceil(K/rows) * ceil(N/cols) folds of (M + 2*rows + cols - 2) cycles each, minus 1."""
    folds = ceil(k / rows) * ceil(n / cols)
    return folds * (m + 2 * rows + cols - 2) - 1
