"""A program is planned once per program object and core; every run keeps its own times."""

import copy

import numpy as np

from tests.sim.synthetic import tiled_matmul
from trnsim.isa import DmaCopy
from trnsim.sim import simulate, simulate_cores
from trnsim.sim.plan import Planner


def _timeline(result):
    profile = result.profile
    return (profile.total_ns, profile.start_ns.tolist(), profile.end_ns.tolist(),
            profile.stream.tolist(), profile.cause.tolist())


def _count_plannings(monkeypatch) -> list:
    calls = []
    original = Planner.plan_program

    def counted(self, program):
        calls.append(program)
        return original(self, program)

    monkeypatch.setattr(Planner, "plan_program", counted)
    return calls


def test_runs_and_copies_of_one_program_share_its_plans_and_not_its_times(monkeypatch):
    program = tiled_matmul(256, 256, 512)
    fresh = _timeline(simulate(copy.deepcopy(program), mode="timing"))
    calls = _count_plannings(monkeypatch)
    first = simulate(program, mode="timing")
    again = simulate(program, mode="timing")
    together = simulate_cores([program, program], mode="timing")
    assert len(calls) == 1  # planned once for four cores' runs
    assert _timeline(first) == _timeline(again) == fresh  # no times leak from run to run
    apart = simulate_cores([copy.deepcopy(program), copy.deepcopy(program)], mode="timing")
    assert [_timeline(r) for r in together] == [_timeline(r) for r in apart]


def test_an_edited_program_is_planned_again(monkeypatch):
    program = tiled_matmul(256, 256, 512)
    simulate(program, mode="timing")
    calls = _count_plannings(monkeypatch)
    last = program.instructions[-1]
    assert isinstance(last, DmaCopy)
    program.instructions.append(last)  # one more store: the plans no longer fit
    edited = simulate(program, mode="timing")
    assert len(calls) == 1
    assert len(edited.profile) == len(program.instructions)
    assert edited.profile.total_ns >= simulate(copy.deepcopy(program), mode="timing").profile.total_ns


def test_functional_results_unchanged_by_reused_plans():
    program = tiled_matmul(256, 256, 512)
    rng = np.random.default_rng(0)
    inputs = {name: rng.standard_normal(program.tensors[name].shape).astype(np.float32).astype(
        program.tensors[name].dtype.np_dtype) for name in ("at", "b")}
    first = simulate(program, inputs)
    second = simulate(program, inputs)
    np.testing.assert_array_equal(first.outputs["c"], second.outputs["c"])
    assert _timeline(first) == _timeline(second)


def test_another_program_with_equal_instructions_skips_check_and_cost(monkeypatch):
    from trnsim.isa import MultiplyMoving
    from trnsim.sim import plan as plan_module

    monkeypatch.setattr(plan_module, "_FACTS", {})  # a fresh process
    monkeypatch.setattr(plan_module, "_PATTERNS", {})
    calls = []
    original = MultiplyMoving.check
    monkeypatch.setattr(MultiplyMoving, "check", lambda self, core: calls.append(1) or original(self, core))
    programs = [tiled_matmul(256, 512, 1024) for _ in range(2)]  # equal instructions, new objects
    assert not programs[0].checked  # the planner checks them
    calls.clear()  # (building verified them)
    first = simulate(programs[0], mode="timing")
    checked = len(calls)
    assert checked > 0
    second = simulate(programs[1], mode="timing")
    assert len(calls) == checked
    assert _timeline(first) == _timeline(second)
    # what a program decides (its on-chip tensors, its regions) is still its own
    program = tiled_matmul(256, 512, 1024)
    assert Planner(program.target).plan_program(program)[0].reads != ()


def _barrier_program():
    """One program both cores of a pair run (as a tensor-parallel plan's ranks share one)."""
    from trnsim.isa import CoreBarrier, TensorScalar

    from .helpers import builder

    b = builder("v3", "rank")
    shared = b.output("shared", (128, 64), "float32")
    tile = b.tile((128, 64), "float32")
    b.emit(TensorScalar(dst=tile, src=tile, op0="bypass", operand0=0.0))
    b.emit(CoreBarrier(data=shared.block(), cores=(0, 1)))
    b.emit(TensorScalar(dst=tile, src=tile, op0="add", operand0=1.0))
    return b.build()


def test_ranks_of_one_program_with_a_rendezvous_share_its_plans_and_not_its_times(monkeypatch):
    program = _barrier_program()
    apart = simulate_cores([copy.deepcopy(program), copy.deepcopy(program)], mode="timing",
                           shared=["shared"])
    calls = _count_plannings(monkeypatch)
    together = simulate_cores([program, program], mode="timing", shared=["shared"])
    again = simulate_cores([program, program], mode="timing", shared=["shared"])
    assert len(calls) == 1  # planned once for both ranks of both runs
    assert [_timeline(r) for r in together] == [_timeline(r) for r in apart] \
        == [_timeline(r) for r in again]


def test_rank_programs_over_one_instruction_list_share_its_plans(monkeypatch):
    """A tensor-parallel rank's program is its own object (its shard of the weights) over the
    plan's instruction list (`shard_program`); the ranks plan it once."""
    import dataclasses

    program = _barrier_program()
    ranks = [program, dataclasses.replace(program, tensors=dict(program.tensors))]
    assert ranks[1] is not program and ranks[1].instructions is program.instructions
    calls = _count_plannings(monkeypatch)
    runs = simulate_cores(ranks, mode="timing", shared=["shared"])
    assert len(calls) == 1
    apart = simulate_cores([copy.deepcopy(program), copy.deepcopy(program)], mode="timing",
                           shared=["shared"])
    assert [_timeline(r) for r in runs] == [_timeline(r) for r in apart]


def test_a_register_addressed_program_is_planned_for_each_run(monkeypatch):
    from trnsim.isa import Branch, Jump, RegisterAddressed, RegisterAlu, RegisterMove, RegisterOffset

    from .helpers import builder

    b = builder("v3")
    x = b.input("x", (4, 16), "float32")
    row = b.tile((1, 16), "float32")
    b.emit(RegisterMove(dst=0, src=0))
    b.emit(Branch(a="r0", cmp="greater_equal", b=4, target=5))
    b.emit(RegisterAddressed(inner=DmaCopy(dst=row, src=x.block((0, 0), (1, 16))),
                             offsets=(RegisterOffset("src", 0, 16 * 4),)))
    b.emit(RegisterAlu(dst=0, op="add", a="r0", b=1))
    b.emit(Jump(target=1))
    program = b.build()
    calls = _count_plannings(monkeypatch)
    first = simulate(program, mode="timing")
    second = simulate(program, mode="timing")
    assert len(calls) == 2  # its concrete rows are planned as it runs: a shared planner would grow
    assert _timeline(first) == _timeline(second)
