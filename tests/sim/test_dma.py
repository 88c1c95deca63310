"""DMA timing: engine bandwidth, descriptor efficiency, queues, start latency, HBM sharing.

Expected figures come from hardware.md section 6 fact 7 (17/23/33 B/ns per engine, 8 partitions
per engine, ~1,300 ns to start) and the catalog's descriptor model: a contiguous chunk of d bytes
moves at d / (d + descriptor_overhead_bytes) of an engine's rate.
"""

import dataclasses

import pytest

from tests.sim.helpers import builder, core, hbm_ap
from trnsim import hardware
from trnsim.isa import DmaCopy, TensorCopy
from trnsim.sim import simulate

EXACT = 1e-9


def _efficiency(spec, chunk_bytes: int) -> float:
    return chunk_bytes / (chunk_bytes + spec.dma.descriptor_overhead_bytes)


def _engine_bytes_per_ns(spec) -> float:
    return spec.dma.bytes_per_s_per_engine / 1e9


def _overhead(spec, nbytes: int, engines: int) -> float:
    """The per-transfer overhead each engine pays, unless the transfer is large enough to hide it."""
    small = nbytes < engines * spec.dma.ideal_transfer_bytes
    return spec.dma.transfer_overhead_ns if small else 0.0


def test_dma_bound_loop_runs_at_the_engines_bandwidth():
    spec = core("v2")
    count, row_bytes = 24, 8192
    b = builder()
    x = b.input("x", (count * 128, row_bytes // 4), "float32")
    tiles = [b.tile((128, row_bytes // 4), "float32") for _ in range(3)]
    outs = [b.tile((128, row_bytes // 4), "float32") for _ in range(3)]
    for i in range(count):  # load a tile, touch it on VectorE; triple-buffered
        b.emit(DmaCopy(dst=tiles[i % 3], src=x.block((i * 128, 0), (128, row_bytes // 4))),
               TensorCopy(dst=outs[i % 3], src=tiles[i % 3], engine="vector"))
    profile = simulate(b.build(), mode="timing").profile
    per_tile_bytes = 128 * row_bytes
    rate = spec.dma.engines * _engine_bytes_per_ns(spec) * _efficiency(spec, row_bytes)  # B/ns
    copy_latency = (row_bytes // 4 + 100) * 1e9 / spec.vector.clock_hz  # set-ups hidden
    per_tile_ns = per_tile_bytes / rate + _overhead(spec, per_tile_bytes, 16)  # engines in parallel
    expected = spec.dma.start_latency_ns + count * per_tile_ns + copy_latency
    assert profile.total_ns == pytest.approx(expected, rel=EXACT)
    summary = profile.summary
    assert summary.dma_bytes == count * per_tile_bytes
    # DMA-bound: VectorE is busy only for its copies and otherwise waits on DMA
    vector = summary.streams["vector"]
    copy_busy = (row_bytes // 4) * 1e9 / spec.vector.clock_hz
    assert vector.utilisation == pytest.approx(count * copy_busy / profile.total_ns, rel=EXACT)
    assert vector.waiting_ns["dma"] == pytest.approx(
        profile.total_ns - count * copy_busy - vector.idle_after_ns, rel=EXACT)


def test_validation_point_32_kib_on_one_engine():
    """hardware.md: "32 KiB on one engine measured 1,416 ns". The documented rates reproduce it
    for the data phase on NeuronCore-v3 (23 B/ns) within 5 %: 32768 / (23 x 32768/33280) = 1,446 ns.
    With the ~1,300 ns start latency on top the model gives ~2,750 ns, so the measurement cannot
    include that latency (see the report)."""
    spec = core("v3")
    b = builder("v3")
    x = b.input("x", (1, 8192), "float32")
    tile = b.tile((1, 8192), "float32")
    b.emit(DmaCopy(dst=tile, src=x.block()))
    profile = simulate(b.build(), mode="timing").profile
    data_ns = profile.end_ns[0] - profile.start_ns[0] - spec.dma.start_latency_ns
    assert data_ns == pytest.approx(1416, rel=0.05)


def test_small_transfers_per_partition_are_inefficient():
    spec = core("v2")

    def time_per_byte(row_bytes: int) -> float:
        b = builder()
        x = b.input("x", (128, row_bytes // 4), "float32")
        tile = b.tile((128, row_bytes // 4), "float32")
        b.emit(DmaCopy(dst=tile, src=x.block()))
        profile = simulate(b.build(), mode="timing").profile
        return (profile.end_ns[0] - profile.start_ns[0] - spec.dma.start_latency_ns
                - _overhead(spec, 128 * row_bytes, 16)) / (128 * row_bytes)

    small, large = time_per_byte(512), time_per_byte(4096)
    assert small / large == pytest.approx(_efficiency(spec, 4096) / _efficiency(spec, 512), rel=EXACT)
    assert small / large > 1.3  # 512 B per partition runs at about 70% of the rate of 4 KiB


def test_every_transfer_costs_its_engines_the_per_transfer_overhead():
    """Many small DMAs take longer than one moving the same bytes (dma-bw-guide, perf-guide):
    16 transfers of 2 KiB per engine each pay the overhead, one of 32 KiB per engine does not."""
    spec = core("v2")
    assert spec.dma.transfer_overhead_ns > 0

    def total(pieces: int) -> float:
        b = builder()
        x = b.input("x", (128 * pieces, 1024), "float32")
        tiles = [b.tile((128, 1024 // pieces), "float32") for _ in range(pieces)]
        for i, tile in enumerate(tiles):  # the same bytes in `pieces` DMAs, one queue
            b.emit(DmaCopy(dst=tile, src=x.block((128 * i, 0), (128, 1024 // pieces)), queue=0))
        return simulate(b.build(), mode="timing").profile.total_ns

    one, sixteen = total(1), total(16)
    # 15 more transfers, each costing every engine the overhead (and its own descriptors)
    assert sixteen - one >= 15 * spec.dma.transfer_overhead_ns


def test_partitions_spread_over_engines_eight_each():
    spec = core("v2")

    def data_ns(partitions: int) -> float:
        b = builder()
        x = b.input("x", (partitions, 1024), "float32")
        tile = b.tile((partitions, 1024), "float32")
        b.emit(DmaCopy(dst=tile, src=x.block()))
        profile = simulate(b.build(), mode="timing").profile
        return profile.end_ns[0] - profile.start_ns[0] - spec.dma.start_latency_ns

    per_engine = 8 * 4096 / (_engine_bytes_per_ns(spec) * _efficiency(spec, 4096))
    assert _overhead(spec, 8 * 4096, 1) == 0  # 32 KiB per engine: the overhead is hidden
    assert data_ns(8) == pytest.approx(per_engine, rel=EXACT)  # one engine
    assert data_ns(128) == pytest.approx(per_engine, rel=EXACT)  # 16 engines, 16x the bytes
    assert data_ns(64) == pytest.approx(per_engine, rel=EXACT)  # 8 engines


def _two_small_dmas(queues: tuple[int | None, int | None]):
    b = builder()
    x = b.input("x", (16, 1024), "float32")
    tiles = [b.tile((8, 1024), "float32") for _ in range(2)]
    for i, queue in enumerate(queues):
        b.emit(DmaCopy(dst=tiles[i], src=x.block((8 * i, 0), (8, 1024)), queue=queue))
    return simulate(b.build(), mode="timing").profile


def test_a_queue_is_fifo_and_queues_run_concurrently():
    spec = core("v2")
    one = (8 * 4096 / (_engine_bytes_per_ns(spec) * _efficiency(spec, 4096))
           + _overhead(spec, 8 * 4096, 1))
    latency = spec.dma.start_latency_ns
    apart = _two_small_dmas((0, 1))
    assert apart.total_ns == pytest.approx(latency + one, rel=EXACT)
    same = _two_small_dmas((3, 3))
    assert same.total_ns == pytest.approx(latency + 2 * one, rel=EXACT)
    assert [r.queue for r in same.records] == [3, 3]
    assert {r.stream for r in same.records} == {"dma.q3"}


def test_sbuf_to_sbuf_dma_does_not_use_hbm_bandwidth():
    chip = hardware.chip("inferentia")  # 50 GiB/s of DRAM for 272 GB/s of DMA engines: HBM-bound
    spec = chip.core

    def data_ns(from_hbm: bool) -> float:
        b = builder("v1")
        x = b.input("x", (128, 2048), "float32")
        src = b.tile((128, 2048), "float32")
        dst = b.tile((128, 2048), "float32")
        b.emit(DmaCopy(dst=dst, src=x.block() if from_hbm else src))
        profile = simulate(b.build(), mode="timing", chip=chip).profile
        return profile.end_ns[0] - profile.start_ns[0] - spec.dma.start_latency_ns

    nbytes = 128 * 8192
    assert data_ns(True) == pytest.approx(nbytes / (chip.memory_bytes_per_s / 1e9), rel=EXACT)
    engines = spec.dma.engines * _engine_bytes_per_ns(spec) * _efficiency(spec, 8192)
    assert data_ns(False) == pytest.approx(nbytes / engines, rel=EXACT)


def test_hbm_timeline_only_when_the_cores_can_saturate_it():
    from trnsim.sim.dma import hbm_timeline

    trainium = hardware.chip("trainium")
    assert hbm_timeline(trainium, 2) is None  # 2 x 272 GB/s < 880 GB/s
    slow = dataclasses.replace(trainium, memory_bytes_per_s=300e9)
    assert hbm_timeline(slow, 1) is None
    assert hbm_timeline(slow, 2).capacity == pytest.approx(300.0)


def test_weights_kept_on_chip_draw_no_device_memory_bandwidth():
    """A pipeline stage's cached weights (`TensorDecl.on_chip`) draw nothing on the chip's DRAM,
    which on Inferentia (50 GB/s for 4 cores) is what binds a weight stream."""
    def run(cached: bool):
        b = builder("v1")
        w = b.input("w", (16 * 128, 2048), "bfloat16")
        tile = b.tile((128, 2048), "bfloat16")
        for i in range(16):
            b.emit(DmaCopy(dst=tile, src=w.block((i * 128, 0), (128, 2048))))
        program = b.build()
        if cached:
            program.tensors["w"] = dataclasses.replace(program.tensors["w"], on_chip=True)
        return simulate(program, mode="timing", chip="Inferentia").profile

    dram, cached = run(False), run(True)
    assert dram.summary.hbm_read_bytes == 16 * 128 * 2048 * 2 and cached.summary.hbm_read_bytes == 0
    chip = hardware.chip("Inferentia")
    assert dram.total_ns >= 16 * 128 * 2048 * 2 / (chip.memory_bytes_per_s / 1e9)  # DRAM-bound
    assert cached.total_ns < dram.total_ns / 2


def _on_chip_round_trip(*, on_chip: bool, load_dtype: str = "float32", transposing: bool = False,
                        shifted: bool = False):
    """A tile stored to an internal tensor and loaded back (as a kernel boundary does)."""
    b = builder()
    b.tensor("act", (256, 1024), "float32")
    src = b.tile((128, 1024), "float32")
    back = b.tile((128, 1024), load_dtype)
    decl = b.program.tensors["act"]
    b.emit(DmaCopy(dst=decl.block((0, 0), (128, 1024)), src=src))
    b.emit(DmaCopy(dst=decl.block((128, 0), (128, 1024)), src=src))
    if shifted:  # rows 64..191: half of them sit on other partitions than they were stored from
        b.emit(DmaCopy(dst=back, src=decl.block((64, 0), (128, 1024))))
    elif transposing:  # 128 partitions reading one column each: one element per descriptor
        b.emit(DmaCopy(dst=b.tile((128, 8), "float32"),
                       src=hbm_ap("act", "float32", 128, 1, ((1024, 8),))))
    else:
        b.emit(DmaCopy(dst=back, src=decl.block((128, 0), (128, 1024))))
    if on_chip:
        b.program.tensors["act"] = dataclasses.replace(decl, on_chip=True)
    return simulate(b.build(), mode="timing").profile


def test_an_on_chip_tensor_handed_over_in_its_layout_moves_nothing():
    """An internal tensor the compiler keeps in SBUF: store and same-layout load are in place."""
    off = _on_chip_round_trip(on_chip=False)
    on = _on_chip_round_trip(on_chip=True)
    assert off.total_ns > 2 * core("v2").dma.start_latency_ns
    assert on.total_ns == 0.0
    assert on.summary.hbm_read_bytes == on.summary.hbm_write_bytes == 0


def test_an_on_chip_tensor_read_with_a_cast_is_a_compute_engine_copy():
    """SBUF to SBUF in its own layout, only the dtype changing: the compiler's tensor_copy on
    GpSimd (nki.isa.dma_copy: for SBUF to SBUF "consider using nisa.tensor_copy"), not DMA."""
    from trnsim.isa import Engine, TensorCopy, sbuf

    cast = _on_chip_round_trip(on_chip=True, load_dtype="bfloat16")
    (record,) = [r for r in cast.records if r.busy_ns > 0]
    assert record.opcode == "DmaCopy" and record.engine == "gpsimd"
    expected = TensorCopy(dst=sbuf(0, 128, (1024,), "bfloat16"), src=sbuf(0, 128, (1024,), "float32"),
                          engine=Engine.GPSIMD).cost(core("v2")).busy_ns
    assert record.busy_ns == pytest.approx(expected)
    assert cast.summary.hbm_read_bytes == 0
    assert cast.summary.dma_transfers == 2  # the two in-place stores; the cast is not one
    assert cast.total_ns < core("v2").dma.start_latency_ns + expected  # no DMA latency paid


def test_an_on_chip_tensor_read_in_a_new_layout_is_an_sbuf_to_sbuf_dma():
    for relaid in (_on_chip_round_trip(on_chip=True, transposing=True),
                   _on_chip_round_trip(on_chip=True, shifted=True)):
        assert relaid.total_ns > core("v2").dma.start_latency_ns
        assert relaid.summary.hbm_read_bytes == 0


def test_a_cores_share_of_an_on_chip_tensor_is_laid_out_from_its_first_row():
    """Under LNC=2 a core keeps only its rows of a tensor (`TensorDecl.on_chip_from`): rows
    64..191 stored and loaded by that core are an in-place hand-off from its partition 0."""
    b = builder()
    decl = b.tensor("act", (256, 1024), "float32")
    tile = b.tile((128, 1024), "float32")
    b.emit(DmaCopy(dst=decl.block((64, 0), (128, 1024)), src=tile))
    b.emit(DmaCopy(dst=b.tile((128, 1024), "float32"), src=decl.block((64, 0), (128, 1024))))
    program = b.build()

    def run(start: int):
        program.tensors["act"] = dataclasses.replace(decl, on_chip=True, on_chip_from=start)
        return simulate(program, mode="timing").profile

    assert run(64 * 1024 * 4).total_ns == 0.0  # its share starts at row 64
    assert run(0).total_ns > core("v2").dma.start_latency_ns  # row 64 is not on partition 0
