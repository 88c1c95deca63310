import dataclasses

import pytest

from trnsim.isa import Activation, DmaCopy, LoadStationary, MultiplyMoving, TensorCopy, psum, sbuf
from trnsim.isa.control import RegisterAddressed
from trnsim.isa.instruction import OPCODES, Engine, built


def _fields(cls) -> dict:
    dst, src = sbuf(0, 128, (512,), "bfloat16"), sbuf(4096, 128, (512,), "bfloat16")
    return {TensorCopy: dict(dst=dst, src=src, engine="scalar"),
            Activation: dict(dst=dst, src=src, func="exp", scale=2.0),
            LoadStationary: dict(src=sbuf(0, 128, (128,), "bfloat16")),
            MultiplyMoving: dict(dst=psum(0, 128, (512,)), moving=src,
                                 stationary=sbuf(0, 128, (128,), "bfloat16"), accumulate=True),
            DmaCopy: dict(dst=dst, src=src)}[cls]


@pytest.mark.parametrize("cls", [TensorCopy, Activation, LoadStationary, MultiplyMoving, DmaCopy])
def test_built_is_the_class_constructor(cls):
    """`built` fills the instance without the frozen dataclass's __init__: equal fields, in the
    same order, the engine normalised (a name becomes the Engine, None the class's default)."""
    fields = _fields(cls)
    want = cls(source="k.py:3", label="nisa.x", **fields)
    got = built(cls, "k.py:3", "nisa.x", dict(fields))
    assert type(got) is cls and got == want
    assert list(vars(got).items()) == list(vars(want).items())
    assert isinstance(got.engine, Engine) and got.engine is want.engine
    assert dataclasses.replace(got, label="y") == dataclasses.replace(want, label="y")


def test_built_leaves_what_it_cannot_fill_to_the_class():
    fields = _fields(TensorCopy)
    with pytest.raises(TypeError):  # an unknown field
        built(TensorCopy, None, "", {**fields, "bogus": 1})
    with pytest.raises(TypeError):  # a missing required one
        built(TensorCopy, None, "", {"dst": fields["dst"]})
    with pytest.raises(TypeError):  # source given twice
        built(TensorCopy, None, "", {**fields, "source": "x"})
    with pytest.raises(ValueError):  # no such engine, as __post_init__ raises
        built(TensorCopy, None, "", {**fields, "engine": "warp"})
    inner = LoadStationary(src=sbuf(0, 128, (128,), "bfloat16"))
    wrapped = built(RegisterAddressed, None, "", {"inner": inner, "offsets": ()})  # own __post_init__
    assert wrapped == RegisterAddressed(inner=inner, offsets=()) and wrapped.engine is inner.engine


def test_every_opcode_without_its_own_post_init_is_filled_directly():
    from trnsim.isa.instruction import Instruction, _plain_fields

    direct = [cls for cls in OPCODES.values() if _plain_fields(cls) is not None]
    assert len(direct) >= len(OPCODES) - 1
    assert all(cls.__post_init__ is Instruction.__post_init__ for cls in direct)
