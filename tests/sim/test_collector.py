"""Planning runs with the cycle collector paused and leaves it as it found it."""

import gc

import pytest

from tests.sim.synthetic import tiled_matmul
from trnsim.sim import simulate
from trnsim.sim.collector import collector_paused
from trnsim.sim.plan import Planner


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_the_collector_is_restored_after_the_block_even_when_it_raises(collector_on):
    with pytest.raises(ValueError), collector_paused():
        assert not gc.isenabled()
        raise ValueError("inside")
    assert gc.isenabled()
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()  # off before: left off


def test_a_program_is_planned_with_the_collector_paused(monkeypatch, collector_on):
    seen = []
    original = Planner.plan_program

    def watched(self, program):
        seen.append(gc.isenabled())
        return original(self, program)

    monkeypatch.setattr(Planner, "plan_program", watched)
    simulate(tiled_matmul(128, 128, 512), mode="timing")
    assert seen == [False]
    assert gc.isenabled()
