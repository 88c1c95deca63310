"""Lowered models planned per pattern: plans and timelines bit-identical to planning each
distinct instruction from its own facts (`trnsim.sim.plan_check`), and far fewer patterns than
distinct instructions (a lowered model's tiles differ only in their addresses)."""

import copy

import pytest

from trnsim import hardware
from trnsim.compiler import run_pipeline
from trnsim.compiler.lowering import lower
from trnsim.compiler.options import CompileOptions
from trnsim.sim import simulate
from trnsim.sim.plan import PLAN_ENV, Planner
from trnsim.sim.plan_check import compare_plans


def _timeline(result):
    p = result.profile
    return (p.total_ns, p.start_ns.tolist(), p.end_ns.tolist(), p.stream.tolist(), p.cause.tolist())


@pytest.mark.parametrize(("name", "instance"), [("bert", "inf2.xlarge"), ("gpt2", "trn1.2xlarge"),
                                                ("cnn", "inf2.xlarge")])
def test_lowered_model_plans_per_pattern_are_exact(zoo, monkeypatch, name, instance):
    chip = hardware.instance(instance).chip
    kernels = run_pipeline(zoo.get(name).graph, CompileOptions(instance=instance), verify=False)
    program = lower(kernels, chip.core).program
    planner = Planner(chip.core)
    plans = planner.plan_program(program)
    compare_plans(program, chip.core, plans)  # raises at the first field that differs
    patterns = {planner.pattern(planner.key(ins)) for ins in program.instructions}
    assert len(patterns) < len(planner.distinct)
    monkeypatch.setenv(PLAN_ENV, "instructions")
    reference = _timeline(simulate(copy.deepcopy(program), mode="timing", chip=chip))
    monkeypatch.setenv(PLAN_ENV, "patterns")
    assert _timeline(simulate(program, mode="timing", chip=chip)) == reference
