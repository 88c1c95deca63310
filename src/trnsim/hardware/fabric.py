"""The interconnect's figures for collectives: latencies, per-core collective bandwidth, CC-cores.

This is the one place the collectives layer reads its timing constants from. Link bandwidths are
the topology's (`trnsim.hardware.topology`); EFA bandwidth is the instance's; what is here is what
neither the chip nor the instance tables give. Each figure cites a page or is an ``ASSUMPTION``.
Two are calibrated, from the project's calibration data only:

- the 58 us floor of nccom-test's 2-rank fp32 all-reduce on trn1 for messages up to 64 KiB
  (shared/reference/neuron-interfaces.md): the cost of an empty collective, so
  `issue_interval_ns` = 58 us and `launch_latency_ns` = 58 us minus the ring's two hops;
- the 1 GiB row of that curve (shared/calibration/measurements.csv, nccom-allreduce-2r-1GiB,
  18,930 us): `collective_bytes_per_s_per_core` = 1 GiB / (18,930 us - 58 us).

The 1 MiB row (68 us) is not used, so it stays a prediction.

That 58 us floor is a reducing collective's (all-reduce; reduce-scatter is taken to be alike).
Collectives that only copy (all-gather, all-to-all, permute, send/recv) start much sooner: the
same page's 8-rank all-gather (``--stats`` example) takes 10 us (p50) at 1 KiB, and the runtime
docs put the fixed cost of a collective at "10^0 to 10^1 us" (INTRANODE_DOC). So copying
collectives have their own floor, `copy_issue_interval_ns` = 10 us, and launch latency (the
floor minus the one step of a mesh all-gather). The 512 KiB point of that example is a
calibration row, so it stays a prediction.

How the collectives layer uses them (see `trnsim.collectives`):
- a rank (a logical NeuronCore) sends and receives collective data through a port of
  `rank_port_bytes_per_s(lnc)` per direction, on-chip and off-chip alike;
- every algorithm step costs `hop_latency_ns` (`efa_latency_ns` if it crosses instances) before
  its data flows;
- a collective starts `launch_latency_ns` after the CC-cores admit it, and a rank's CC stream
  admits at most one collective per `issue_interval_ns`;
- a collective holds `cc_cores_per_rank` of its chip's CC-cores per rank on that chip while it runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from trnsim.errors import UnsupportedError
from trnsim.hardware.chips import CHIPS, ChipSpec
from trnsim.hardware.cores import NC_V2, NC_V3, NC_V4
from trnsim.hardware.instances import InstanceSpec
from trnsim.hardware.spec import ASSUMPTION, Spec, cite

_DOCS = "https://awsdocs-neuron.readthedocs-hosted.com/en/latest/"
INTRANODE_DOC = _DOCS + "neuron-runtime/explore/intranode-collective-comm.html"
INTERNODE_DOC = _DOCS + "neuron-runtime/explore/internode-collective-comm.html"
COLLECTIVES_DOC = _DOCS + "neuron-runtime/about/collectives.html"
NCCOM_DOC = _DOCS + "tools/neuron-sys-tools/nccom-test.html"

# --- the calibration (2-rank fp32 all-reduce on trn1) ---------------------------------------
# Two ranks are the two NeuronCores of one Trainium chip, so the curve measures the on-chip path.
_TRN1_FLOOR_US = 58.0  # neuron-interfaces.md: "a 58 us floor up to 64 KiB"
_TRN1_1GIB_US = 18930.0  # measurements.csv nccom-allreduce-2r-1GiB
_HOP_LATENCY_NS = 2000.0  # "about 1-2 us (HBM load dependent)": the busy-HBM end
_RING_ALL_REDUCE_HOPS_2_RANKS = 2  # 2(r-1) steps
_TRN1_COPY_FLOOR_US = 10.0  # nccom-test doc, 8-rank fp32 all-gather at 1 KiB: p50 10 us
_MESH_ALL_GATHER_HOPS = 1  # one step
REDUCING_OPS = frozenset({"all_reduce", "reduce_scatter"})  # collectives that reduce


def _slope_bytes_per_s() -> float:
    """A 2-rank ring all-reduce sends the whole buffer once per rank: time = floor + size / bw."""
    return 2**30 / ((_TRN1_1GIB_US - _TRN1_FLOOR_US) * 1e-6)


TRN1_COLLECTIVE_BYTES_PER_S_PER_CORE = _slope_bytes_per_s()  # ~56.9e9 B/s
# An empty collective costs the floor: the launch plus the ring's two hops.
TRN1_LAUNCH_LATENCY_NS = _TRN1_FLOOR_US * 1e3 - _RING_ALL_REDUCE_HOPS_2_RANKS * _HOP_LATENCY_NS


@dataclass(frozen=True, kw_only=True)
class FabricSpec(Spec):
    """Collective-communication figures of one chip generation (and the EFA it is paired with)."""

    chip: str  # ChipSpec.name
    # One algorithm step between two ranks of an instance (on-chip or NeuronLink, routed or not):
    # DMA start, data, semaphore write. Routing through intermediate chips adds nothing further.
    hop_latency_ns: float
    # One step between ranks in different instances: EFA, HBM to HBM.
    efa_latency_ns: float
    # What one physical NeuronCore's collective DMA path moves per direction. A rank's port is
    # lnc x this; it bounds on-chip core-to-core traffic and the rank's share of off-chip traffic.
    collective_bytes_per_s_per_core: float
    # From the CC-cores admitting a collective to its first step (descriptor rings armed, barrier).
    launch_latency_ns: float
    # A rank's CC stream admits at most one collective per interval; back-to-back collectives
    # (nccom-test's iterations) are paced by it, so small ones cost this much each.
    issue_interval_ns: float
    # The same two for collectives that only copy (no reduction): all-gather, all-to-all,
    # permute, send/recv.
    copy_launch_latency_ns: float
    copy_issue_interval_ns: float
    cc_cores_per_rank: int = 1

    def launch_ns(self, op: str) -> float:
        return self.launch_latency_ns if op in REDUCING_OPS else self.copy_launch_latency_ns

    def interval_ns(self, op: str) -> float:
        return self.issue_interval_ns if op in REDUCING_OPS else self.copy_issue_interval_ns

    def rank_port_bytes_per_s(self, lnc: int = 1) -> float:
        """Per-direction collective bandwidth of one rank (a logical core of `lnc` physical ones)."""
        return self.collective_bytes_per_s_per_core * lnc


_EFA_TRN2 = (f"{COLLECTIVES_DOC}: ib_write_lat, 15 us HBM to HBM between Trn2 servers; "
             f"{INTERNODE_DOC}: ~15 us per hop")

_TRN1_SOURCES = cite(
    hop_latency_ns=f"{INTRANODE_DOC} (per-hop latency of Ring/KangaRing about 1-2 us, HBM load "
                   "dependent; the upper end is used)",
    efa_latency_ns=f"{INTERNODE_DOC}: the per-hop (point-to-point) latency between nodes is "
                   f"~15 us; {COLLECTIVES_DOC}: ib_write_lat HBM to HBM 15 us between Trn2 servers",
    collective_bytes_per_s_per_core="calibrated: measurements.csv nccom-allreduce-2r-1GiB "
                                    "(18,930 us) minus the 58 us floor",
    launch_latency_ns=f"calibrated: the 58 us floor ({NCCOM_DOC}, via neuron-interfaces.md) minus "
                      "the ring's 2 hop latencies",
    issue_interval_ns=f"calibrated: {NCCOM_DOC}, the 58 us floor up to 64 KiB. "
                      f"{ASSUMPTION}: the floor is a per-collective issue cost that overlaps the "
                      "previous collective's data movement (the curve rises slower than its "
                      "large-size slope between 64 KiB and 4 MiB)",
    copy_launch_latency_ns=f"calibrated: {NCCOM_DOC}, 8-rank all-gather p50 10 us at 1 KiB, "
                           "minus one hop (a mesh all-gather's one step)",
    copy_issue_interval_ns=f"calibrated: {NCCOM_DOC}, 8-rank all-gather p50 10 us at 1 KiB "
                           f"(INTRANODE_DOC: a collective's latency term is 10^0 to 10^1 us)",
    cc_cores_per_rank=f"{ASSUMPTION}: each rank's share of a collective is driven by one CC-core "
                      f"({COLLECTIVES_DOC}: CC-cores orchestrate each NeuronCore's collectives)",
)

TRAINIUM_FABRIC = FabricSpec(
    chip="Trainium",
    hop_latency_ns=_HOP_LATENCY_NS,
    efa_latency_ns=15_000.0,
    collective_bytes_per_s_per_core=TRN1_COLLECTIVE_BYTES_PER_S_PER_CORE,
    launch_latency_ns=TRN1_LAUNCH_LATENCY_NS,
    issue_interval_ns=_TRN1_FLOOR_US * 1e3,
    copy_launch_latency_ns=_TRN1_COPY_FLOOR_US * 1e3 - _MESH_ALL_GATHER_HOPS * _HOP_LATENCY_NS,
    copy_issue_interval_ns=_TRN1_COPY_FLOOR_US * 1e3,
    sources=_TRN1_SOURCES,
)


def _scaled_bandwidth(core_dma_bytes_per_s: float) -> float:
    """ASSUMPTION: the collective path is the same fraction of a core's DMA bandwidth as on trn1."""
    return TRN1_COLLECTIVE_BYTES_PER_S_PER_CORE * core_dma_bytes_per_s / NC_V2.dma.bytes_per_s


