"""Plans of a repeated span's varying (HBM-touching) instructions derived from their source's:
equal, field by field and uid by uid, to a full build, and ``TRNSIM_PLAN=check`` catches a
derivation that is not."""

import dataclasses

import pytest

from trnsim.isa import Activation, DmaCopy, Repeats, TensorTensor
from trnsim.sim.plan import PLAN_ENV, Planner, planned
from trnsim.sim.plan_check import (
    PlanMismatchError,
    compare_derived,
    compare_plans,
    compare_repeats,
    plan_fields,
)

from .helpers import assert_timelines_match_reference, builder

CALL = 5  # instructions per call; offsets 0, 1 and 4 touch HBM
VARYING = (0, 1, 4)


def _calls(count: int = 4, on_chip: tuple[str, ...] = ()):
    """`count` calls of one kernel: each reads its own row block of one weight tensor (another
    offset), its own activation tensor (another tensor; those named in `on_chip` kept on chip)
    and writes its own output; the later calls recorded as repeats of the first."""
    b = builder("v2")
    x, y = b.tile((128, 64), "float32"), b.tile((128, 64), "float32")
    weights = b.input("w", (128 * count, 64), "float32")
    for call in range(count):
        a = b.input(f"a{call}", (128, 64), "float32")
        out = b.output(f"out{call}", (128, 64), "float32")
        b.emit(DmaCopy(dst=x, src=a.block(), label=f"k:{call}"),
               DmaCopy(dst=y, src=weights.block((128 * call, 0), (128, 64)), label=f"k:{call}"),
               Activation(dst=x, src=x, func="exp", label=f"k:{call}"),
               TensorTensor(dst=x, in0=x, in1=y, op="add", label=f"k:{call}"),
               DmaCopy(dst=out.block(), src=x, label=f"k:{call}"))
    program = b.build()
    for name in on_chip:
        program.tensors[name] = dataclasses.replace(program.tensors[name], on_chip=True)
    program.repeats = Repeats(program.instructions,
                              [(call * CALL, CALL, 0, VARYING) for call in range(1, count)])
    return program


@pytest.mark.parametrize("on_chip", [(), ("a2",), ("a0", "a3")])
def test_derived_plans_equal_their_full_builds(on_chip):
    program = _calls(on_chip=on_chip)
    planner = Planner(program.target)
    plans = planner.plan_program(program)
    # every varying instruction of the three repeats differs from its source: each derived
    assert len(planner.derived_uids) == 3 * len(VARYING)
    compare_repeats(program, planner, plans)
    compare_derived(program, planner, plans)
    compare_plans(program, program.target, plans)  # fields and uids of the reference path
    reference = Planner(program.target, by_pattern=False, repeats=False)
    expected = reference.plan_program(program)
    assert [plan_fields(p) for p in plans] == [plan_fields(p) for p in expected]
    # the derived plans touch their own HBM regions, not their source's
    assert plans[CALL].reads != plans[0].reads and plans[CALL + 1].reads != plans[1].reads
    if "a2" in on_chip:  # an on-chip hand-off: no HBM bytes, no data moved
        assert plans[2 * CALL].hbm_read == 0 and plans[2 * CALL].dma.in_place
        assert plans[0].hbm_read > 0 and not plans[0].dma.in_place


def test_an_instruction_equal_to_an_earlier_one_takes_its_plan():
    program = _calls()
    # the third call reads the first call's activation tensor again: its look-up finds the
    # source's plan, nothing is derived for it
    program.instructions[2 * CALL] = dataclasses.replace(program.instructions[2 * CALL],
                                                         src=program.instructions[0].src)
    planner = Planner(program.target)
    plans = planner.plan_program(program)
    assert plans[2 * CALL] is plans[0]
    assert len(planner.derived_uids) == 3 * len(VARYING) - 1
    compare_plans(program, program.target, plans)


def test_a_varying_instruction_that_differs_on_chip_is_built_in_full():
    program = _calls()
    moved = program.instructions[CALL + 4]  # its SBUF source moves: not a renamed HBM operand
    program.instructions[CALL + 4] = dataclasses.replace(moved, src=program.instructions[3].in1)
    planner = Planner(program.target)
    plans = planner.plan_program(program)
    assert plans[CALL + 4].uid not in planner.derived_uids
    assert len(planner.derived_uids) == 3 * len(VARYING) - 1
    compare_derived(program, planner, plans)
    compare_plans(program, program.target, plans)


def test_timelines_agree_with_the_reference_path(monkeypatch):
    assert_timelines_match_reference(_calls(on_chip=("a1",)), monkeypatch)


def test_check_catches_a_derivation_that_keeps_the_source_regions(monkeypatch):
    # a wrong derivation: the HBM operands keep their source's regions
    monkeypatch.setattr(Planner, "_swap_hbm", lambda self, operands, uids, neighbors:
                        (uids, neighbors))
    monkeypatch.setenv(PLAN_ENV, "check")
    program = _calls()
    with pytest.raises(PlanMismatchError, match=r"instruction 5 .*derived.* in reads"):
        planned(program, program.target)


def test_check_catches_a_derivation_that_keeps_the_source_traffic(monkeypatch):
    # a wrong derivation: a DMA of an on-chip tensor planned as if it were in HBM (the plans
    # built in full while planning too; the check's own full build is not patched)
    from trnsim.sim import plan

    full_build = plan.build_plan
    monkeypatch.setattr(plan, "build_plan", lambda *args, **kwargs:
                        full_build(*args, **{**kwargs, "on_chip": {}}))
    program = _calls(on_chip=("a2",))
    planner = Planner(program.target)
    plans = planner.plan_program(program)
    with pytest.raises(PlanMismatchError, match=r"instruction 10 .*derived.* hbm_read"):
        compare_derived(program, planner, plans)
