"""nisa enums of the legacy API; the current API (`trnsim.nki.current.isa.enums`) reuses the
ones whose values did not change (engine, reduce_cmd, oob_mode, nc_version)."""

from __future__ import annotations

from enum import IntEnum

from trnsim.isa import Engine


class engine(IntEnum):
    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    dma = 4  # the current API's engine.dma
    vector = 5
    sync = 6


class reduce_cmd(IntEnum):
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


class dge_mode(IntEnum):
    none = 0
    swdge = 1
    hwdge = 2
    unknown = 3


class oob_mode(IntEnum):
    error = 0
    skip = 1


class nc_version(IntEnum):
    gen2 = 2
    gen3 = 3
    gen4 = 4


class matmul_perf_mode(IntEnum):
    none = 0
    double_row = 1


tensor_engine, scalar_engine, gpsimd_engine = engine.tensor, engine.scalar, engine.gpsimd
vector_engine, sync_engine, unknown_engine = engine.vector, engine.sync, engine.unknown
dma_engine = "dma"
gpsimd_dma = "gpsimd_dma"

_TO_ISA = {engine.tensor: Engine.TENSOR, engine.scalar: Engine.SCALAR, engine.gpsimd: Engine.GPSIMD,
           engine.vector: Engine.VECTOR, engine.sync: Engine.SYNC, engine.dma: Engine.DMA}


def to_isa_engine(value) -> Engine | None:
    """nisa engine enum (or name) -> isa.Engine; unknown/None -> None (the instruction's default)."""
    if value is None:
        return None
    if isinstance(value, Engine):
        return value
    if isinstance(value, str):
        return None if value == "unknown" else Engine(value)
    return _TO_ISA.get(engine(int(value)))


def reduce_cmd_name(value) -> str:
    if isinstance(value, str):
        return value
    return reduce_cmd(int(value)).name