def _later_generation(chip: str, core_dma_bytes_per_s: float, efa_source: str) -> FabricSpec:
    sources = dict(_TRN1_SOURCES)
    sources["efa_latency_ns"] = efa_source
    sources["collective_bytes_per_s_per_core"] = (
        f"{ASSUMPTION}: trn1's calibrated figure x this core's DMA bandwidth / NeuronCore-v2's")
    sources["launch_latency_ns"] = f"{ASSUMPTION}: as calibrated on trn1"
    sources["issue_interval_ns"] = f"{ASSUMPTION}: as calibrated on trn1"
    sources["copy_launch_latency_ns"] = f"{ASSUMPTION}: as calibrated on trn1"
    sources["copy_issue_interval_ns"] = f"{ASSUMPTION}: as calibrated on trn1"
    return replace(TRAINIUM_FABRIC, chip=chip,
                   collective_bytes_per_s_per_core=_scaled_bandwidth(core_dma_bytes_per_s),
                   sources=cite(**sources))


INFERENTIA2_FABRIC = replace(
    TRAINIUM_FABRIC, chip="Inferentia2",
    sources=cite(**{**dict(_TRN1_SOURCES),
                    "collective_bytes_per_s_per_core": f"{ASSUMPTION}: as Trainium (same "
                                                       "NeuronCore-v2 and DMA engines)"}),
)
TRAINIUM2_FABRIC = _later_generation("Trainium2", NC_V3.dma.bytes_per_s, _EFA_TRN2)
TRAINIUM3_FABRIC = _later_generation("Trainium3", NC_V4.dma.bytes_per_s,
                                     f"{ASSUMPTION}: as Trn2 ({_EFA_TRN2})")

