"""nisa enums of the current API (nki 0.3+), as NKI defines them.

engine, reduce_cmd, oob_mode and nc_version keep their legacy values (shared); dge_mode was
renumbered (unknown = 0), matmul_perf_mode became string-valued, dma_engine is new.
"""

from __future__ import annotations

from enum import Enum

from trnsim.nki.isa.enums import engine, nc_version, oob_mode, reduce_cmd

tensor_engine, scalar_engine, gpsimd_engine = engine.tensor, engine.scalar, engine.gpsimd
vector_engine, unknown_engine = engine.vector, engine.unknown


class dge_mode(Enum):
    """Descriptor generation. Accepted; trnsim does not model the hardware DGE's per-instruction
    cost (see trnsim.sim.dma)."""

    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


class matmul_perf_mode(Enum):
    none = "none"
    double_row = "double_row"


class dma_engine(Enum):
    dma = 1
    gpsimd_dma = 2


__all__ = ["dge_mode", "dma_engine", "engine", "gpsimd_engine", "matmul_perf_mode", "nc_version",
           "oob_mode", "reduce_cmd", "scalar_engine", "tensor_engine", "unknown_engine",
           "vector_engine"]
