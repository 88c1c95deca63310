"""Neuron devices (chips): Inferentia, Inferentia2, Trainium, Trainium2, Trainium3.

Chip peaks are the architecture docs' per-chip figures (used for catalog totals); the simulator
times instructions on the core's clocks, so `simulated_peak_flops` (cores x core peak) is shown
beside them. They differ by a few percent in AWS's own pages (e.g. Inferentia2: 190 documented vs
2 x 91.8 = 183.5 TFLOPS from the clock).
"""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.hardware.cores import NC_V1, NC_V2, NC_V3, NC_V4, CoreSpec
from trnsim.hardware.spec import Alternative, Spec, cite, lookup_pair, pairs

GiB = 1024**3
TB = 1e12


@dataclass(frozen=True, kw_only=True)
class ChipSpec(Spec):
    name: str  # "Trainium2"
    neuron_device_type: str  # as neuron-monitor prints it: "inferentia2", "trainium2"
    core: CoreSpec
    cores: int
    memory_kind: str  # "HBM" or "DDR4"
    memory_bytes: int
    memory_bytes_per_s: float
    dma_bytes_per_s: float | None
    dma_engines: int | None
    neuronlink_version: str | None
    neuronlink_ports: int | None
    cc_cores: int | None  # collective-communication cores
    peak_dense_tflops: tuple[tuple[str, float], ...]
    peak_sparse_tflops: float | None = None
    lnc_options: tuple[int, ...] = (1,)  # logical-NeuronCore sizes the chip supports
    default_lnc: int = 1

    def peak_flops(self, precision: str) -> float | None:
        """Documented dense peak (FLOP/s) for a precision class, or None."""
        tflops = lookup_pair(self.peak_dense_tflops, precision)
        return None if tflops is None else tflops * 1e12

    def simulated_peak_flops(self, precision: str) -> float | None:
        """Peak the simulator can reach: cores x the core's clock-derived peak."""
        per_core = self.core.peak_flops(precision)
        return None if per_core is None else per_core * self.cores

    def logical_cores(self, lnc: int | None = None) -> int:
        lnc = self.default_lnc if lnc is None else lnc
        return self.cores // lnc


INFERENTIA = ChipSpec(
    name="Inferentia",
    neuron_device_type="inferentia",
    core=NC_V1,
    cores=4,
    memory_kind="DDR4",
    memory_bytes=8 * GiB,
    memory_bytes_per_s=50 * GiB,
    dma_bytes_per_s=None,
    dma_engines=None,
    neuronlink_version="NeuronLink-v1",
    neuronlink_ports=None,
    cc_cores=None,
    peak_dense_tflops=pairs(bf16=64.0, fp16=64.0, int8=128.0),
    sources=cite(cores="chip-inf1", memory_bytes="chip-inf1", memory_bytes_per_s="chip-inf1",
                 peak_dense_tflops="chip-inf1", neuronlink_version="chip-inf1"),
)

INFERENTIA2 = ChipSpec(
    name="Inferentia2",
    neuron_device_type="inferentia2",
    core=NC_V2,
    cores=2,
    memory_kind="HBM",
    memory_bytes=32 * GiB,
    memory_bytes_per_s=820 * GiB,
    dma_bytes_per_s=1 * TB,
    dma_engines=32,
    neuronlink_version="NeuronLink-v2",
    neuronlink_ports=2,
    cc_cores=6,
    peak_dense_tflops=pairs(fp8=190.0, bf16=190.0, fp16=190.0, tf32=190.0, fp32=47.5, int8=380.0),
    sources=cite(cores="chip-inf2", memory_bytes="chip-inf2", memory_bytes_per_s="chip-inf2",
                 dma_bytes_per_s="chip-inf2", dma_engines="chip-inf2", neuronlink_ports="chip-inf2",
                 cc_cores="chip-inf2", peak_dense_tflops="chip-inf2"),
)

