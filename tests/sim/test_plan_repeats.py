"""Plans of repeated spans (`isa.Repeats`) taken from their source span: the very plans, in the
very order, that looking every instruction up gives; the check catches a false record."""

import copy
import dataclasses

import pytest

from trnsim.errors import InvalidArgumentError
from trnsim.isa import Activation, DmaCopy, InstructionList, Repeats, TensorTensor
from trnsim.sim.plan import PLAN_ENV, Planner, plan_uids, planned
from trnsim.sim.plan_check import PlanMismatchError, compare_plans, compare_repeats, plan_fields

from .helpers import assert_timelines_match_reference, builder

CALL = 5  # instructions per call; offsets 0, 1 and 4 touch HBM


def _calls(count: int = 3):
    """`count` calls of one kernel, each on its own HBM tensors, the later ones recorded as
    repeats of the first (as the lowering records a replayed kernel call)."""
    b = builder("v2")
    x, y = b.tile((128, 64), "float32"), b.tile((128, 64), "float32")
    for call in range(count):
        a, w = b.input(f"a{call}", (128, 64), "float32"), b.input(f"w{call}", (128, 64), "float32")
        out = b.output(f"out{call}", (128, 64), "float32")
        b.emit(DmaCopy(dst=x, src=a.block(), label=f"k:{call}"),
               DmaCopy(dst=y, src=w.block(), label=f"k:{call}"),
               Activation(dst=x, src=x, func="exp", label=f"k:{call}"),
               TensorTensor(dst=x, in0=x, in1=y, op="add", label=f"k:{call}"),
               DmaCopy(dst=out.block(), src=x, label=f"k:{call}"))
    program = b.build()
    program.repeats = Repeats(program.instructions,
                              [(call * CALL, CALL, 0, (0, 1, 4)) for call in range(1, count)])
    return program


def test_repeated_spans_take_the_plans_the_look_ups_find():
    program = _calls()
    planner = Planner(program.target)
    plans = planner.plan_program(program)
    assert planner.copied == 2 * 2  # two repeats, two on-chip instructions each
    assert plans[CALL + 2] is plans[2] and plans[2 * CALL + 3] is plans[3]
    compare_repeats(program, planner, plans)
    compare_plans(program, program.target, plans)  # fields and uids of the look-up path
    reference = Planner(program.target, repeats=False)
    expected = reference.plan_program(program)
    assert reference.copied == 0
    assert [plan_fields(p) for p in plans] == [plan_fields(p) for p in expected]
    assert len(planner.distinct) == len(reference.distinct)
    # the compiled loop's uid column copies the spans' uids too
    assert planner.copied_spans[0] is plans and len(planner.copied_spans[1]) == 2
    assert plan_uids(planner, plans).tolist() == [p.uid for p in plans]
    assert plan_uids(planner, list(plans)).tolist() == [p.uid for p in plans]  # not its plans


def test_timelines_agree_with_the_reference_path(monkeypatch):
    assert_timelines_match_reference(_calls(4), monkeypatch)


def test_check_catches_a_false_record(monkeypatch):
    program = _calls()
    changed = program.instructions[CALL + 2]  # not a varying offset: the record says equal
    program.instructions[CALL + 2] = dataclasses.replace(changed, func="tanh")
    monkeypatch.setenv(PLAN_ENV, "check")
    with pytest.raises(PlanMismatchError, match="instruction 7"):
        planned(program, program.target)


def test_a_record_of_another_instruction_list_is_ignored():
    program = _calls()
    copied = dataclasses.replace(program, instructions=list(program.instructions))
    assert copied.repeats is program.repeats and not copied.repeats.describes(copied)
    planner = Planner(copied.target)
    planner.plan_program(copied)
    assert planner.copied == 0
    program.instructions.append(program.instructions[0])  # the length changed
    assert not program.repeats.describes(program)


class _Unhashable(str):
    __hash__ = None


def test_unhashable_instructions_are_planned_afresh():
    program = _calls()
    # an unhashable attribute in the source span: that instruction is planned afresh, and so
    # are its repeats (their spans planned by look-up)
    first = program.instructions[2]
    object.__setattr__(first, "func", _Unhashable("exp"))
    for index in (CALL + 2, 2 * CALL + 2):
        program.instructions[index] = copy.copy(first)
    planner = Planner(program.target)
    with pytest.raises(TypeError):
        hash(planner.key(first))
    plans = planner.plan_program(program)
    assert planner.copied == 0
    assert len({id(plans[i]) for i in (2, CALL + 2, 2 * CALL + 2)}) == 3
    compare_repeats(program, planner, plans)


@pytest.mark.parametrize("span", [(5, 5, 3, ()), (5, 6, 0, ()), (10, 5, 0, (5,)), (0, 5, 0, ())])
def test_a_span_that_does_not_fit_is_refused(span):
    program = _calls()
    with pytest.raises(InvalidArgumentError, match="repeat span"):
        Repeats(program.instructions, [span])


def test_plans_of_an_instruction_list_are_kept_until_it_is_written():
    """`planned` keeps the plans of a program whose instructions are an `InstructionList` (the
    lowering's, whose replays are built when read) without building it, and plans again once
    the list is written."""
    program = _calls()
    program.instructions = InstructionList(program.instructions)
    program.repeats = Repeats(program.instructions, program.repeats.spans)
    first = planned(program, program.target)
    assert planned(program, program.target)[1] is first[1]
    program.instructions[2] = program.instructions[2]  # a write, even of the same object
    assert planned(program, program.target)[1] is not first[1]
    assert planned(program, program.target)[1] is planned(program, program.target)[1]