FABRICS: dict[str, FabricSpec] = {
    f.chip: f for f in (INFERENTIA2_FABRIC, TRAINIUM_FABRIC, TRAINIUM2_FABRIC, TRAINIUM3_FABRIC)
}


def fabric_spec(chip: ChipSpec | str) -> FabricSpec:
    """The collective figures of a chip (a ChipSpec or its name, e.g. "Trainium2")."""
    name = chip.name if isinstance(chip, ChipSpec) else str(chip)
    found = FABRICS.get(name)
    if found is None:
        known = [c.name for c in CHIPS if c.name in FABRICS]
        raise UnsupportedError(f"collectives are not modelled on {name} (nccom-test supports "
                               f"{', '.join(known)})")
    return found


@contextmanager
def fabric_variant(chip: str, **changes) -> Iterator[FabricSpec]:
    """Within the block, chip generation `chip` ("Trainium") has a fabric with the given changes
    (what-if studies, like `core_variant`; not thread-safe)."""
    saved = fabric_spec(chip)
    FABRICS[saved.chip] = variant = replace(saved, **changes)
    try:
        yield variant
    finally:
        FABRICS[saved.chip] = saved


def efa_bytes_per_s_per_chip(spec: InstanceSpec) -> float | None:
    """EFA bandwidth per chip and direction: the instance's EFA split evenly over its chips.

    Trn2 documents one 200 Gbps EFA interface per chip (16 x 200 = 3.2 Tbps per server,
    COLLECTIVES_DOC); ASSUMPTION: other instances spread their EFA bandwidth the same way.
    """
    if spec.efa_bits_per_s_per_server is None:
        return None
    return spec.efa_bits_per_s_per_server / 8 / spec.chips_per_server
