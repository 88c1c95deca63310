"""Legality and run-time errors end to end: simulate() raises TrnsimErrors naming the limit."""

import numpy as np
import pytest

from tests.sim.helpers import builder, sbuf_ap
from trnsim import hardware
from trnsim.errors import InvalidArgumentError, LimitExceededError, TrnsimError, UnknownNameError
from trnsim.isa import DmaCopy, LoadStationary, Memory, MultiplyMoving, TensorCopy
from trnsim.sim import simulate, simulate_cores


def _unverified(*instructions, core="v2", tensors=()):
    b = builder(core)
    for name, shape, dtype in tensors:
        b.input(name, shape, dtype)
    b.emit(*instructions)
    return b.build(verify=False)


def test_sbuf_overflow_names_the_memory_and_the_limit():
    spec = hardware.core("v2")
    tile = sbuf_ap(spec.sbuf_bytes_per_partition - 64, 128, (32,), "float32")  # 128 B from 64 B left
    program = _unverified(TensorCopy(dst=tile, src=sbuf_ap(0, 128, (32,), "float32")))
    with pytest.raises(LimitExceededError, match=r"sbuf byte range .* exceeds limit 196608"):
        simulate(program, mode="timing")


def test_psum_overflow():
    tile = sbuf_ap(16384 - 8, 128, (4,), "float32", memory=Memory.PSUM)
    program = _unverified(TensorCopy(dst=sbuf_ap(0, 128, (4,), "float32"), src=tile))
    with pytest.raises(LimitExceededError, match="psum"):
        simulate(program, mode="timing")


def test_129_partition_operand():
    program = _unverified(TensorCopy(dst=sbuf_ap(0, 129, (4,), "float32"),
                                     src=sbuf_ap(64, 129, (4,), "float32")))
    with pytest.raises(LimitExceededError, match="partition count 129 exceeds limit 128"):
        simulate(program, mode="timing")


def test_matmul_free_size_over_one_psum_bank():
    stationary = sbuf_ap(0, 128, (128,), "bfloat16")
    moving = sbuf_ap(256, 128, (1024,), "bfloat16")
    dst = sbuf_ap(0, 128, (1024,), "float32", memory=Memory.PSUM)
    program = _unverified(LoadStationary(src=stationary),
                          MultiplyMoving(dst=dst, moving=moving, stationary=stationary))
    with pytest.raises(LimitExceededError, match="moving free size 1024 exceeds limit 512"):
        simulate(program, mode="timing")


def test_reading_psum_with_an_engine_that_cannot():
    src = sbuf_ap(0, 128, (4,), "float32", memory=Memory.PSUM)
    program = _unverified(TensorCopy(dst=sbuf_ap(0, 128, (4,), "float32"), src=src, engine="gpsimd",
                                     source="kernel.py:42"))
    with pytest.raises(InvalidArgumentError, match="gpsimd engine cannot read psum") as error:
        simulate(program, mode="timing")
    assert str(error.value).endswith("at kernel.py:42")


def test_dma_cannot_read_psum():
    program = _unverified(DmaCopy(dst=sbuf_ap(0, 128, (4,), "float32"),
                                  src=sbuf_ap(0, 128, (4,), "float32", memory=Memory.PSUM)))
    with pytest.raises(InvalidArgumentError, match="cannot read psum"):
        simulate(program, mode="timing")


def test_hbm_access_outside_its_tensor():
    from tests.sim.helpers import hbm_ap

    program = _unverified(DmaCopy(dst=sbuf_ap(0, 128, (8,), "float32"),
                                  src=hbm_ap("x", "float32", 128, 8, ((1, 8),), offset_elements=8)),
                          tensors=[("x", (128, 8), "float32")])
    with pytest.raises(LimitExceededError, match="HBM tensor x size"):
        simulate(program, mode="timing")


@pytest.mark.parametrize("mode", ["functional", "timing"])
def test_multiply_with_nothing_loaded(mode):
    stationary = sbuf_ap(0, 128, (128,), "bfloat16")
    program = _unverified(MultiplyMoving(dst=sbuf_ap(0, 128, (128,), "float32", memory=Memory.PSUM),
                                         moving=stationary, stationary=stationary, source="k.py:7"))
    with pytest.raises(InvalidArgumentError, match="no stationary tile loaded") as error:
        simulate(program, mode=mode)
    assert error.value.source == "k.py:7"


def test_verification_happens_before_anything_runs():
    bad = TensorCopy(dst=sbuf_ap(0, 129, (4,), "float32"), src=sbuf_ap(64, 129, (4,), "float32"))
    stationary = sbuf_ap(0, 128, (128,), "bfloat16")
    # the first instruction would fail at run time; the last one is illegal: legality wins
    program = _unverified(MultiplyMoving(dst=sbuf_ap(0, 128, (128,), "float32", memory=Memory.PSUM),
                                         moving=stationary, stationary=stationary), bad)
    with pytest.raises(LimitExceededError):
        simulate(program, mode="timing")


def _copy_program():
    b = builder()
    x = b.input("x", (128, 16), "float32")
    out = b.output("out", (128, 16), "float32")
    tile = b.tile((128, 16), "float32")
    b.emit(DmaCopy(dst=tile, src=x.block()), DmaCopy(dst=out.block(), src=tile))
    return b.build()


def test_input_errors():
    program = _copy_program()
    with pytest.raises(InvalidArgumentError, match=r"needs input 'x' \(float32\[128, 16\]\)"):
        simulate(program, {})
    with pytest.raises(InvalidArgumentError, match=r"shape \[16, 128\].*declares \[128, 16\]"):
        simulate(program, {"x": np.zeros((16, 128), np.float32)})
    with pytest.raises(InvalidArgumentError, match="dtype float64"):
        simulate(program, {"x": np.zeros((128, 16))})
    with pytest.raises(UnknownNameError, match="'y'"):
        simulate(program, {"x": np.zeros((128, 16), np.float32), "y": np.zeros(3)})
    # timing mode needs no inputs
    assert simulate(program, mode="timing").outputs is None


def test_chip_and_mode_errors():
    program = _copy_program()
    with pytest.raises(InvalidArgumentError, match="simulation mode 'fast'"):
        simulate(program, mode="fast")
    with pytest.raises(InvalidArgumentError, match="targets NeuronCore-v2, but Trainium2 has NeuronCore-v3"):
        simulate(program, chip=hardware.chip("trn2"), mode="timing")
    with pytest.raises(LimitExceededError, match=r"programs .* 3 exceeds limit 2"):
        simulate_cores([program] * 3, mode="timing")


def test_hbm_capacity_is_checked_without_allocating():
    b = builder()
    b.input("huge", (40, 1024, 1024, 1024), "uint8")  # 40 GiB on a 32 GiB Trainium
    program = b.build()
    with pytest.raises(LimitExceededError, match=r"'huge'.* exceeds limit 34359738368"):
        simulate(program, mode="timing")


def test_errors_are_trnsim_errors():
    assert issubclass(LimitExceededError, TrnsimError) and issubclass(InvalidArgumentError, TrnsimError)
