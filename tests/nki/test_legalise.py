"""The staging decision's fast path (`trnsim.nki.legalise._reachable`): whenever it says every
operand is already reachable, the full decision stages nothing; where staging is due (TensorE
writing SBUF, GpSimd reading PSUM, a compute engine starting at a forbidden partition) it
defers to the full decision, which stages."""

import pytest

from trnsim import hardware
from trnsim.isa import AccessPattern, Engine, Memory, TensorCopy, TensorTranspose
from trnsim.isa.instruction import ENGINE_MEMORIES
from trnsim.nki import legalise
from trnsim.nki.trace import Trace, tracing
from trnsim.numerics import dtype


def _ap(memory: Memory, partitions: int = 128, start: int = 0, offset: int = 0) -> AccessPattern:
    return AccessPattern(memory=memory, dtype=dtype("float32"), partitions=partitions,
                         dims=((1, 128),), offset=offset, partition_start=start, tensor="t")


CASES = [  # (instruction class, engine, dst, src, staged in full, decided by the fast path)
    (TensorTranspose, "tensor", _ap(Memory.PSUM), _ap(Memory.SBUF), False, True),
    (TensorTranspose, "tensor", _ap(Memory.SBUF, offset=1024), _ap(Memory.SBUF), True, False),
    (TensorCopy, "vector", _ap(Memory.SBUF), _ap(Memory.PSUM), False, True),
    (TensorCopy, "scalar", _ap(Memory.PSUM), _ap(Memory.SBUF), False, True),
    (TensorCopy, "gpsimd", _ap(Memory.SBUF), _ap(Memory.PSUM), True, False),
    # a start partition other than 0 is left to the full decision, allowed or not
    (TensorCopy, "vector", _ap(Memory.SBUF, 64, 64), _ap(Memory.SBUF, 64, 0, 4096), False, False),
    (TensorCopy, "vector", _ap(Memory.SBUF, 64, 32), _ap(Memory.SBUF, 64, 0, 4096), True, False),
]


@pytest.mark.parametrize("cls, engine, dst, src, expected, decided", CASES)
def test_the_fast_path_never_skips_a_staging_the_full_decision_makes(cls, engine, dst, src,
                                                                     expected, decided):
    core = hardware.instance("trn1.2xlarge").chip.core
    trace = Trace("legalise", core)
    fields = {"dst": dst, "src": src, "engine": engine}
    instruction = cls(**fields)
    can_read, can_write = ENGINE_MEMORIES[Engine(engine)]
    fast = legalise._reachable(instruction, instruction.engine, fields, can_read, can_write)
    with tracing(trace):
        full = legalise.staged(trace, instruction, fields)
    assert (full is not None) == expected
    assert fast == decided
