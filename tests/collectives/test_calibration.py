"""The fabric's figures (hardware.fabric) and the calibration targets they must meet."""

import pytest

from trnsim import hardware
from trnsim.collectives import Collective, Fabric, iteration_time_ns
from trnsim.errors import UnsupportedError
from trnsim.hardware import fabric

# shared/calibration/measurements.csv, rows nccom-allreduce-2r-1MiB and nccom-allreduce-2r-1GiB:
# the nccom-test documentation's 2-rank fp32 all-reduce on trn1.32xlarge (time:avg, us).
MEASURED_US = {2**20: 68.0, 2**30: 18930.0}
# shared/reference/neuron-interfaces.md: the same curve has a 58 us floor up to 64 KiB.
FLOOR_US = 58.0


def _nccom_time_us(size, ranks=2, instance="trn1.32xlarge", dtype="float32"):
    time_ns, _ = iteration_time_ns(Fabric(instance), Collective("all_reduce", size, dtype, ranks))
    return time_ns / 1e3


@pytest.mark.parametrize("size", sorted(MEASURED_US))
def test_calibration_targets_within_20_percent(size):
    assert _nccom_time_us(size) == pytest.approx(MEASURED_US[size], rel=0.20)


@pytest.mark.parametrize("size", [1024, 16384, 65536])
def test_small_messages_sit_on_the_documented_floor(size):
    assert _nccom_time_us(size) == pytest.approx(FLOOR_US, rel=0.03)


def test_constants_are_derived_from_the_calibration_data():
    spec = fabric.TRAINIUM_FABRIC
    slope = 2**30 / ((18930 - 58) * 1e-6)  # the 1 GiB row above the floor
    assert spec.collective_bytes_per_s_per_core == pytest.approx(slope)
    assert spec.launch_latency_ns == pytest.approx(58_000 - 2 * spec.hop_latency_ns)
    assert spec.issue_interval_ns == 58_000
    assert (spec.hop_latency_ns, spec.efa_latency_ns) == (2000, 15000)
    for name in ("collective_bytes_per_s_per_core", "launch_latency_ns", "issue_interval_ns"):
        assert "calibrated" in spec.source_of(name)
    assert spec.is_assumption("cc_cores_per_rank")


def test_later_chips_scale_with_their_cores_dma_bandwidth():
    trn1, trn2, trn3 = (fabric.fabric_spec(c) for c in ("Trainium", "Trainium2", "Trainium3"))
    for later, core in ((trn2, "v3"), (trn3, "v4")):
        ratio = hardware.core(core).dma.bytes_per_s / hardware.core("v2").dma.bytes_per_s
        assert later.collective_bytes_per_s_per_core == pytest.approx(
            trn1.collective_bytes_per_s_per_core * ratio)
        assert later.is_assumption("collective_bytes_per_s_per_core")
    assert trn2.rank_port_bytes_per_s(2) == 2 * trn2.collective_bytes_per_s_per_core
    assert fabric.fabric_spec(hardware.chip("inf2")) == fabric.fabric_spec("Inferentia2")
    with pytest.raises(UnsupportedError, match="Inferentia"):
        fabric.fabric_spec("Inferentia")
    assert fabric.fabric_spec("Trainium").source_of("hop_latency_ns").startswith("https://")
    # the inter-node per-hop latency is documented for every Neuron node (internode doc)
    assert not fabric.fabric_spec("Trainium").is_assumption("efa_latency_ns")
    assert not fabric.fabric_spec("Trainium2").is_assumption("efa_latency_ns")
