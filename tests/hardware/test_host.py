"""Host specs: PCIe rates from the PCI-SIG figures, a host on every instance, cited figures."""

import pytest

from trnsim import hardware
from trnsim.hardware.host import PCIE_LANE_BYTES_PER_S, HostSpec


def test_pcie_rates_are_the_pci_sig_lane_rates():
    # Gen4 x16: 16 GT/s x 16 lanes with 128b/130b encoding = 31.5 GB/s each way
    assert 16 * PCIE_LANE_BYTES_PER_S[4] == pytest.approx(31.5e9, rel=1e-3)
    assert PCIE_LANE_BYTES_PER_S[5] == pytest.approx(2 * PCIE_LANE_BYTES_PER_S[4])
    assert PCIE_LANE_BYTES_PER_S[4] == pytest.approx(2 * PCIE_LANE_BYTES_PER_S[3])


def test_every_instance_has_a_cited_host():
    for spec in hardware.INSTANCES:
        host = spec.host
        assert host is not None, spec.name
        for field in ("processor", "pcie_generation", "pcie_lanes_per_chip", "dispatch_ns"):
            assert host.source_of(field), (spec.name, field)
        assert host.is_assumption("pcie_lanes_per_chip")  # no instance publishes the width


def test_host_generation_follows_the_processor():
    gen = {name: hardware.instance(name).host.pcie_generation
           for name in ("inf1.xlarge", "inf2.xlarge", "trn1.2xlarge", "trn2.48xlarge")}
    assert gen == {"inf1.xlarge": 3, "inf2.xlarge": 4, "trn1.2xlarge": 4, "trn2.48xlarge": 5}
    assert hardware.instance("inf1.xlarge").host.link_name == "PCIe Gen3 x16"


def test_an_unknown_pcie_generation_is_refused():
    with pytest.raises(ValueError, match="PCIe generation 2"):
        HostSpec(processor="x", pcie_generation=2)
