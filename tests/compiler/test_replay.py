"""Kernel-call replay and the HBM operand index (`trnsim.compiler.lowering.replay`): a replayed
call equals the template with its HBM tensors renamed, field for field, and is recorded as a
repeat of it (`isa.Repeats`) that the planner uses."""

import copy
import dataclasses
import json

import pytest

from trnsim import hardware
from trnsim.compiler import run_pipeline
from trnsim.compiler.lowering import lower
from trnsim.compiler.lowering.hbm import SLOT_PREFIX
from trnsim.compiler.lowering.replay import HbmIndex, Template, hbm_slots
from trnsim.compiler.options import CompileOptions
from trnsim.isa import (
    CoreBarrier,
    DmaCopy,
    InstructionList,
    ProgramBuilder,
    Repeats,
    TensorTensor,
)
from trnsim.isa.serialize import program_from_data, program_to_data
from trnsim.sim import simulate
from trnsim.sim.plan import PLAN_ENV, Planner
from trnsim.sim.plan_check import compare_plans, compare_repeats

CORE = hardware.core(2)


def _call():
    """One kernel call: load a and b, add them on chip, store the sum to out."""
    b = ProgramBuilder("call", CORE)
    x, y = b.tile((128, 64), "float32"), b.tile((128, 64), "float32")
    a, w, out = (b.tensor(n, (128, 64), "float32") for n in ("a", "w", "out"))
    b.emit(DmaCopy(dst=x, src=a.block(), label="k:first"),
           DmaCopy(dst=y, src=w.block(), label="k:first"),
           TensorTensor(dst=x, in0=x, in1=y, op="add", label="k:first"),
           DmaCopy(dst=out.block(), src=x, label="k:first"))
    return b.build().instructions


def _renamed(ins, rename, label):
    """The slow way: every access-pattern field renamed with dataclasses.replace."""
    changes = {f.name: dataclasses.replace(v, tensor=rename[v.tensor])
               for f in dataclasses.fields(ins) if hasattr(v := getattr(ins, f.name), "tensor")
               and v.memory.value == "hbm" and v.tensor in rename}
    return dataclasses.replace(ins, **changes, label=label, source="model.py:7")


def test_a_replay_is_the_template_renamed_and_relabelled():
    instructions = _call()
    template = Template(instructions, ["a", "w", "out"])
    out: list = []
    index = HbmIndex()
    template.replay(["a2", "w2", "out2"], "k:second", "model.py:7", out, index)
    rename = {"a": "a2", "w": "w2", "out": "out2"}
    expected = [_renamed(ins, rename, "k:second") for ins in instructions]
    assert out == expected
    assert [hash(i.src) for i in out if isinstance(i, DmaCopy)] == \
        [hash(i.src) for i in expected if isinstance(i, DmaCopy)]  # renamed patterns rehashed
    assert [i for i, _ in index.entries] == [0, 1, 3]  # the on-chip add touches no HBM
    assert out[2].in0 is instructions[2].in0  # on-chip operands are shared, not copied
    assert template.flops == sum(i.flops() for i in instructions)


def test_the_index_gives_live_ranges_and_renames_in_place():
    instructions = _call() * 2
    index = HbmIndex.of(instructions)
    assert index.entries == [(i, hbm_slots(ins)) for i, ins in enumerate(instructions)
                             if hbm_slots(ins)]
    assert index.live_ranges(instructions, {"a", "out"}) == {"a": (0, 4), "out": (3, 7)}
    before = list(instructions)
    index.rename(instructions, {"out": "slot0"})
    assert instructions[3].dst.tensor == "slot0" and instructions[3].src is before[3].src
    assert instructions[0] is before[0]  # untouched instructions stay the same objects


def _planned_from_repeats(lowered, core) -> None:
    """Every program of `lowered` records its replays, the planner takes plans from them, and
    they are the plans looking every instruction up gives (objects, fields, uids)."""
    for program in lowered.programs:
        repeats = program.repeats
        assert repeats is not None and repeats.describes(program) and repeats.spans
        start, length, source, _ = repeats.spans[0]
        assert {ins.label for ins in program.instructions[start:start + length]} != \
            {ins.label for ins in program.instructions[source:source + length]}
        planner = Planner(core)
        plans = planner.plan_program(program)
        assert planner.copied > 0
        compare_repeats(program, planner, plans)
        compare_plans(program, core, plans)