TRAINIUM = ChipSpec(
    name="Trainium",
    neuron_device_type="trainium",
    core=NC_V2,
    cores=2,
    memory_kind="HBM",
    memory_bytes=32 * GiB,
    memory_bytes_per_s=820 * GiB,
    dma_bytes_per_s=1 * TB,
    dma_engines=32,
    neuronlink_version="NeuronLink-v2",
    neuronlink_ports=4,
    cc_cores=6,
    peak_dense_tflops=pairs(fp8=190.0, bf16=190.0, fp16=190.0, tf32=190.0, fp32=47.5),
    sources=cite(cores="chip-trn1", memory_bytes="chip-trn1", memory_bytes_per_s="chip-trn1",
                 dma_bytes_per_s="chip-trn1", neuronlink_ports="chip-trn1", cc_cores="chip-trn1",
                 peak_dense_tflops="chip-trn1 (= Inferentia2)"),
)

TRAINIUM2 = ChipSpec(
    name="Trainium2",
    neuron_device_type="trainium2",
    core=NC_V3,
    cores=8,
    memory_kind="HBM",
    memory_bytes=96 * GiB,
    memory_bytes_per_s=2.9 * TB,
    dma_bytes_per_s=3.5 * TB,
    dma_engines=128,
    neuronlink_version="NeuronLink-v3",
    neuronlink_ports=4,
    cc_cores=16,
    peak_dense_tflops=pairs(fp8=1299.0, bf16=667.0, fp16=667.0, tf32=667.0, fp32=181.0),
    peak_sparse_tflops=2563.0,
    lnc_options=(1, 2),
    default_lnc=2,
    sources=cite(cores="chip-trn2", memory_bytes="chip-trn2 (4 stacks)",
                 memory_bytes_per_s="chip-trn2", dma_bytes_per_s="chip-trn2",
                 cc_cores="chip-trn2", peak_dense_tflops="chip-trn2",
                 peak_sparse_tflops="chip-trn2", lnc_options="lnc", default_lnc="lnc"),
    alternatives=(
        Alternative("memory_bytes_per_s", 3.0e12, "B/s", "arch-trn2", "NKI architecture guide"),
        Alternative("cc_cores", 20, "cores", "arch-trn2", "NKI architecture guide"),
        Alternative("peak_sparse_tflops", 5200.0, "TFLOPS", "launch-trn2",
                    "launch post: 5.2 PFLOPS sparse FP8 per chip"),
    ),
)

TRAINIUM3 = ChipSpec(
    name="Trainium3",
    neuron_device_type="trainium3",
    core=NC_V4,
    cores=8,
    memory_kind="HBM",
    memory_bytes=144 * GiB,
    memory_bytes_per_s=4.9 * TB,
    dma_bytes_per_s=4.9 * TB,
    dma_engines=128,
    neuronlink_version="NeuronLink-v4",
    neuronlink_ports=4,
    cc_cores=16,
    peak_dense_tflops=pairs(fp8=2517.0, bf16=671.0, fp16=671.0, tf32=671.0, fp32=183.0),
    peak_sparse_tflops=2517.0,
    lnc_options=(1, 2),
    default_lnc=2,
    sources=cite(cores="chip-trn3", memory_bytes="chip-trn3 (4 stacks)",
                 memory_bytes_per_s="chip-trn3", dma_bytes_per_s="chip-trn3",
                 cc_cores="chip-trn3", peak_dense_tflops="chip-trn3 (fp8 = MXFP8/MXFP4)",
                 peak_sparse_tflops="chip-trn3", lnc_options="lnc", default_lnc="lnc"),
    alternatives=(
        Alternative("memory_bytes_per_s", 4.7e12, "B/s", "arch-trn3", "NKI architecture guide"),
        Alternative("cc_cores", 20, "cores", "arch-trn3", "NKI architecture guide"),
    ),
)

CHIPS: tuple[ChipSpec, ...] = (INFERENTIA, INFERENTIA2, TRAINIUM, TRAINIUM2, TRAINIUM3)
