"""The host side of an instance: its processor, the PCIe link to each Neuron chip, and what one
call through the framework costs the host before the device starts.

Published model latencies are end to end through the framework (torch-neuronx, NeuronPerf's
timers): the host submits the execution (framework and runtime dispatch), the chip's DMA engines
copy the inputs from host memory over PCIe ("Data is transferred between the host CPU and the
accelerator device ... using DMA", nrt-developer-guide), the NeuronCore runs, and the outputs
are copied back. trnsim's device time is the middle part; `trnsim.runtime.host_time` adds the
rest from these figures.

The PCIe generation is the host processor's (the EC2 instance-type pages name the processor of
each family; Intel and AMD document the PCIe generation of each): the Neuron chips' own PCIe
interface is not published, so where a chip could be older than its host the link is assumed
to run at the host's generation. The link width per chip is not published for any Neuron
instance: x16 is assumed (the width of a full accelerator slot).
"""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.hardware.spec import ASSUMPTION, Spec, cite

# PCI-SIG base specifications: transfer rate per lane and encoding. Gen3-5: 8, 16, 32 GT/s with
# 128b/130b encoding; Gen6: 64 GT/s PAM4 with FLIT encoding (236 of 256 bytes carry data).
PCIE_LANE_BYTES_PER_S: dict[int, float] = {
    3: 8e9 * 128 / 130 / 8,
    4: 16e9 * 128 / 130 / 8,
    5: 32e9 * 128 / 130 / 8,
    6: 64e9 * 236 / 256 / 8,
}

# Neuron Explorer troubleshooting (tools/neuron-explorer/troubleshooting.rst, SDK 2.32): timing
# a model call without synchronising shows "~0.2 ms": the host's queue submission time of one
# execution through the PyTorch framework and the runtime, paid before the device starts.
FRAMEWORK_DISPATCH_NS = 200_000.0

# transformers-neuronx (aws-neuron/transformers-neuronx, 0.10 of Neuron SDK 2.18, the stack of
# the published generation rows; layers/transformer.py `inputs`): a decoder graph's position
# inputs, cache_ids [tokens], start_ids [batch] and last_token_id (a scalar), are s32
# parameters, copied to every rank each call beside the hidden state.
FRAMEWORK_INDEX_BYTES = 4


@dataclass(frozen=True, kw_only=True)
class HostSpec(Spec):
    """The host of one instance family (see the module docstring)."""

    processor: str
    pcie_generation: int
    pcie_lanes_per_chip: int = 16
    dispatch_ns: float = FRAMEWORK_DISPATCH_NS  # framework + runtime, per model call

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.pcie_generation not in PCIE_LANE_BYTES_PER_S:
            raise ValueError(f"PCIe generation {self.pcie_generation}: known generations are "
                             f"{', '.join(map(str, PCIE_LANE_BYTES_PER_S))}")

    @property
    def link_bytes_per_s(self) -> float:
        """One direction of one chip's host link."""
        return self.pcie_lanes_per_chip * PCIE_LANE_BYTES_PER_S[self.pcie_generation]

    @property
    def link_name(self) -> str:
        return f"PCIe Gen{self.pcie_generation} x{self.pcie_lanes_per_chip}"


_WIDTH = f"{ASSUMPTION}: x16 (no Neuron instance publishes its chips' host-link width)"
_DISPATCH = "explorer-troubleshooting (~0.2 ms queue submission time of a model call)"


def _host(processor: str, generation: int, generation_source: str) -> HostSpec:
    return HostSpec(processor=processor, pcie_generation=generation,
                    sources=cite(processor="ec2-instance-types", pcie_generation=generation_source,
                                 pcie_lanes_per_chip=_WIDTH, dispatch_ns=_DISPATCH))


INF1_HOST = _host("2nd Gen Intel Xeon Scalable (Cascade Lake)", 3,
                  "Cascade Lake's PCIe 3.0 (the Inferentia chip's is not published)")
INF2_HOST = _host("3rd Gen AMD EPYC (Milan)", 4,
                  "Milan's PCIe 4.0 (the Inferentia2 chip's is not published)")
TRN1_HOST = _host("3rd Gen Intel Xeon Scalable (Ice Lake)", 4,
                  "Ice Lake's PCIe 4.0 (the Trainium chip's is not published)")
TRN2_HOST = _host("4th Gen Intel Xeon Scalable (Sapphire Rapids)", 5,
                  "Sapphire Rapids' PCIe 5.0 (the Trainium2 chip's is not published)")
TRN3_HOST = HostSpec(
    processor="not published", pcie_generation=6,
    sources=cite(processor="inst-trn3 (no processor named)",
                 pcie_generation=f"{ASSUMPTION}: Gen6, as trn3-arch gives for every Trainium3 "
                                 "link; the host link is not described",
                 pcie_lanes_per_chip=_WIDTH, dispatch_ns=_DISPATCH))
