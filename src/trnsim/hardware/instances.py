"""EC2 instances and UltraServers built from Neuron chips.

Per-server figures are typed once; totals (chips, NeuronCores, device memory and bandwidth, peak
FLOPS, EFA) are derived. UltraServers are `servers` copies of a member instance joined by extra
links. Prices are us-east-1 on-demand dollars per hour, None where no source gives one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from trnsim.hardware import topology as topo
from trnsim.hardware.chips import INFERENTIA, INFERENTIA2, TRAINIUM, TRAINIUM2, TRAINIUM3, ChipSpec
from trnsim.hardware.host import INF1_HOST, INF2_HOST, TRN1_HOST, TRN2_HOST, TRN3_HOST, HostSpec
from trnsim.hardware.spec import ASSUMPTION, Alternative, Spec, cite

GiB = 1024**3
GB = 1e9
Gbps = 1e9


@dataclass(frozen=True, kw_only=True)
class InstanceSpec(Spec):
    name: str
    chip: ChipSpec
    chips_per_server: int
    servers: int = 1
    vcpus_per_server: int
    host_memory_bytes_per_server: int
    efa_bits_per_s_per_server: float | None
    neuronlink_bytes_per_s_per_chip: float | None
    inter_server_bytes_per_s_per_chip: float | None = None  # UltraServer links between servers
    topology_kind: str  # "single", "ring", "torus2d", "ultraserver", "switched"
    price_per_hour: float | None
    reserved_price_per_hour: float | None = None
    member: str | None = None  # the instance type an UltraServer is made of
    host: HostSpec | None = None  # processor, PCIe link per chip, framework dispatch
    aliases: tuple[str, ...] = ()

    # --- derived totals ---------------------------------------------------------------------
    @property
    def chips(self) -> int:
        return self.chips_per_server * self.servers

    @property
    def neuron_cores(self) -> int:
        """Physical NeuronCores."""
        return self.chips * self.chip.cores

    def logical_cores(self, lnc: int | None = None) -> int:
        return self.chips * self.chip.logical_cores(lnc)

    @property
    def vcpus(self) -> int:
        return self.vcpus_per_server * self.servers

    @property
    def host_memory_bytes(self) -> int:
        return self.host_memory_bytes_per_server * self.servers

    @property
    def device_memory_bytes(self) -> int:
        return self.chips * self.chip.memory_bytes

    @property
    def device_memory_bytes_per_s(self) -> float:
        return self.chips * self.chip.memory_bytes_per_s

    @property
    def efa_bits_per_s(self) -> float | None:
        per = self.efa_bits_per_s_per_server
        return None if per is None else per * self.servers

    def peak_flops(self, precision: str) -> float | None:
        """Documented dense peak of all chips, FLOP/s."""
        per_chip = self.chip.peak_flops(precision)
        return None if per_chip is None else per_chip * self.chips

    def peak_flops_per_dollar_hour(self, precision: str = "bf16") -> float | None:
        peak = self.peak_flops(precision)
        if peak is None or self.price_per_hour is None:
            return None
        return peak / self.price_per_hour

    @cached_property
    def topology(self) -> topo.Topology:
        link = self.neuronlink_bytes_per_s_per_chip or 0.0
        if self.topology_kind == "single":
            return topo.single(self.chips)
        if self.topology_kind == "ring":
            return topo.ring(self.chips, link)
        if self.topology_kind == "torus2d":
            return topo.torus2d(4, self.chips // 4, link)
        if self.topology_kind == "ultraserver":
            return topo.ultraserver(self.servers, 4, self.chips_per_server // 4, link,
                                    self.inter_server_bytes_per_s_per_chip or 0.0)
        if self.topology_kind == "switched":
            return topo.switched(self.servers, self.chips_per_server, *_TRN3_SWITCH_LINKS)
        raise ValueError(f"{self.name}: unknown topology kind {self.topology_kind!r}")


# Trn3 links are PCIe Gen6 x8: 4 to the server switch (256 GB/s per chip), 5 between servers
# (320 GB/s per chip); see topology.switched for the two-level assumption.
_TRN3_SWITCH_LINKS = (256 * GB, 320 * GB)

_INF1_SOURCES = dict(chips_per_server="inst-inf1", vcpus_per_server="inst-inf1",
                     host_memory_bytes_per_server="inst-inf1", price_per_hour="price-neuronperf")


def _inf1(name: str, chips: int, vcpus: int, host_gib: int, net_gbps: float, price: float,
          link: float | None, kind: str) -> InstanceSpec:
    return InstanceSpec(
        name=name, chip=INFERENTIA, chips_per_server=chips, vcpus_per_server=vcpus,
        host_memory_bytes_per_server=host_gib * GiB, efa_bits_per_s_per_server=net_gbps * Gbps,
        neuronlink_bytes_per_s_per_chip=link, topology_kind=kind, price_per_hour=price,
        host=INF1_HOST,
        sources=cite(**_INF1_SOURCES, efa_bits_per_s_per_server="inst-inf1 (up to; network, not EFA "
                                                               "on the small sizes)",
                     neuronlink_bytes_per_s_per_chip="inst-inf1", topology_kind="inst-inf1"),
    )


def _inf2(name: str, chips: int, vcpus: int, host_gib: int, price: float, ri: float,
          kind: str) -> InstanceSpec:
    return InstanceSpec(
        name=name, chip=INFERENTIA2, chips_per_server=chips, vcpus_per_server=vcpus,
        host_memory_bytes_per_server=host_gib * GiB, efa_bits_per_s_per_server=None,
        neuronlink_bytes_per_s_per_chip=192 * GiB if chips > 1 else None, topology_kind=kind,
        price_per_hour=price, reserved_price_per_hour=ri, host=INF2_HOST,
        sources=cite(chips_per_server="inst-inf2", vcpus_per_server="inst-inf2",
                     host_memory_bytes_per_server="inst-inf2",
                     efa_bits_per_s_per_server="inst-inf2 (figure only; not given in text)",
                     neuronlink_bytes_per_s_per_chip="inst-inf2",
                     topology_kind="inst-inf2 (ring, from the figure)",
                     price_per_hour="price-3p", reserved_price_per_hour="price-ri"),
    )


INF1_XLARGE = _inf1("inf1.xlarge", 1, 4, 8, 25, 0.228, None, "single")
INF1_2XLARGE = _inf1("inf1.2xlarge", 1, 8, 16, 25, 0.362, None, "single")
INF1_6XLARGE = _inf1("inf1.6xlarge", 4, 24, 48, 25, 1.180, 32 * GiB, "ring")
INF1_24XLARGE = _inf1("inf1.24xlarge", 16, 96, 192, 100, 4.721, 32 * GiB, "ring")

INF2_XLARGE = _inf2("inf2.xlarge", 1, 4, 16, 0.758, 0.328, "single")
INF2_8XLARGE = _inf2("inf2.8xlarge", 1, 32, 128, 1.968, 0.850, "single")
INF2_24XLARGE = _inf2("inf2.24xlarge", 6, 96, 384, 6.491, 2.804, "ring")
INF2_48XLARGE = _inf2("inf2.48xlarge", 12, 192, 768, 12.981, 5.608, "ring")

TRN1_2XLARGE = InstanceSpec(
    name="trn1.2xlarge", chip=TRAINIUM, chips_per_server=1, vcpus_per_server=8,
    host_memory_bytes_per_server=32 * GiB, efa_bits_per_s_per_server=25 * Gbps,
    neuronlink_bytes_per_s_per_chip=None, topology_kind="single", price_per_hour=1.344,
    reserved_price_per_hour=0.512, host=TRN1_HOST,
    sources=cite(chips_per_server="inst-trn1", vcpus_per_server="inst-trn1",
                 host_memory_bytes_per_server="inst-trn1",
                 efa_bits_per_s_per_server="inst-trn1 (up to 25 Gbps)",
                 price_per_hour="price-3p", reserved_price_per_hour="price-ri"),
)

TRN1_32XLARGE = InstanceSpec(
    name="trn1.32xlarge", chip=TRAINIUM, chips_per_server=16, vcpus_per_server=128,
    host_memory_bytes_per_server=512 * GiB, efa_bits_per_s_per_server=800 * Gbps,
    neuronlink_bytes_per_s_per_chip=384 * GiB, topology_kind="torus2d", price_per_hour=21.50,
    reserved_price_per_hour=8.197, host=TRN1_HOST,
    sources=cite(chips_per_server="inst-trn1", vcpus_per_server="inst-trn1",
                 host_memory_bytes_per_server="inst-trn1", efa_bits_per_s_per_server="inst-trn1",
                 neuronlink_bytes_per_s_per_chip="inst-trn1",
                 topology_kind="inst-trn1 (2D torus; older pages: 4D-HyperCube)",
                 price_per_hour="price-usage-ai; price-3p", reserved_price_per_hour="price-ri"),
    alternatives=(Alternative("peak_flops", 3.4e15, "FLOP/s", "launch-trn1",
                              "launch post: 3.4 PFLOPS BF16/FP16 per trn1.32xlarge"),),
)

TRN1N_32XLARGE = replace(
    TRN1_32XLARGE, name="trn1n.32xlarge", efa_bits_per_s_per_server=1600 * Gbps,
    neuronlink_bytes_per_s_per_chip=768 * GiB, price_per_hour=24.78, reserved_price_per_hour=None,
    sources=cite(chips_per_server="inst-trn1", efa_bits_per_s_per_server="inst-trn1",
                 neuronlink_bytes_per_s_per_chip="inst-trn1", price_per_hour="price-3p"),
    alternatives=(),
)

_TRN2_PRICE_CONFLICT = tuple(
    Alternative("price_per_hour", p, "$/h", "third-party", "conflicting third-party values; "
                "trnsim uses none") for p in (12.00, 16.02, 35.76))

TRN2_48XLARGE = InstanceSpec(
    name="trn2.48xlarge", chip=TRAINIUM2, chips_per_server=16, vcpus_per_server=192,
    host_memory_bytes_per_server=2048 * GiB, efa_bits_per_s_per_server=3200 * Gbps,
    neuronlink_bytes_per_s_per_chip=1024 * GB, topology_kind="torus2d", price_per_hour=None,
    host=TRN2_HOST,
    sources=cite(chips_per_server="inst-trn2", vcpus_per_server="inst-trn2",
                 host_memory_bytes_per_server="inst-trn2",
                 efa_bits_per_s_per_server="inst-trn2 (EFAv3)",
                 neuronlink_bytes_per_s_per_chip="inst-trn2",
                 topology_kind="inst-trn2; neuron-ls (4x4 torus adjacency)",
                 price_per_hour="none published in the sources trnsim uses"),
    alternatives=_TRN2_PRICE_CONFLICT,
)

TRN2U_48XLARGE = replace(TRN2_48XLARGE, name="trn2u.48xlarge")

TRN2_ULTRASERVER = replace(
    TRN2U_48XLARGE, name="trn2-ultraserver", servers=4, member="trn2u.48xlarge",
    inter_server_bytes_per_s_per_chip=256 * GB, topology_kind="ultraserver",
    aliases=("trn2u-ultraserver", "trn2-us", "trn2.ultraserver"),
    sources=TRN2U_48XLARGE.sources + cite(
        servers="inst-trn2 (4 x trn2u.48xlarge)",
        inter_server_bytes_per_s_per_chip="inst-trn2 (+256 GB/s per chip, ring across same (x,y))"),
    alternatives=(),
)

_TRN3_SOURCES = cite(
    chips_per_server="inst-trn3", servers="inst-trn3", vcpus_per_server="inst-trn3 (total / servers)",
    host_memory_bytes_per_server="inst-trn3 (total / servers)",
    efa_bits_per_s_per_server="inst-trn3 (total / servers)",
    neuronlink_bytes_per_s_per_chip="inst-trn3",
    topology_kind=f"inst-trn3 (NeuronSwitch-v1); {ASSUMPTION}: two-level switch model",
    price_per_hour="no trn3 prices or instance sizes published")
_TRN3_ALTERNATIVES = (Alternative("neuronlink_bytes_per_s_per_chip", 2.56e12, "B/s", "chip-trn3",
                                  "chip page: 2.56 TB/s; instance table: 2,048 GiB/s"),)

TRN3_GEN1_ULTRASERVER = InstanceSpec(
    name="trn3-gen1-ultraserver", chip=TRAINIUM3, chips_per_server=16, servers=4,
    vcpus_per_server=192, host_memory_bytes_per_server=2048 * GiB,
    efa_bits_per_s_per_server=3200 * Gbps, neuronlink_bytes_per_s_per_chip=2048 * GiB,
    topology_kind="switched", price_per_hour=None, aliases=("trn3-ultraserver", "trn3-gen1"),
    host=TRN3_HOST,
    sources=_TRN3_SOURCES, alternatives=_TRN3_ALTERNATIVES,
)

TRN3_GEN2_ULTRASERVER = replace(
    TRN3_GEN1_ULTRASERVER, name="trn3-gen2-ultraserver", chips_per_server=4, servers=36,
    vcpus_per_server=64, host_memory_bytes_per_server=768 * GiB,
    efa_bits_per_s_per_server=800 * Gbps, aliases=("trn3-gen2",),
)

INSTANCES: tuple[InstanceSpec, ...] = (
    INF1_XLARGE, INF1_2XLARGE, INF1_6XLARGE, INF1_24XLARGE,
    INF2_XLARGE, INF2_8XLARGE, INF2_24XLARGE, INF2_48XLARGE,
    TRN1_2XLARGE, TRN1_32XLARGE, TRN1N_32XLARGE,
    TRN2_48XLARGE, TRN2U_48XLARGE, TRN2_ULTRASERVER,
    TRN3_GEN1_ULTRASERVER, TRN3_GEN2_ULTRASERVER,
)
