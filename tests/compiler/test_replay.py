"""Kernel-call replay and the HBM operand index (`trnsim.compiler.lowering.replay`): a replayed
call equals the template with its HBM tensors renamed, field for field."""

import dataclasses

from trnsim import hardware
from trnsim.compiler.lowering.replay import HbmIndex, Template, hbm_slots
from trnsim.isa import DmaCopy, ProgramBuilder, TensorTensor

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
