import dataclasses

import pytest

from trnsim import hardware
from trnsim.hardware.spec import ASSUMPTION


def test_memories_per_version():
    assert hardware.core("v2").sbuf_bytes == 24 * 1024**2
    assert hardware.core("v3").sbuf_bytes == 28 * 1024**2
    assert hardware.core("v4").sbuf_bytes == 32 * 1024**2
    for version in (2, 3, 4):
        spec = hardware.core(version)
        assert spec.psum_bytes == 2 * 1024**2
        assert spec.psum_banks * spec.psum_bank_bytes_per_partition == 16 * 1024
        assert spec.partitions == 128


def test_clocks_and_dma():
    v2, v3, v4 = (hardware.core(v) for v in (2, 3, 4))
    assert (v2.tensor.clock_hz, v3.tensor.clock_hz, v4.tensor.clock_hz) == (2.8e9, 2.4e9, 2.4e9)
    assert (v2.vector.clock_hz, v3.vector.clock_hz, v4.vector.clock_hz) == (1.12e9, 0.96e9, 1.2e9)
    assert v2.dma.bytes_per_s == pytest.approx(272e9)
    assert v3.dma.bytes_per_s == pytest.approx(368e9)
    assert v4.dma.bytes_per_s == pytest.approx(528e9)


def test_port_conflicts_only_on_v2():
    assert ("vector", "gpsimd", "sbuf") in hardware.core("v2").port_conflicts
    assert hardware.core("v3").port_conflicts == ()


def test_dtype_support_by_version():
    assert not hardware.core("v1").supports("float8_e4m3")
    assert hardware.core("v2").supports("float8_e4m3")
    assert not hardware.core("v3").supports("float8_e4m3fn_x4")
    assert hardware.core("v4").supports("float8_e4m3fn_x4")
    assert hardware.core("v4").supports("float8_e8m0fnu")


def test_core_lookup_aliases():
    assert hardware.core("trn2") is hardware.core("gen3") is hardware.core("NeuronCore-v3")
    assert hardware.core("inf2") is hardware.core("v2")
    assert hardware.core(4).nki_target == "gen4"


def test_v1_assumptions_are_named():
    v1 = hardware.core("v1")
    assert v1.gpsimd is None
    assert v1.is_assumption("sbuf_bytes_per_partition")
    assert v1.tensor.is_assumption("clock_hz")
    assert v1.tensor.source_of("clock_hz").startswith(ASSUMPTION)


def test_v1_streaming_engines_from_documented_rates_and_flop_per_cycle():
    """nc-v2: VectorE 2.3 TFLOPS is 10x, ScalarE 2.9 TFLOPS 3x NC-v1; nc-v1: 256 and 512 FLOP/cycle."""
    v1, v2 = hardware.core("v1"), hardware.core("v2")
    assert v1.vector.elements_per_s == pytest.approx(v2.vector.elements_per_s / 10)
    assert v1.scalar.elements_per_s == pytest.approx(v2.scalar.elements_per_s / 3)
    assert v1.vector.clock_hz * 256 == pytest.approx(2.3e12 / 10)
    assert v1.scalar.clock_hz * 512 == pytest.approx(2.9e12 / 3)
    # a fixed cycle count (an instruction's static overhead) is shorter than at the old
    # effective clock (v2's / 10), where all of the slowdown sat in the clock
    assert v1.vector.clock_hz > 1.12e9 / 10 and v1.scalar.clock_hz > 1.4e9 / 3
    assert v1.vector.is_assumption("clock_hz") and v1.scalar.is_assumption("clock_hz")


def test_unknown_citation_field_is_rejected():
    with pytest.raises(ValueError, match="unknown field"):
        dataclasses.replace(hardware.core("v2"), sources=(("sbuf_size_typo", "x"),))


def test_every_core_figure_the_simulator_reads_is_cited():
    for spec in hardware.CORES:
        for name in ("sbuf_bytes_per_partition", "supported_dtypes"):
            assert spec.source_of(name), (spec.name, name)
        assert spec.tensor.source_of("clock_hz"), spec.name
        assert spec.vector.source_of("clock_hz"), spec.name
        assert spec.dma.source_of("bytes_per_s_per_engine"), spec.name
