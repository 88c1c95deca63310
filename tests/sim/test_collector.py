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


def test_a_programs_plans_join_the_oldest_generation(collector_on):
    from trnsim.sim.plan import planned

    program = tiled_matmul(128, 128, 512)
    planner, plans = planned(program, program.target)
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert id(plans[0]) in oldest and id(planner.distinct[-1]) in oldest
    assert gc.isenabled() and gc.get_freeze_count() == 0


class _Made:
    """A tracked object made inside the block."""


def test_promoted_objects_skip_the_young_generations(collector_on):
    with collector_paused(promote=True):
        made = _Made()
        assert any(o is made for o in gc.get_objects(generation=0))
    assert gc.isenabled() and gc.get_freeze_count() == 0
    assert any(o is made for o in gc.get_objects(generation=2))
    assert not any(o is made for o in gc.get_objects(generation=0))


def test_objects_someone_froze_stay_frozen(collector_on):
    gc.freeze()
    try:
        assert gc.get_freeze_count() > 0
        with collector_paused(promote=True):
            made = _Made()
        # not unfrozen by the block (which would empty the permanent generation; its count may
        # still drop by a few: a frozen object that is freed leaves it)
        assert gc.get_freeze_count() > 0
        assert any(o is made for o in gc.get_objects(generation=0))  # and not promoted
    finally:
        gc.unfreeze()
