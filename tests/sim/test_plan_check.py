"""Plans per pattern equal plans per instruction (TRNSIM_PLAN=check), field by field and bit by
bit, and give the same timelines; the check fails when a cost reads an address."""

import copy
import dataclasses

import pytest

from tests.sim.synthetic import tiled_matmul
from tests.sim.test_compiled import _mixed
from trnsim.isa import Activation
from trnsim.sim import simulate
from trnsim.sim.plan import PLAN_ENV, Planner, planned
from trnsim.sim.plan_check import PlanMismatchError, compare_plans, plan_fields


def _timeline(result):
    p = result.profile
    return (p.total_ns, p.start_ns.tolist(), p.end_ns.tolist(), p.stream.tolist(),
            p.cause.tolist(), p.moved_record.tolist())


def _on_chip_hand_offs():
    """A program whose intermediates stay on chip: hand-offs in place and cast (per program)."""
    from .helpers import builder

    b = builder("v2")
    x = b.input("x", (128, 64), "float32")
    mid = b.tensor("mid", (256, 64), "float32", "internal")
    low = b.tensor("low", (256, 64), "bfloat16", "internal")
    out = b.output("out", (128, 64), "float32")
    tile = b.tile((128, 64), "float32")
    half = b.tile((128, 64), "bfloat16")
    from trnsim.isa import DmaCopy

    for rows in (0, 128):
        b.emit(DmaCopy(dst=tile, src=x.block()),
               Activation(dst=tile, src=tile, func="exp"),
               DmaCopy(dst=mid.block((rows, 0), (128, 64)), src=tile),
               DmaCopy(dst=tile, src=mid.block((rows, 0), (128, 64))),
               DmaCopy(dst=low.block((rows, 0), (128, 64)), src=tile),
               DmaCopy(dst=half, src=low.block((rows, 0), (128, 64))),
               DmaCopy(dst=out.block(), src=tile))
    program = b.build()
    for name in ("mid", "low"):
        program.tensors[name].on_chip = True
    return program


PROGRAMS = {"matmul-v2": lambda: tiled_matmul(512, 1024, 1024, core="v2"),
            "matmul-v3": lambda: tiled_matmul(256, 512, 1024, core="v3"),
            "mixed": lambda: _mixed("v2", 120),
            "on-chip": _on_chip_hand_offs}


@pytest.mark.parametrize("name", PROGRAMS)
def test_pattern_plans_are_the_per_instruction_plans(monkeypatch, name):
    program = PROGRAMS[name]()
    core = program.target
    by_pattern = Planner(core)
    plans = by_pattern.plan_program(program)
    compare_plans(program, core, plans)  # raises at the first field that differs
    # the patterns are shared: fewer facts than distinct instructions where addresses differ
    patterns = {by_pattern.pattern(by_pattern.key(ins)) for ins in program.instructions}
    assert len(patterns) <= len(by_pattern.distinct)
    monkeypatch.setenv(PLAN_ENV, "instructions")
    reference = _timeline(simulate(copy.deepcopy(program), mode="timing"))
    monkeypatch.setenv(PLAN_ENV, "check")
    assert _timeline(simulate(program, mode="timing")) == reference


def test_a_matmul_loop_is_few_patterns():
    program = tiled_matmul(512, 1024, 2048)
    planner = Planner(program.target)
    planner.plan_program(program)
    patterns = {planner.pattern(planner.key(ins)) for ins in program.instructions}
    assert len(patterns) * 5 < len(planner.distinct)  # (7 patterns, 74 distinct instructions)


def test_check_fails_when_a_cost_reads_an_address(monkeypatch):
    original = Activation.cost

    def by_offset(self, core):  # a (wrong) cost that depends on where the tile is
        cost = original(self, core)
        return dataclasses.replace(cost, busy_ns=cost.busy_ns + self.dst.offset % 7)

    from .helpers import builder

    b = builder("v2")
    tiles = [b.tile((128, 64), "float32") for _ in range(3)]
    for tile in tiles:
        b.emit(Activation(dst=tile, src=tile, func="exp"))
    program = b.build()
    assert len({t.offset % 7 for t in tiles}) > 1
    monkeypatch.setattr(Activation, "cost", by_offset)
    monkeypatch.setattr("trnsim.sim.plan._FACTS", {})  # a fresh process
    monkeypatch.setattr("trnsim.sim.plan._PATTERNS", {})
    plans = Planner(program.target).plan_program(program)
    with pytest.raises(PlanMismatchError, match="busy"):
        compare_plans(program, program.target, plans)


def test_plan_fields_see_one_bit():
    program = tiled_matmul(256, 256, 512)
    _, plans = planned(program, program.target)
    plan = next(p for p in plans if p.busy > 0)
    before = plan_fields(plan)
    saved = plan.busy
    plan.busy = float.fromhex(saved.hex()) * (1 + 2 ** -52)
    try:
        assert plan.busy != saved and plan_fields(plan) != before
    finally:
        plan.busy = saved


def test_an_unknown_plan_path_is_refused(monkeypatch):
    from trnsim.errors import InvalidArgumentError

    monkeypatch.setenv(PLAN_ENV, "fast")
    with pytest.raises(InvalidArgumentError, match="TRNSIM_PLAN='fast'"):
        simulate(tiled_matmul(128, 128, 512), mode="timing")