@pytest.mark.parametrize(("name", "instance", "on_chip"), [("bert", "inf2.xlarge", True),
                                                           ("gpt2", "trn1.2xlarge", False)])
def test_replayed_calls_are_recorded_and_planned_from_their_template(zoo, monkeypatch, name,
                                                                     instance, on_chip):
    """Each replayed call is recorded as a repeat of its traced call (`isa.Repeats`); after the
    passes that keep tensors on chip or rename them onto shared HBM slots, the record still
    holds, and the planner takes the traced call's plans for it, with the timeline of the
    reference path. (`on_chip` False: nothing kept on chip, so the tiny model's intermediates
    are renamed onto slots.)"""
    if not on_chip:
        monkeypatch.setattr("trnsim.compiler.lowering.keep_on_chip", lambda *a, **k: [])
    chip = hardware.instance(instance).chip
    kernels = run_pipeline(zoo.get(name).graph, CompileOptions(instance=instance), verify=False)
    lowered = lower(kernels, chip.core)
    program = lowered.program
    assert any(t.on_chip for t in program.tensors.values()) == on_chip
    assert any(n.startswith(SLOT_PREFIX) for n in program.tensors) == (not on_chip)
    _planned_from_repeats(lowered, chip.core)
    monkeypatch.setenv(PLAN_ENV, "instructions")
    reference = simulate(copy.deepcopy(program), mode="timing", chip=chip).profile
    monkeypatch.setenv(PLAN_ENV, "check")
    profile = simulate(program, mode="timing", chip=chip).profile
    assert (profile.total_ns, profile.start_ns.tolist(), profile.end_ns.tolist()) == \
        (reference.total_ns, reference.start_ns.tolist(), reference.end_ns.tolist())


def test_each_core_of_a_split_model_records_its_own_replays():
    """LNC=2: each physical core's program replays its own part of each call (weights large
    enough to be worth splitting, so core 1 has one), between barriers."""
    torch = pytest.importorskip("torch")
    from trnsim.compiler.capture import capture

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up, self.down = torch.nn.Linear(1024, 2048), torch.nn.Linear(2048, 1024)

        def forward(self, x):
            return x + self.down(torch.nn.functional.gelu(self.up(x)))

    torch.manual_seed(0)
    graph = capture(torch.nn.Sequential(Block(), Block(), Block()).eval(), (torch.randn(2, 1024),))
    chip = hardware.instance("trn2.48xlarge").chip
    options = CompileOptions(instance="trn2.48xlarge", lnc=2)
    lowered = lower(run_pipeline(graph, options, verify=False), chip.core, lnc=2)
    assert all(any(isinstance(i, CoreBarrier) for i in p.instructions) for p in lowered.programs)
    _planned_from_repeats(lowered, chip.core)


def test_a_saved_program_drops_the_record():
    program = ProgramBuilder("call", CORE).build()
    program.instructions = _call() * 2
    program.repeats = Repeats(program.instructions, [(4, 4, 0, (0, 1, 3))])
    again = program_from_data(json.loads(json.dumps(program_to_data(program))))
    assert again.instructions == program.instructions and again.repeats is None


def test_a_call_that_keeps_some_tensors_shares_their_patterns_with_the_template():
    instructions = _call()
    template = Template(instructions, ["a", "w", "out"])
    out: list = []
    template.replay(["a", "w", "out2"], "k:second", None, out, HbmIndex())
    assert out[0].src is instructions[0].src and out[1].src is instructions[1].src
    assert out[3].dst.tensor == "out2" and out[3].dst == _renamed(instructions[3], {"out": "out2"},
                                                                  "k:second").dst
    assert all(a is not b for a, b in zip(out, instructions, strict=True))  # each its own object


