"""The training step's device time by phase: along the timeline, not by summed busy time."""

from types import SimpleNamespace

import numpy as np
import pytest

from trnsim.runtime.xla.executor import phase_timeline_ns


def _profile(records: list[tuple[str, float, float]]):
    """A profile of one instruction per (phase, start ns, end ns)."""
    program = SimpleNamespace(instructions=[SimpleNamespace(source=f"train.py:3 ({phase})")
                                            for phase, _, _ in records])
    return SimpleNamespace(program=program, pcs=np.arange(len(records)),
                           start_ns=np.array([r[1] for r in records]),
                           end_ns=np.array([r[2] for r in records]),
                           total_ns=max(r[2] for r in records))


def test_concurrent_dma_records_count_once():
    """16 DMAs in flight together over a forward's 10 ns, then a 20 ns backward: the forward
    took 10 ns of the step. Shared in proportion to busy time (170 against 20) it came to 26.8,
    longer than the backward."""
    records = [("forward", 0.0, 10.0)] * 17 + [("backward", 10.0, 30.0)]
    phases = phase_timeline_ns(_profile(records))
    assert phases["forward"] == pytest.approx(10.0)
    assert phases["backward"] == pytest.approx(20.0)
    assert phases["optimizer"] == 0.0


def test_overlap_is_shared_and_idle_time_goes_to_the_next_phase():
    records = [("forward", 0.0, 12.0), ("backward", 10.0, 30.0), ("optimizer", 35.0, 40.0)]
    phases = phase_timeline_ns(_profile(records))
    # 10..12: both in flight (1 ns each); 30..35: nothing, the optimizer waits to start
    assert phases == pytest.approx({"forward": 11.0, "backward": 19.0, "optimizer": 10.0,
                                    "collectives": 0.0})
    assert sum(phases.values()) == pytest.approx(40.0)
