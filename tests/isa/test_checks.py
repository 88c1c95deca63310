"""Legality errors: typed, naming the instruction, limit, value, core version and source line."""

import pytest

from trnsim import hardware
from trnsim.errors import InvalidArgumentError, LimitExceededError, TrnsimError, UnsupportedError
from trnsim.isa import (
    Activation,
    DmaCopy,
    LoadStationary,
    MultiplyMoving,
    RangeSelect,
    TensorCopy,
    TensorTensor,
    psum,
    sbuf,
)

V2 = hardware.core("v2")


def test_129_partitions_is_a_limit_error_with_source():
    ap = sbuf(0, 129, (16,), "float32")
    with pytest.raises(LimitExceededError) as info:
        TensorCopy(dst=ap, src=ap, source="kernel.py:42").check(V2)
    text = str(info.value)
    assert "partition count 129 exceeds limit 128" in text
    assert "NeuronCore-v2" in text and text.endswith("at kernel.py:42")


def test_sbuf_overflow_names_bytes_and_capacity():
    ap = sbuf(190 * 1024, 128, (1024,), "float32")
    with pytest.raises(LimitExceededError, match=r"sbuf byte range .* exceeds limit 196608"):
        TensorCopy(dst=ap, src=sbuf(0, 128, (1024,), "float32")).check(V2)


def test_an_operand_checked_on_one_core_is_checked_again_on_another():
    """Operand checks are remembered per operand, engine and core (`Instruction.check`): one
    that passed on NC-v2 still fails on NC-v1's smaller SBUF."""
    ap = sbuf(64 * 1024, 128, (16 * 1024,), "float32")
    src = sbuf(0, 128, (16 * 1024,), "float32")
    for _ in range(2):
        TensorCopy(dst=ap, src=src).check(V2)
    with pytest.raises(LimitExceededError, match="exceeds limit 98304"):
        TensorCopy(dst=ap, src=src).check(hardware.core("v1"))
    with pytest.raises(InvalidArgumentError, match="cannot write sbuf"):
        MultiplyMoving(dst=ap, moving=src, stationary=src).check(V2)  # another engine


def test_a_remembered_pass_is_found_by_identity_and_by_value():
    """The pass cache answers for the operand object it checked and for an equal one built
    apart (another trace's), and only for the core it passed on."""
    from trnsim.isa import instruction

    ap = sbuf(64 * 1024, 128, (16 * 1024,), "float32")
    src = sbuf(0, 128, (16 * 1024,), "float32")
    TensorCopy(dst=ap, src=src).check(V2)
    twin = sbuf(64 * 1024, 128, (16 * 1024,), "float32")
    assert twin == ap and twin is not ap
    assert instruction._has_passed(ap, TensorCopy.ENGINES[0], True, V2)
    assert instruction._has_passed(twin, TensorCopy.ENGINES[0], True, V2)
    assert not instruction._has_passed(twin, TensorCopy.ENGINES[0], True, hardware.core("v1"))
    with pytest.raises(LimitExceededError, match="exceeds limit 98304"):
        TensorCopy(dst=twin, src=src).check(hardware.core("v1"))


def test_psum_overflow():
    ap = psum(15 * 1024, 128, (1024,), "float32")
    with pytest.raises(LimitExceededError, match="exceeds limit 16384"):
        TensorCopy(dst=sbuf(0, 128, (1024,), "float32"), src=ap).check(V2)


def test_matmul_moving_free_size_over_512():
    mv = sbuf(0, 128, (1024,), "bfloat16")
    st = sbuf(4096, 128, (128,), "bfloat16")
    mm = MultiplyMoving(dst=psum(0, 128, (1024,)), moving=mv, stationary=st, label="nc_matmul",
                        source="k.py:7")
    expected = r"nc_matmul: moving free size 1024 exceeds limit 512 \(NeuronCore-v2\) at k.py:7"
    with pytest.raises(LimitExceededError, match=expected):
        mm.check(V2)


def test_matmul_output_must_stay_in_one_psum_bank():
    mv = sbuf(0, 128, (512,), "bfloat16")
    st = sbuf(4096, 128, (128,), "bfloat16")
    with pytest.raises(InvalidArgumentError, match="bank"):
        MultiplyMoving(dst=psum(1024, 128, (512,)), moving=mv, stationary=st).check(V2)


def test_matmul_reads_sbuf_writes_psum_only():
    st = sbuf(0, 128, (128,), "bfloat16")
    with pytest.raises(InvalidArgumentError, match="tensor engine cannot write sbuf"):
        MultiplyMoving(dst=sbuf(8192, 128, (512,), "float32"), moving=sbuf(0, 128, (512,), "bfloat16"),
                       stationary=st).check(V2)
    with pytest.raises(InvalidArgumentError, match="cannot read psum"):
        LoadStationary(src=psum(0, 128, (128,), "float32")).check(V2)


def test_gpsimd_cannot_read_psum():
    with pytest.raises(InvalidArgumentError, match="gpsimd engine cannot read psum"):
        TensorCopy(dst=sbuf(0, 128, (64,), "float32"), src=psum(0, 128, (64,)),
                   engine="gpsimd").check(V2)


def test_engine_not_allowed_for_instruction():
    ap = sbuf(0, 128, (64,), "float32")
    with pytest.raises(InvalidArgumentError, match="engine scalar cannot run"):
        TensorTensor(dst=ap, in0=ap, in1=ap, op="add", engine="scalar").check(V2)


def test_start_partition_quadrant_rule():
    with pytest.raises(InvalidArgumentError, match="start partition 8"):
        TensorCopy(dst=sbuf(0, 16, (4,), "float32", partition_start=8),
                   src=sbuf(64, 16, (4,), "float32")).check(V2)
    TensorCopy(dst=sbuf(0, 32, (4,), "float32", partition_start=96),
               src=sbuf(64, 32, (4,), "float32", partition_start=32)).check(V2)


def test_dtype_unsupported_on_version_names_it():
    v1 = hardware.core("v1")
    ap = sbuf(0, 128, (64,), "float8_e4m3")
    with pytest.raises(UnsupportedError, match="NeuronCore-v1"):
        Activation(dst=ap, src=ap, func="exp").check(v1)


def test_v3_only_and_gpsimd_absent_on_v1():
    ap = sbuf(0, 128, (64,), "float32")
    col = sbuf(4096, 128, (1,), "float32")
    with pytest.raises(UnsupportedError, match="NeuronCore-v3 or later"):
        RangeSelect(dst=ap, src=ap, cmp0="greater", bound0=col, cmp1="less", bound1=col).check(V2)
    with pytest.raises(UnsupportedError, match="no GpSimd"):
        TensorCopy(dst=ap, src=ap, engine="gpsimd").check(hardware.core("v1"))


def test_dma_element_count_mismatch():
    with pytest.raises(InvalidArgumentError, match="different numbers of elements"):
        DmaCopy(dst=sbuf(0, 128, (64,), "float32"), src=sbuf(4096, 128, (32,), "float32")).check(V2)


def test_all_are_trnsim_errors():
    for cls in (InvalidArgumentError, LimitExceededError, UnsupportedError):
        assert issubclass(cls, TrnsimError)
