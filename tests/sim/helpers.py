"""Small program fragments and closed-form figures the sim tests share."""

from __future__ import annotations

import numpy as np

from trnsim import hardware
from trnsim.isa import AccessPattern, Memory, ProgramBuilder, row_major_dims
from trnsim.numerics import dtype as as_dtype


def builder(core: str = "v2", name: str = "test") -> ProgramBuilder:
    return ProgramBuilder(name, core)


def sbuf_ap(offset: int, partitions: int, free: tuple[int, ...], dtype, *, start: int = 0,
            memory: Memory = Memory.SBUF) -> AccessPattern:
    """A dense on-chip pattern placed by hand (no allocator), for legality and aliasing tests."""
    return AccessPattern(memory=memory, dtype=as_dtype(dtype), partitions=partitions,
                         dims=row_major_dims(free), offset=offset, partition_start=start)


def hbm_ap(tensor: str, dtype, partitions: int, partition_step: int, dims, offset_elements: int = 0):
    dt = as_dtype(dtype)
    return AccessPattern(memory=Memory.HBM, dtype=dt, partitions=partitions, dims=tuple(dims),
                         offset=offset_elements * dt.itemsize, partition_step=partition_step,
                         tensor=tensor)


def ns(cycles: float, clock_hz: float) -> float:
    return cycles * 1e9 / clock_hz


def core(name: str):
    return hardware.core(name)


def rng_array(shape, dtype, seed: int = 0) -> np.ndarray:
    values = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return values.astype(as_dtype(dtype).np_dtype)


def assert_timelines_match_reference(program, monkeypatch) -> None:
    """`program`'s timing run planned with ``TRNSIM_PLAN=check`` records what the reference
    planning path (``instructions``) does, start for start."""
    import copy

    from trnsim.sim import simulate
    from trnsim.sim.plan import PLAN_ENV

    monkeypatch.setenv(PLAN_ENV, "instructions")
    reference = simulate(copy.deepcopy(program), mode="timing").profile
    monkeypatch.setenv(PLAN_ENV, "check")
    profile = simulate(program, mode="timing").profile
    assert (profile.total_ns, profile.start_ns.tolist(), profile.end_ns.tolist()) == \
        (reference.total_ns, reference.start_ns.tolist(), reference.end_ns.tolist())
