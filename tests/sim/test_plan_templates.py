"""Plans copied from their pattern's template in a checked program (`Planner._templated`) and
varying plans taken from the latest equal instruction at their place (`Planner._plan_span`)
equal the reference's, and ``TRNSIM_PLAN=check`` catches a copy or a reuse that is wrong."""

import dataclasses

import pytest

from tests.sim.synthetic import tiled_matmul
from tests.sim.test_compiled import _mixed
from trnsim.sim import plan
from trnsim.sim.plan import PLAN_ENV, Planner, planned
from trnsim.sim.plan_check import (
    PlanMismatchError,
    compare_plans,
    compare_repeats,
    plan_fields,
)

from .helpers import assert_timelines_match_reference
from .test_plan_derived import CALL, VARYING, _calls


def _checked(program):
    """`program` as a front end that checked it on its target hands it over."""
    program.checked = True
    return program


PROGRAMS = {"matmul": lambda: tiled_matmul(512, 1024, 1024, core="v2"),
            "mixed": lambda: _mixed("v2", 120)}


@pytest.mark.parametrize("name", PROGRAMS)
def test_templated_plans_are_the_reference_plans(name, monkeypatch):
    program = _checked(PROGRAMS[name]())
    planner = Planner(program.target)
    plans = planner.plan_program(program)
    assert planner.templated > 0
    compare_plans(program, program.target, plans)  # fields and uids
    reference = Planner(program.target, by_pattern=False, repeats=False)
    assert [plan_fields(p) for p in plans] == \
        [plan_fields(p) for p in reference.plan_program(program)]
    assert_timelines_match_reference(program, monkeypatch)


def test_an_unchecked_program_builds_every_plan_in_full():
    program = tiled_matmul(512, 1024, 1024, core="v2")
    planner = Planner(program.target)
    planner.plan_program(program)
    assert planner.templated == 0


def test_check_catches_a_wrong_template_copy(monkeypatch):
    copy_plan = plan._copy_plan

    def wrong(source):  # a copy that loses a bit of the busy time
        copied = copy_plan(source)
        copied.busy += 1.0
        return copied

    monkeypatch.setattr(plan, "_copy_plan", wrong)
    monkeypatch.setenv(PLAN_ENV, "check")
    program = _checked(tiled_matmul(512, 1024, 1024, core="v2"))
    with pytest.raises(PlanMismatchError, match=r"per pattern differs .* in busy"):
        planned(program, program.target)


def _calls_repeating_the_last():
    """`_calls` whose fourth call reads the third call's tensors again: its varying
    instructions equal the latest ones at their place, not their source's."""
    program = _calls()
    for offset in VARYING:
        program.instructions[3 * CALL + offset] = dataclasses.replace(
            program.instructions[2 * CALL + offset], label="k:3")
    return program


def test_a_varying_instruction_equal_to_the_latest_at_its_place_takes_its_plan(monkeypatch):
    program = _calls_repeating_the_last()
    planner = Planner(program.target)
    plans = planner.plan_program(program)
    for offset in VARYING:
        assert plans[3 * CALL + offset] is plans[2 * CALL + offset]
        assert plans[3 * CALL + offset] is not plans[offset]
    compare_repeats(program, planner, plans)
    compare_plans(program, program.target, plans)
    assert_timelines_match_reference(program, monkeypatch)


def test_check_catches_a_varying_instruction_given_another_plan(monkeypatch):
    # a wrong reuse: every varying instruction takes the plan at its place
    monkeypatch.setattr(plan, "_same_key", lambda key, other: True)
    program = _calls()
    planner = Planner(program.target)
    plans = planner.plan_program(program)
    with pytest.raises(PlanMismatchError, match=r"instruction 5 .*not the plan its look-up"):
        compare_repeats(program, planner, plans)
