"""Several cores of one chip: shared HBM bandwidth and capacity, aliased shared tensors."""

import dataclasses

import numpy as np
import pytest

from tests.sim.helpers import builder, rng_array
from trnsim import hardware
from trnsim.isa import DmaCopy, TensorScalar
from trnsim.sim import default_chip, simulate, simulate_cores


def _stream_from_hbm(core="v2", tiles=16, row_elements=2048):
    b = builder(core, "stream")
    x = b.input("x", (tiles * 128, row_elements), "float32")
    buffers = [b.tile((128, row_elements), "float32") for _ in range(2)]
    for i in range(tiles):
        b.emit(DmaCopy(dst=buffers[i % 2], src=x.block((i * 128, 0), (128, row_elements))))
    return b.build()


def test_default_chips():
    assert [default_chip(hardware.core(v)).name for v in ("v1", "v2", "v3", "v4")] == [
        "Inferentia", "Trainium", "Trainium2", "Trainium3"]


def test_two_cores_share_a_chips_hbm_bandwidth_when_hbm_bound():
    program = _stream_from_hbm()
    nbytes = 16 * 128 * 2048 * 4
    # Trainium's HBM (880 GB/s) outruns two cores' DMA (2 x 272 GB/s): two cores take as long as one
    trainium = hardware.chip("trainium")
    alone = simulate(program, mode="timing", chip=trainium).profile.total_ns
    both = simulate_cores([program, program], chip=trainium, mode="timing")
    assert [r.total_ns for r in both] == pytest.approx([alone, alone], rel=1e-9)
    # A chip whose HBM gives 300 GB/s: one core still runs at its DMA rate, two share 300 GB/s
    slow = dataclasses.replace(trainium, memory_bytes_per_s=300e9)
    one = simulate(program, mode="timing", chip=slow).profile.total_ns
    assert one == pytest.approx(alone, rel=1e-9)
    two = max(r.total_ns for r in simulate_cores([program, program], chip=slow, mode="timing"))
    latency = slow.core.dma.start_latency_ns
    assert two > one
    assert two == pytest.approx(latency + 2 * nbytes / 300.0, rel=0.01)  # HBM-bound: 2x the bytes


def test_inferentia_cores_are_dram_bound():
    chip = hardware.chip("inferentia")  # 4 cores on 50 GiB/s of DDR4
    program = _stream_from_hbm("v1", tiles=4)
    nbytes = 4 * 128 * 2048 * 4
    rate = chip.memory_bytes_per_s / 1e9
    one = simulate(program, mode="timing", chip=chip).profile.total_ns
    assert one == pytest.approx(chip.core.dma.start_latency_ns + nbytes / rate, rel=1e-6)
    four = max(r.total_ns for r in simulate_cores([program] * 4, chip=chip, mode="timing"))
    assert four == pytest.approx(chip.core.dma.start_latency_ns + 4 * nbytes / rate, rel=0.01)


def _half_program(core_index: int):
    """Core i scales rows [64i, 64i+64) of the shared input by (i + 2) into the shared output."""
    b = builder("v2", f"half{core_index}")
    x = b.input("x", (128, 32), "float32")
    out = b.output("out", (128, 32), "float32")
    mine = b.output("mine", (64, 32), "float32")
    tile = b.tile((64, 32), "float32")
    rows = (core_index * 64, 0), (64, 32)
    b.emit(DmaCopy(dst=tile, src=x.block(*rows)),
           TensorScalar(dst=tile, src=tile, op0="multiply", operand0=float(core_index + 2)),
           DmaCopy(dst=out.block(*rows), src=tile),
           DmaCopy(dst=mine.block(), src=tile))
    return b.build()


def test_shared_tensors_alias_across_cores_and_others_do_not():
    x = rng_array((128, 32), "float32")
    results = simulate_cores([_half_program(0), _half_program(1)], [{"x": x}, None], shared=["x", "out"])
    out0, out1 = results[0].outputs["out"], results[1].outputs["out"]
    assert out0 is out1 or np.shares_memory(out0, out1)
    np.testing.assert_array_equal(out0[:64], x[:64] * 2)
    np.testing.assert_array_equal(out0[64:], x[64:] * 3)
    # private tensors stay private, though both cores used the same SBUF offsets
    np.testing.assert_array_equal(results[0].outputs["mine"], x[:64] * 2)
    np.testing.assert_array_equal(results[1].outputs["mine"], x[64:] * 3)


def test_shared_value_given_once_and_private_copies_otherwise():
    x = rng_array((128, 32), "float32")
    shared = simulate_cores([_half_program(0), _half_program(1)], None, shared={"x": x, "out": None})
    np.testing.assert_array_equal(shared[1].outputs["out"][64:], x[64:] * 3)
    private = simulate_cores([_half_program(0), _half_program(1)], [{"x": x}, {"x": x}])
    assert np.isnan(private[0].outputs["out"][64:]).all()  # core 1 wrote its own copy of out
    assert np.isnan(private[1].outputs["out"][:64]).all()


def test_shared_hbm_is_counted_once_against_capacity():
    b = builder()
    b.input("big", (20, 1024, 1024, 1024), "uint8")  # 20 GiB; two private copies exceed 32 GiB
    program = b.build()
    simulate_cores([program, program], mode="timing", shared=["big"])
    with pytest.raises(Exception, match="exceeds limit"):
        simulate_cores([program, program], mode="timing")
