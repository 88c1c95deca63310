"""The figures users check first, asserted against the catalog's derived totals."""

import pytest

from trnsim import hardware

GiB = 1024**3
TiB = 1024**4


def test_trn2_48xlarge_totals():
    spec = hardware.instance("trn2.48xlarge")
    assert spec.chips == 16
    assert spec.neuron_cores == 128
    assert spec.logical_cores() == 64  # LNC=2 default
    assert spec.logical_cores(1) == 128
    assert spec.device_memory_bytes == int(1.5 * TiB)
    assert spec.device_memory_bytes_per_s == pytest.approx(46.4e12, rel=0.01)
    assert spec.peak_flops("fp8") == pytest.approx(20.8e15, rel=0.01)


def test_trn2_ultraserver_totals():
    spec = hardware.instance("trn2-ultraserver")
    assert spec.chips == 64
    assert spec.neuron_cores == 512
    assert spec.device_memory_bytes == 6 * TiB
    assert spec.device_memory_bytes_per_s == pytest.approx(185.6e12, rel=0.01)
    assert spec.peak_flops("fp8") == pytest.approx(83.2e15, rel=0.01)
    assert spec.vcpus == 4 * hardware.instance("trn2u.48xlarge").vcpus


def test_trainium2_chip():
    chip = hardware.chip("Trainium2")
    assert chip.cores == 8
    assert chip.memory_bytes == 96 * GiB
    assert chip.memory_bytes_per_s == pytest.approx(2.9e12)
    assert chip.peak_flops("fp8") == pytest.approx(1.3e15, rel=0.01)
    assert chip.logical_cores() == 4
    assert chip.logical_cores(1) == 8


def test_trn1_instances():
    big = hardware.instance("trn1.32xlarge")
    assert big.chips == 16 and big.neuron_cores == 32
    assert big.device_memory_bytes == 512 * GiB
    assert big.efa_bits_per_s == 800e9
    assert big.peak_flops("bf16") == pytest.approx(3040e12)
    small = hardware.instance("trn1.2xlarge")
    assert small.chips == 1 and small.device_memory_bytes == 32 * GiB


def test_inferentia2_chip_and_inf2_48xlarge():
    chip = hardware.chip("Inferentia2")
    assert chip.cores == 2
    assert chip.memory_bytes == 32 * GiB
    assert chip.memory_bytes_per_s == pytest.approx(820 * GiB)
    assert chip.peak_flops("bf16") == pytest.approx(190e12)
    assert chip.peak_flops("fp32") == pytest.approx(47.5e12)
    big = hardware.instance("inf2.48xlarge")
    assert big.chips == 12 and big.device_memory_bytes == 384 * GiB


def test_inferentia_chip():
    chip = hardware.chip("Inferentia")
    assert chip.cores == 4
    assert chip.memory_bytes == 8 * GiB
    assert chip.memory_bytes_per_s == pytest.approx(50 * GiB)
    assert chip.peak_flops("fp16") == pytest.approx(64e12)
    assert chip.peak_flops("bf16") == pytest.approx(64e12)
    assert chip.peak_flops("int8") == pytest.approx(128e12)
    assert chip.peak_flops("fp8") is None


def test_trn3_ultraservers_match_published_totals():
    gen1 = hardware.instance("trn3-gen1-ultraserver")
    assert gen1.peak_flops("fp8") == pytest.approx(161_088e12)
    assert gen1.peak_flops("bf16") == pytest.approx(42_944e12)
    assert gen1.device_memory_bytes == 9216 * GiB
    assert gen1.vcpus == 768
    gen2 = hardware.instance("trn3-gen2-ultraserver")
    assert gen2.chips == 144
    assert gen2.peak_flops("fp32") == pytest.approx(26_352e12)
    assert gen2.host_memory_bytes == 27_648 * GiB
    assert gen2.efa_bits_per_s == 28_800e9


@pytest.mark.parametrize("core", hardware.CORES[1:], ids=lambda c: c.name)
def test_core_peak_from_clock_matches_documented_tflops(core):
    """Peak derived from array x clock agrees with each NeuronCore page's TFLOPS within 2%."""
    for precision, tflops in core.tensor.documented_dense_tflops:
        assert core.peak_flops(precision) / 1e12 == pytest.approx(tflops, rel=0.02), precision


def test_chip_peak_documented_vs_simulated_differ_by_a_few_percent():
    # AWS's chip pages round up relative to cores x clock; both are kept and stay close.
    for chip in hardware.CHIPS[1:]:
        documented = chip.peak_flops("bf16")
        simulated = chip.simulated_peak_flops("bf16")
        assert 0.9 < simulated / documented <= 1.0, chip.name


def test_peak_per_dollar_is_derived_and_none_without_price():
    inf2 = hardware.instance("inf2.xlarge")
    assert inf2.peak_flops_per_dollar_hour() == pytest.approx(190e12 / 0.758)
    assert hardware.instance("trn2.48xlarge").price_per_hour is None
    assert hardware.instance("trn2.48xlarge").peak_flops_per_dollar_hour() is None


def test_disagreeing_sources_are_kept():
    trn2 = hardware.chip("trn2")
    alts = trn2.alternatives_for("peak_sparse_tflops")
    assert alts and alts[0].value == 5200.0
    assert trn2.peak_sparse_tflops == 2563.0
    trn1 = hardware.instance("trn1.32xlarge")
    assert trn1.alternatives_for("peak_flops")[0].value == pytest.approx(3.4e15)
