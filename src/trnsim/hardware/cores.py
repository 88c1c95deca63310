"""NeuronCore versions v1..v4: engines, clocks, memories, DMA and per-instruction cost parameters.

Figures from shared/reference/hardware.md sections 1 and 6, each cited. The simulator reads the
cost *parameters* here (minimum initiation interval, fixed overheads, DMA latencies); the cost
*formulas* that combine them live beside each instruction in `trnsim.isa`.

Precision classes for matmul throughput are ``fp8, bf16, fp16, tf32, fp32, int8``. ``fp8`` means the
fastest 8-bit float path of the version: cFP8 at BF16 rate on v2, cFP8 double-row on v3, MXFP8 on v4.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trnsim.hardware.spec import ASSUMPTION, Alternative, Spec, cite, lookup_pair, pairs

MATMUL_PRECISIONS = ("fp8", "bf16", "fp16", "tf32", "fp32", "int8")


@dataclass(frozen=True, kw_only=True)
class TensorEngineSpec(Spec):
    """The systolic PE array. Throughput of a precision = 2 * rows * cols * clock * rate."""

    clock_hz: float
    pe_rows: int = 128
    pe_cols: int = 128
    # Multiply-accumulates per PE per cycle, relative to BF16 (= 1). Missing precision: unsupported.
    rate_by_precision: tuple[tuple[str, float], ...]
    max_stationary_free: int = 128  # stationary tile [K<=128, M<=128]
    max_moving_free: int = 512  # one 2 KiB PSUM bank of FP32
    mm_moving_min_cycles: int = 64  # MM issue interval = max(min(64, N_stationary), N_moving)
    mm_init_latency_cycles: int = 64  # MM_INIT_LATENCY
    fast_load_stationary_divisor: int = 4  # fast LS costs about F / 4 cycles
    documented_dense_tflops: tuple[tuple[str, float], ...] = ()

    def rate(self, precision: str) -> float | None:
        return lookup_pair(self.rate_by_precision, precision)

    def peak_flops(self, precision: str) -> float | None:
        """Dense peak in FLOP/s for a precision class, or None if this TensorE lacks it."""
        rate = self.rate(precision)
        if rate is None:
            return None
        return 2.0 * self.pe_rows * self.pe_cols * self.clock_hz * rate


@dataclass(frozen=True, kw_only=True)
class EngineSpec(Spec):
    """A streaming engine (Vector, Scalar, GpSimd): one lane per partition."""

    name: str
    clock_hz: float
    lanes: int = 128
    elements_per_lane_per_cycle: float = 1.0
    # BF16/FP16 performance modes (v3 VectorE: 4x copy/tensor_scalar SBUF->SBUF contiguous, 2x others;
    # v4 ScalarE: 2x tensor_scalar/tensor_copy). 1.0 where the version has none.
    perf_mode_copy_speedup: float = 1.0
    perf_mode_other_speedup: float = 1.0
    documented_tflops: float | None = None

    @property
    def elements_per_s(self) -> float:
        return self.lanes * self.elements_per_lane_per_cycle * self.clock_hz


@dataclass(frozen=True, kw_only=True)
class InstructionCosts(Spec):
    """Cycle parameters of the documented per-instruction cost model (hardware.md section 6)."""

    min_ii_cycles: int = 64  # Vector/Scalar/GpSimd: max(MIN_II, N) engine cycles
    static_overhead_cycles: int = 100  # fixed per instruction, exposed on RAW chains / small N
    access_setup_cycles: int = 60  # per SBUF/PSUM access set-up
    act_read_accumulator_cycles: int = 64  # ActReadAccumulator
    reduce_extra_cycles: int = 64  # *_reduce variants
    gpsimd_index_fixed_cycles: int = 150  # iota / affine_select: 150 + N
    dynamic_address_min_ii_cycles: int = 600  # dynamic-address copies
    strided_rate_divisor: float = 2.0  # an innermost stride over 16 B halves the streaming rate
    strided_threshold_bytes: int = 16
    measured_scalar_chain_cycles: int = 264  # a validation point, not a parameter


DGE_INSTRUCTION_NS = 600.0  # nki-dge: ~600 ns per hardware-DGE instruction (NC-v3)


@dataclass(frozen=True, kw_only=True)
class DmaSpec(Spec):
    """DMA engines of one NeuronCore."""

    engines: int = 16
    queues_per_engine: int = 16
    bytes_per_s_per_engine: float
    partitions_per_engine: int = 8
    start_latency_ns: float = 1300.0  # semaphore to first byte
    dge_instruction_ns: float = DGE_INSTRUCTION_NS  # per hardware-DGE instruction
    hw_dge_instances: int = 0  # descriptor-generation engines (v3+: 2)
    efficient_bytes_per_partition: int = 2048  # below this a transfer is inefficient
    saturating_bytes_per_partition: int = 4096
    # ASSUMPTION (descriptor model): each contiguous chunk ("descriptor") costs as much engine time
    # as moving this many bytes, so a chunk of d bytes runs at d / (d + overhead) of the engine's
    # bandwidth. The DMA guide says transfers are efficient from 2 KiB per partition and saturate
    # from 4 KiB (dma-bw-guide): 256 B gives 89% at 2 KiB, 94% at 4 KiB and 67% at 512 B.
    descriptor_overhead_bytes: int = 256
    # Engine time each DMA transfer costs every engine it runs on, on top of its data and its
    # buffers' descriptor overheads: the per-transfer overhead the architecture guide names
    # ("some performance overhead at both DMA buffer and transfer levels"; an engine "can
    # process one DMA transfer at a time"). 0 where trnsim has no figure for it. Transfers of at
    # least `ideal_transfer_bytes` per engine hide it: the performance guide's "transfer size ...
    # larger than 32KiB to achieve ideal bandwidth" (16 transfers of 32 KiB: "the ideal size").
    transfer_overhead_ns: float = 0.0
    ideal_transfer_bytes: int = 32 * 1024
    transpose_efficiency_hbm_to_sbuf: float | None = None  # v3+: up to 90% of DMA throughput
    transpose_efficiency_sbuf_to_sbuf: float | None = None  # v3+: 50%

    @property
    def bytes_per_s(self) -> float:
        return self.engines * self.bytes_per_s_per_engine


@dataclass(frozen=True, kw_only=True)
class CoreSpec(Spec):
    """One NeuronCore version. Presets below; look them up with `trnsim.hardware.core(name)`."""

    name: str  # "NeuronCore-v2"
    version: int  # 1..4
    nki_target: str | None  # "gen2", "gen3", "gen4"; None where NKI does not exist (v1)
    monitor_version: str  # the neuroncore_version neuron-monitor prints ("v2", "v3d", ...)
    tensor: TensorEngineSpec
    vector: EngineSpec
    scalar: EngineSpec
    gpsimd: EngineSpec | None
    partitions: int = 128
    sbuf_bytes_per_partition: int
    sbuf_reserved_bytes_per_partition: int  # kept by the compiler
    psum_banks: int = 8
    psum_bank_bytes_per_partition: int = 2048
    onchip_port_elements_per_cycle: int = 128  # per SBUF/PSUM read or write interface
    # Pairs of engines that cannot use the same memory at once: (engine, engine, memory).
    port_conflicts: tuple[tuple[str, str, str], ...] = ()
    max_free_elements_sbuf: int = 65536  # Vector/Scalar operand free size from SBUF
    max_free_elements_psum: int = 4096  # ... from PSUM
    bn_stats_max_free: int = 512
    dma: DmaSpec
    costs: InstructionCosts = field(default_factory=InstructionCosts)
    supported_dtypes: frozenset[str]

    @property
    def sbuf_bytes(self) -> int:
        return self.partitions * self.sbuf_bytes_per_partition

    @property
    def sbuf_usable_bytes_per_partition(self) -> int:
        return self.sbuf_bytes_per_partition - self.sbuf_reserved_bytes_per_partition

    @property
    def psum_bytes_per_partition(self) -> int:
        return self.psum_banks * self.psum_bank_bytes_per_partition

    @property
    def psum_bytes(self) -> int:
        return self.partitions * self.psum_bytes_per_partition

    @property
    def engines(self) -> tuple[str, ...]:
        streams = ("tensor", "vector", "scalar") + (("gpsimd",) if self.gpsimd else ())
        return (*streams, "sync") if self.version >= 2 else streams

    def peak_flops(self, precision: str) -> float | None:
        return self.tensor.peak_flops(precision)

    def supports(self, dtype_name: str) -> bool:
        return dtype_name in self.supported_dtypes


# --- data types per version (NKI names) ---------------------------------------------------------
_INTS = frozenset({"int8", "uint8", "int16", "uint16", "int32", "uint32", "bool_"})
_V1_DTYPES = frozenset({"float32", "float16", "bfloat16"}) | _INTS
_V2_DTYPES = _V1_DTYPES | {"tfloat32", "float8_e4m3", "float8_e5m2"}
# float8_e4m3fn is native from Trn3 (NCC_EVRF051); MX scale and x4-packed types feed nc_matmul_mx.
_V4_DTYPES = _V2_DTYPES | {"float8_e4m3fn", "float8_e8m0fnu", "float8_e4m3fn_x4",
                           "float8_e5m2_x4", "float4_e2m1fn_x4"}

_DTYPE_SOURCES = "data-types; ncc-evrf051; nki.language dtype pages (x4 types: nc_matmul_mx, v4)"

# --- presets -------------------------------------------------------------------------------------
NC_V2_VECTOR = EngineSpec(name="vector", clock_hz=1.12e9, documented_tflops=2.3,
                          sources=cite(clock_hz="arch-trn1", documented_tflops="nc-v2"))
NC_V2_SCALAR = EngineSpec(name="scalar", clock_hz=1.4e9, documented_tflops=2.9,
                          sources=cite(clock_hz="arch-trn1", documented_tflops="nc-v2"))
NC_V1_VECTOR_FLOP_PER_CYCLE = 256  # nc-v1: "can perform 256 floating point operations per cycle"
NC_V1_SCALAR_FLOP_PER_CYCLE = 512  # nc-v1: "can process 512 floating point operations per cycle"
NC_V1_VECTOR_SLOWDOWN = 10.0  # nc-v2: VectorE 2.3 TFLOPS FP32, "10x speedup vs. NeuronCore-v1"
NC_V1_SCALAR_SLOWDOWN = 3.0  # nc-v2: ScalarE 2.9 TFLOPS FP32, "3x speedup relative to NeuronCore-v1"


def _v1_engine(name: str, flop_per_cycle: int, v2: EngineSpec, slowdown: float) -> EngineSpec:
    """An NC-v1 streaming engine from its documented FLOP per cycle and its NC-v2 speedup.

    Its FLOP/s is v2's documented figure / the speedup; its clock is that / its FLOP per cycle;
    its elements per lane per cycle are its FLOP per cycle / v2's (v2 streams one element per
    lane per cycle). The streaming rate equals v2's / the speedup, and the per-instruction cycle
    counts (MIN_II, static overhead, access set-up) run at the v1 engine's own clock.
    """
    flops = v2.documented_tflops * 1e12 / slowdown
    v2_flop_per_cycle = v2.documented_tflops * 1e12 / v2.clock_hz
    return EngineSpec(
        name=name, clock_hz=flops / flop_per_cycle,
        elements_per_lane_per_cycle=flop_per_cycle / v2_flop_per_cycle,
        documented_tflops=flops / 1e12,
        sources=cite(clock_hz=f"{ASSUMPTION}: documented FLOP/s (nc-v2 / its speedup) / documented "
                              "FLOP per cycle (nc-v1)",
                     elements_per_lane_per_cycle=f"{ASSUMPTION}: nc-v1 FLOP per cycle / NC-v2's "
                                                 "(documented TFLOPS / clock); 128 lanes as NC-v2",
                     documented_tflops="nc-v2 (v2 TFLOPS / speedup over NC-v1)"))


_V1_TENSOR_CLOCK_HZ = 16e12 / (2 * 128 * 128)  # derived so 128x128 PEs give the documented 16 TFLOPS

NC_V1 = CoreSpec(
    name="NeuronCore-v1",
    version=1,
    nki_target=None,
    monitor_version="v1",
    tensor=TensorEngineSpec(
        clock_hz=_V1_TENSOR_CLOCK_HZ,
        rate_by_precision=pairs(bf16=1.0, fp16=1.0, int8=2.0, fp32=0.25),
        documented_dense_tflops=pairs(bf16=16.0, fp16=16.0),
        sources=cite(
            clock_hz=f"{ASSUMPTION}: NC-v1 PE array undocumented; 128x128 assumed and the clock "
                     "derived from the documented 16 FP16/BF16 TFLOPS per core (chip-inf1: 64/4)",
            pe_rows=f"{ASSUMPTION}: same array as NC-v2",
            rate_by_precision="chip-inf1 (128 INT8 TOPS = 2x FP16); fp32 at 1/4 as on NC-v2 "
                              f"({ASSUMPTION})",
            documented_dense_tflops="chip-inf1",
        ),
    ),
    # NC-v2 VectorE is documented as 10x, ScalarE as 3x NC-v1 (so v1 rates are v2's divided by
    # those), and NC-v1 as 256 and 512 FLOP per cycle: the clock is rate / FLOP-per-cycle, and the
    # elements per lane per cycle the v1 share of v2's FLOP per cycle (see _v1_engine).
    vector=_v1_engine("vector", NC_V1_VECTOR_FLOP_PER_CYCLE, NC_V2_VECTOR, NC_V1_VECTOR_SLOWDOWN),
    scalar=_v1_engine("scalar", NC_V1_SCALAR_FLOP_PER_CYCLE, NC_V2_SCALAR, NC_V1_SCALAR_SLOWDOWN),
    gpsimd=None,
    sbuf_bytes_per_partition=96 * 1024,
    sbuf_reserved_bytes_per_partition=0,
    dma=DmaSpec(
        bytes_per_s_per_engine=17e9,
        sources=cite(bytes_per_s_per_engine=f"{ASSUMPTION}: as NC-v2; inf1 is DRAM-bound "
                                             "(50 GiB/s per chip) long before this"),
    ),
    supported_dtypes=_V1_DTYPES,
    sources=cite(
        sbuf_bytes_per_partition=f"{ASSUMPTION}: NC-v1 on-chip SRAM undocumented; 12 MiB per core "
                                 "(half of NC-v2) assumed",
        supported_dtypes="data-types (Inf1: FP32, FP16, BF16; INT8 from chip-inf1)",
        nki_target="NKI does not target Inferentia",
    ),
)

NC_V2 = CoreSpec(
    name="NeuronCore-v2",
    version=2,
    nki_target="gen2",
    monitor_version="v2",
    tensor=TensorEngineSpec(
        clock_hz=2.8e9,
        rate_by_precision=pairs(fp8=1.0, bf16=1.0, fp16=1.0, tf32=1.0, fp32=0.25),
        documented_dense_tflops=pairs(fp8=92.0, bf16=92.0, fp16=92.0, tf32=92.0, fp32=23.0),
        sources=cite(clock_hz="arch-trn1", pe_rows="arch-trn1", rate_by_precision="arch-trn1; nc-v2",
                     mm_moving_min_cycles="isa-legacy nc_matmul", mm_init_latency_cycles="arch-trn1",
                     fast_load_stationary_divisor="arch-trn1",
                     documented_dense_tflops="nc-v2"),
    ),
    vector=NC_V2_VECTOR,
    scalar=NC_V2_SCALAR,
    gpsimd=EngineSpec(name="gpsimd", clock_hz=1.4e9,
                      sources=cite(clock_hz="arch-trn1 (8 cores x 512-bit SIMD)")),
    sbuf_bytes_per_partition=192 * 1024,
    sbuf_reserved_bytes_per_partition=16 * 1024,
    port_conflicts=(("vector", "gpsimd", "sbuf"), ("vector", "scalar", "psum")),
    dma=DmaSpec(
        bytes_per_s_per_engine=17e9,
        transfer_overhead_ns=DGE_INSTRUCTION_NS,
        sources=cite(bytes_per_s_per_engine="dma-overview (17 B/ns per engine, 272 GB/s per NC)",
                     start_latency_ns="dma-bw-guide", dge_instruction_ns="dge",
                     efficient_bytes_per_partition="dma-bw-guide",
                     ideal_transfer_bytes="perf-guide (Opt #9: transfers larger than 32 KiB "
                                          "reach ideal bandwidth on Trainium/Inferentia2)",
                     transfer_overhead_ns=f"{ASSUMPTION}: the overhead per DMA transfer on each "
                     "engine (arch-trn1: overheads 'at both DMA buffer and transfer levels'; "
                     "dma-bw-guide: 'every DMA transfer incurs descriptor setup, "
                     "synchronization ...'; perf-guide: DMA engine 'empty gaps (due to DMA "
                     "overhead)', large transfers 'close to 70% DMA throughput utilization') is "
                     "not quantified for NC-v2; taken as the one per-transfer figure AWS gives, "
                     "NC-v3's ~600 ns per DGE instruction (dge)"),
        alternatives=(
            Alternative("bytes_per_s_per_engine", 27.2e9, "B/s", "dma-overview",
                        "the same page quotes 27.2 GB/s theoretical for v2/v3"),
        ),
    ),
    costs=InstructionCosts(sources=cite(min_ii_cycles="isa-legacy", static_overhead_cycles="perf-guide",
                                        access_setup_cycles="perf-guide",
                                        measured_scalar_chain_cycles="perf-guide")),
    supported_dtypes=_V2_DTYPES,
    sources=cite(sbuf_bytes_per_partition="arch-trn1", sbuf_reserved_bytes_per_partition="direct-alloc",
                 psum_banks="arch-trn1", psum_bank_bytes_per_partition="arch-trn1",
                 port_conflicts="arch-trn1", max_free_elements_sbuf="arch-trn1",
                 supported_dtypes=_DTYPE_SOURCES),
)

NC_V3 = CoreSpec(
    name="NeuronCore-v3",
    version=3,
    nki_target="gen3",
    monitor_version="v3d",
    tensor=TensorEngineSpec(
        clock_hz=2.4e9,
        # FP8 doubles K per pass (double_row: [128,2,128] x [128,2,512] in the time of BF16 K=128).
        rate_by_precision=pairs(fp8=2.0, bf16=1.0, fp16=1.0, tf32=1.0, fp32=0.25),
        documented_dense_tflops=pairs(fp8=158.0, bf16=79.0, fp16=79.0, tf32=79.0, fp32=20.0),
        sources=cite(clock_hz="arch-trn2", rate_by_precision="arch-trn2 (4x128 FP8, 2x128 BF16)",
                     documented_dense_tflops="nc-v3",
                     mm_moving_min_cycles=f"{ASSUMPTION}: v2 formula (v3 costs undocumented)"),
    ),
    vector=EngineSpec(name="vector", clock_hz=0.96e9, perf_mode_copy_speedup=4.0,
                      perf_mode_other_speedup=2.0, documented_tflops=1.0,
                      sources=cite(clock_hz="arch-trn2", perf_mode_copy_speedup="arch-trn2")),
    scalar=EngineSpec(name="scalar", clock_hz=1.2e9, documented_tflops=1.2,
                      sources=cite(clock_hz="arch-trn2")),
    gpsimd=EngineSpec(name="gpsimd", clock_hz=1.2e9, sources=cite(clock_hz="arch-trn2")),
    sbuf_bytes_per_partition=224 * 1024,
    sbuf_reserved_bytes_per_partition=16 * 1024,
    dma=DmaSpec(
        bytes_per_s_per_engine=23e9,
        hw_dge_instances=2,
        transpose_efficiency_hbm_to_sbuf=0.9,
        transpose_efficiency_sbuf_to_sbuf=0.5,
        sources=cite(bytes_per_s_per_engine="dma-overview (23 B/ns, 368 GB/s per NC)",
                     hw_dge_instances="arch-trn2", transpose_efficiency_hbm_to_sbuf="arch-trn2"),
        alternatives=(
            Alternative("bytes_per_s_per_engine", 27.2e9, "B/s", "dma-overview",
                        "the same page quotes 27.2 GB/s theoretical for v2/v3"),
        ),
    ),
    costs=InstructionCosts(sources=cite(
        min_ii_cycles=f"{ASSUMPTION}: v2 cycle formulas at v3 clocks (v3 costs undocumented)")),
    supported_dtypes=_V2_DTYPES,
    sources=cite(sbuf_bytes_per_partition="arch-trn2",
                 sbuf_reserved_bytes_per_partition=f"{ASSUMPTION}: as NC-v2 (undocumented for v3)",
                 port_conflicts="arch-trn2 (v3 lifts the v2 conflicts but for one PSUM bank)",
                 supported_dtypes=_DTYPE_SOURCES),
)

NC_V4 = CoreSpec(
    name="NeuronCore-v4",
    version=4,
    nki_target="gen4",
    monitor_version="v4",
    tensor=TensorEngineSpec(
        clock_hz=2.4e9,
        # MXFP8/MXFP4: K=512 per pass (4x BF16). Non-MX FP8 runs at BF16 rate.
        rate_by_precision=pairs(fp8=4.0, bf16=1.0, fp16=1.0, tf32=1.0, fp32=0.25),
        max_moving_free=4096,  # FP32 destination; 8192 for a BF16 destination (all of PSUM)
        documented_dense_tflops=pairs(fp8=315.0, bf16=79.0, fp16=79.0, tf32=79.0, fp32=20.0),
        sources=cite(clock_hz="arch-trn3", rate_by_precision="arch-trn3 (8x128 MXFP8, 2x128 non-MX)",
                     max_moving_free="nki.isa nc_matmul (v4: N<=4096 FP32 dst)",
                     documented_dense_tflops="nc-v4"),
    ),
    vector=EngineSpec(name="vector", clock_hz=1.2e9, perf_mode_copy_speedup=4.0,
                      perf_mode_other_speedup=2.0, documented_tflops=1.2,
                      sources=cite(clock_hz="arch-trn3",
                                   perf_mode_copy_speedup=f"{ASSUMPTION}: as NC-v3 (512 BF16 elem/cycle)")),
    scalar=EngineSpec(name="scalar", clock_hz=1.2e9, perf_mode_copy_speedup=2.0,
                      perf_mode_other_speedup=1.0, documented_tflops=1.2,
                      sources=cite(clock_hz="arch-trn3", perf_mode_copy_speedup="arch-trn3")),
    gpsimd=EngineSpec(name="gpsimd", clock_hz=1.2e9, sources=cite(clock_hz="arch-trn3")),
    sbuf_bytes_per_partition=256 * 1024,
    sbuf_reserved_bytes_per_partition=16 * 1024,
    dma=DmaSpec(
        bytes_per_s_per_engine=33e9,
        hw_dge_instances=2,
        transpose_efficiency_hbm_to_sbuf=0.9,
        transpose_efficiency_sbuf_to_sbuf=0.5,
        sources=cite(bytes_per_s_per_engine="dma-overview (33 B/ns, 528 GB/s per NC)",
                     hw_dge_instances=f"{ASSUMPTION}: as NC-v3"),
        alternatives=(
            Alternative("bytes_per_s_per_engine", 38.4e9, "B/s", "dma-overview",
                        "the same page quotes 38.4 GB/s theoretical for v4"),
        ),
    ),
    costs=InstructionCosts(sources=cite(
        min_ii_cycles=f"{ASSUMPTION}: v2 cycle formulas at v4 clocks (v4 costs undocumented)")),
    supported_dtypes=_V4_DTYPES,
    sources=cite(sbuf_bytes_per_partition="arch-trn3",
                 sbuf_reserved_bytes_per_partition=f"{ASSUMPTION}: as NC-v2 (undocumented for v4)",
                 supported_dtypes=_DTYPE_SOURCES),
)

CORES: tuple[CoreSpec, ...] = (NC_V1, NC_V2, NC_V3, NC_V4)