def test_the_index_knows_whether_the_program_has_control_flow():
    from trnsim.isa import Jump

    straight = _call()
    index = HbmIndex()
    Template(straight, ["a", "w", "out"]).replay(["a", "w", "out"], "k", None, [], index)
    assert not index.control and not HbmIndex.of(straight).control
    looping = Template([*straight, Jump(target=0)], ["a", "w", "out"])
    assert looping.control
    index.add(looping, 4)
    assert index.control  # whatever adds instructions adds what they are
    assert HbmIndex.of([*straight, Jump(target=0)]).control


def test_live_ranges_follow_a_rename():
    instructions = _call() * 2
    index = HbmIndex.of(instructions)
    assert index.live_ranges(instructions, {"out"}) == {"out": (3, 7)}
    index.rename(instructions, {"out": "slot0"})
    assert index.live_ranges(instructions, {"out", "slot0"}) == {"slot0": (3, 7)}


def test_replayed_calls_are_renamed_by_their_template_plan():
    """`HbmIndex.rename` renames a replayed call in its own instructions' fields (by its
    template's plan) and the traced call by copies; both as renaming field by field gives, a
    tensor no call names as an argument (`w` here, the same in every call) included; the calls
    renamed onto one slot share its patterns."""
    instructions = _call()
    template = Template(instructions, ["a", "out"])  # w: not an argument
    program = list(instructions)
    index = HbmIndex.of(program)
    template.replay(["a2", "out2"], "k:second", "model.py:7", program, index)
    template.replay(["a3", "out3"], "k:third", "model.py:7", program, index)
    replayed = program[4:]
    rename = {"out": "slot0", "out2": "slot0", "out3": "slot0", "w": "slot1", "a3": "slot2"}
    expected = [dataclasses.replace(_renamed(ins, rename, ins.label), source=ins.source)
                for ins in program]
    index.rename(program, rename)
    assert [(i.label, i) for i in program] == [(i.label, i) for i in expected]
    assert all(a is b for a, b in zip(program[4:], replayed, strict=True))  # in place
    assert program[0] is instructions[0]  # untouched
    assert program[1] is not instructions[1] and instructions[1].src.tensor == "w"  # copied
    assert program[7].dst is program[11].dst and program[5].src is program[9].src
    assert index.live_ranges(program, {"slot0", "slot1"}) == {"slot0": (3, 11), "slot1": (1, 9)}


def test_a_deferred_replay_builds_what_an_eager_one_does():
    """Replays into an `InstructionList` are built only when read (the lowering's path), and,
    read before or after a rename, are the instructions replaying into a plain list gives; the
    index finds live ranges without building them."""
    instructions = _call()
    template = Template(instructions, ["a", "out"])  # w: not an argument
    eager, lazy = list(instructions), InstructionList(instructions)
    eager_index, lazy_index = HbmIndex.of(eager), HbmIndex.of(lazy)
    for n in (2, 3, 4):
        for out, index in ((eager, eager_index), (lazy, lazy_index)):
            template.replay([f"a{n}", f"out{n}"], f"k:{n}", "model.py:7", out, index)
    assert lazy.pending == 3 and len(lazy) == len(eager) == 16
    names = {"a", "out", "w", "a2", "out2", "a3", "out3", "a4", "out4"}
    assert lazy_index.live_ranges(lazy, names) == eager_index.live_ranges(eager, names)
    assert lazy.pending == 3 and lazy.built(5) is None  # found without building
    early = lazy[7]  # built before the rename: renamed in place
    rename = {"out": "slot0", "out2": "slot0", "out3": "slot0", "w": "slot1", "a4": "slot2"}
    for out, index in ((eager, eager_index), (lazy, lazy_index)):
        index.rename(out, rename)
    assert lazy[7] is early and early.dst.tensor == "slot0"
    names = {"slot0", "slot1", "slot2", "a", "a2", "a3", "out4"}
    assert lazy_index.live_ranges(lazy, names) == eager_index.live_ranges(eager, names)
    assert [(i.label, i.source, i) for i in lazy] == [(i.label, i.source, i) for i in eager]
    assert lazy[9].src is lazy[13].src  # one renamed pattern shared by the calls, as eager
