"""Functional results through the byte-addressed memories, checked against numpy."""

import ml_dtypes
import numpy as np
import pytest

from tests.sim.helpers import builder, hbm_ap, rng_array, sbuf_ap
from trnsim.errors import InvalidArgumentError
from trnsim.isa import (
    Activation,
    DmaCopy,
    Dropout,
    LoadStationary,
    Memory,
    MultiplyMoving,
    TensorCopy,
    TensorTensor,
)
from trnsim.sim import simulate


def _matmul_program(k_tiles: int, n: int = 512, m: int = 128):
    """out[m, n] = sum over K tiles of a_t[k].T @ b[k]: one accumulation group per K loop, two groups
    (banks) interleaved to check that groups do not mix."""
    b = builder()
    at = b.input("at", (k_tiles * 128, m), "bfloat16")
    bt = b.input("b", (k_tiles * 128, n), "bfloat16")
    out = b.output("out", (2, m, n), "float32")
    bank0 = b.tile((m, n), "float32", memory=Memory.PSUM)
    bank1 = b.tile((m, n), "float32", memory=Memory.PSUM)
    result = b.tile((m, n), "float32")
    for ki in range(k_tiles):
        sa = b.tile((128, m), "bfloat16")
        sb = b.tile((128, n), "bfloat16")
        b.emit(DmaCopy(dst=sa, src=at.block((ki * 128, 0), (128, m))),
               DmaCopy(dst=sb, src=bt.block((ki * 128, 0), (128, n))),
               LoadStationary(src=sa),
               MultiplyMoving(dst=bank0, moving=sb, stationary=sa, accumulate=ki > 0),
               MultiplyMoving(dst=bank1, moving=sb, stationary=sa, accumulate=ki > 0))
    for i, bank in enumerate((bank0, bank1)):
        b.emit(TensorCopy(dst=result, src=bank), DmaCopy(dst=out.block((i, 0, 0), (1, m, n)), src=result))
    return b.build()


def test_matmul_accumulation_groups_match_numpy():
    program = _matmul_program(k_tiles=3)
    at = rng_array((384, 128), "bfloat16", seed=1)
    bt = rng_array((384, 512), "bfloat16", seed=2)
    out = simulate(program, {"at": at, "b": bt}).outputs["out"]
    expected = at.astype(np.float64).T @ bt.astype(np.float64)
    # bf16 products are exact in fp32; only the fp32 accumulation of 384 terms rounds.
    np.testing.assert_allclose(out[0], expected, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(out[0], out[1])


def test_dma_strided_broadcast_and_reversed_access_patterns():
    b = builder()
    b.input("x", (128, 64), "float32")
    out = b.output("out", (3, 128, 32), "float32")
    tile = b.tile((128, 32), "float32")
    b.emit(DmaCopy(dst=tile, src=hbm_ap("x", "float32", 128, 64, ((2, 32),))),  # every other column
           DmaCopy(dst=out.block((0, 0, 0), (1, 128, 32)), src=tile),
           DmaCopy(dst=tile, src=hbm_ap("x", "float32", 128, 0, ((1, 32),), offset_elements=64 * 5)),
           DmaCopy(dst=out.block((1, 0, 0), (1, 128, 32)), src=tile),  # row 5 broadcast to 128 rows
           DmaCopy(dst=tile, src=hbm_ap("x", "float32", 128, 64, ((-1, 32),), offset_elements=63)),
           DmaCopy(dst=out.block((2, 0, 0), (1, 128, 32)), src=tile))  # columns 63..32 reversed
    x_value = rng_array((128, 64), "float32")
    result = simulate(b.build(), {"x": x_value}).outputs["out"]
    np.testing.assert_array_equal(result[0], x_value[:, ::2])
    np.testing.assert_array_equal(result[1], np.broadcast_to(x_value[5, :32], (128, 32)))
    np.testing.assert_array_equal(result[2], x_value[:, 63:31:-1])


def test_partition_offsets_and_dma_transpose_through_access_patterns():
    b = builder()
    b.input("x", (32, 16), "float32")
    out = b.output("out", (16, 32), "float32")
    # HBM x read column-major: partition p = column p (step 1), free dim walks rows (stride 16)
    tile = sbuf_ap(256, 16, (32,), "float32", start=96)
    b.emit(DmaCopy(dst=tile, src=hbm_ap("x", "float32", 16, 1, ((16, 32),))),
           DmaCopy(dst=out.block(), src=tile))
    x_value = rng_array((32, 16), "float32")
    np.testing.assert_array_equal(simulate(b.build(), {"x": x_value}).outputs["out"], x_value.T)


def test_cast_on_write_rounds_to_nearest_even():
    b = builder()
    x = b.input("x", (128, 256), "float32")
    out = b.output("out", (128, 256), "float32")
    low = b.tile((128, 256), "bfloat16")
    wide = b.tile((128, 256), "float32")
    b.emit(DmaCopy(dst=low, src=x.block()), TensorCopy(dst=wide, src=low), DmaCopy(dst=out.block(), src=wide))
    x_value = rng_array((128, 256), "float32")
    result = simulate(b.build(), {"x": x_value}).outputs["out"]
    np.testing.assert_array_equal(result, x_value.astype(ml_dtypes.bfloat16).astype(np.float32))
    assert not np.array_equal(result, x_value)  # the cast really happened


def test_uninitialised_memory_reads_nan_and_integers_read_the_fill_pattern():
    b = builder()
    out = b.output("out", (128, 8), "bfloat16")
    ints = b.output("ints", (128, 8), "int32")
    never_written = b.tile((128, 8), "bfloat16")
    int_tile = b.tile((128, 8), "int32")
    b.emit(DmaCopy(dst=out.block(), src=never_written), DmaCopy(dst=ints.block(), src=int_tile))
    b.output("untouched", (4,), "float32")
    result = simulate(b.build()).outputs
    assert np.isnan(result["out"].astype(np.float32)).all()
    assert (result["ints"] == -1).all()
    assert np.isnan(result["untouched"]).all()


def test_sbuf_aliasing_two_patterns_over_the_same_bytes():
    b = builder()
    x = b.input("x", (128, 64), "float32")
    bits = b.output("bits", (128, 64), "int32")
    tail = b.output("tail", (128, 32), "float32")
    tile = sbuf_ap(1024, 128, (64,), "float32")
    b.emit(DmaCopy(dst=tile, src=x.block()),
           DmaCopy(dst=bits.block(), src=tile.with_dtype("int32")),  # same bytes, read as int32
           DmaCopy(dst=tail.block(), src=sbuf_ap(1024 + 32 * 4, 128, (32,), "float32")))
    x_value = rng_array((128, 64), "float32")
    result = simulate(b.build(), {"x": x_value}).outputs
    np.testing.assert_array_equal(result["bits"], x_value.view(np.int32))
    np.testing.assert_array_equal(result["tail"], x_value[:, 32:])


def test_engines_compute_in_fp32_and_cast_on_write():
    b = builder()
    x = b.input("x", (128, 64), "bfloat16")
    out = b.output("out", (128, 64), "bfloat16")
    tile, tanh, total = (b.tile((128, 64), "bfloat16") for _ in range(3))
    b.emit(DmaCopy(dst=tile, src=x.block()),
           Activation(dst=tanh, src=tile, func="tanh", scale=0.5),
           TensorTensor(dst=total, in0=tanh, in1=tile, op="add"),
           DmaCopy(dst=out.block(), src=total))
    x_value = rng_array((128, 64), "bfloat16")
    x32 = x_value.astype(np.float32)
    step = np.tanh(x32 * np.float32(0.5)).astype(ml_dtypes.bfloat16).astype(np.float32)
    expected = (step + x32).astype(ml_dtypes.bfloat16)
    result = simulate(b.build(), {"x": x_value}).outputs["out"]
    # tanh may differ from numpy's by an ulp of fp32 before the bf16 cast: allow one bf16 ulp.
    np.testing.assert_allclose(result.astype(np.float32), expected.astype(np.float32), rtol=2 ** -7)


def _dropout_program():
    b = builder()
    x = b.input("x", (128, 256), "float32")
    out = b.output("out", (128, 256), "float32")
    tile = b.tile((128, 256), "float32")
    b.emit(DmaCopy(dst=tile, src=x.block()), Dropout(dst=tile, src=tile, prob=0.5),
           DmaCopy(dst=out.block(), src=tile))
    return b.build()


def test_randomness_is_seeded_per_run():
    program = _dropout_program()
    x_value = np.ones((128, 256), np.float32)
    first = simulate(program, {"x": x_value}, seed=3).outputs["out"].copy()
    again = simulate(program, {"x": x_value}, seed=3).outputs["out"]
    other = simulate(program, {"x": x_value}, seed=4).outputs["out"]
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    assert 0.4 < (first == 0).mean() < 0.6


def test_stochastic_rounding_follows_the_runtime_variable(monkeypatch):
    b = builder()
    x = b.input("x", (128, 512), "float32")
    out = b.output("out", (128, 512), "float32")
    low, wide = b.tile((128, 512), "bfloat16"), b.tile((128, 512), "float32")
    b.emit(DmaCopy(dst=low, src=x.block()), TensorCopy(dst=wide, src=low), DmaCopy(dst=out.block(), src=wide))
    program = b.build()
    # 1 + 2^-9 lies a quarter of the way between two bf16 neighbours: RNE always rounds down,
    # SR rounds up about a quarter of the time.
    x_value = np.full((128, 512), 1 + 2.0 ** -9, np.float32)
    rne = simulate(program, {"x": x_value}).outputs["out"]
    assert (rne == 1.0).all()
    monkeypatch.setenv("NEURON_RT_STOCHASTIC_ROUNDING_EN", "1")
    sr = simulate(program, {"x": x_value}, seed=1).outputs["out"].copy()
    assert 0.2 < (sr > 1.0).mean() < 0.3
    np.testing.assert_array_equal(sr, simulate(program, {"x": x_value}, seed=1).outputs["out"])


def test_timing_mode_follows_the_same_timeline():
    program = _matmul_program(k_tiles=2)
    inputs = {"at": rng_array((256, 128), "bfloat16"), "b": rng_array((256, 512), "bfloat16")}
    functional = simulate(program, inputs).profile
    timing = simulate(program, mode="timing")
    assert timing.outputs is None
    np.testing.assert_array_equal(functional.start_ns, timing.profile.start_ns)
    np.testing.assert_array_equal(functional.done_ns, timing.profile.done_ns)


@pytest.mark.parametrize("core", ["v1", "v3", "v4"])
def test_other_core_versions_run_functionally(core):
    b = builder(core)
    x = b.input("x", (128, 32), "float32")
    out = b.output("out", (128, 32), "float32")
    tile = b.tile((128, 32), "float32")
    b.emit(DmaCopy(dst=tile, src=x.block()), Activation(dst=tile, src=tile, func="relu"),
           DmaCopy(dst=out.block(), src=tile))
    x_value = rng_array((128, 32), "float32")
    result = simulate(b.build(), {"x": x_value})
    np.testing.assert_array_equal(result.outputs["out"], np.maximum(x_value, 0))
    assert result.profile.total_ns > 0


def test_constants_are_loaded_and_chips_can_be_named():
    b = builder()
    table = np.arange(128 * 4, dtype=np.float32).reshape(128, 4)
    const = b.tensor("table", (128, 4), "float32", kind="constant", data=table)
    out = b.output("out", (128, 4), "float32")
    tile = b.tile((128, 4), "float32")
    b.emit(DmaCopy(dst=tile, src=const.block()), DmaCopy(dst=out.block(), src=tile, source="k.py:3"))
    result = simulate(b.build(), chip="trn1")
    np.testing.assert_array_equal(result.outputs["out"], table)
    assert result.profile.chip.name == "Trainium"
    assert result.profile.records[1].source == "k.py:3"


def test_constants_are_used_in_place_and_cannot_be_written():
    """A constant in its declared dtype becomes the tensor's bytes without a copy (weights are
    not copied per call), read-only: a write is a clear error and the caller's array is intact."""
    b = builder()
    table = np.arange(128 * 4, dtype=np.float32).reshape(128, 4)
    const = b.tensor("table", (128, 4), "float32", kind="constant", data=table)
    out = b.output("out", (128, 4), "float32")
    tile = b.tile((128, 4), "float32")
    b.emit(DmaCopy(dst=tile, src=const.block()), DmaCopy(dst=out.block(), src=tile))
    result = simulate(b.build())
    np.testing.assert_array_equal(result.outputs["out"], table)

    b = builder()
    const = b.tensor("table", (128, 4), "float32", kind="constant", data=table)
    tile = b.tile((128, 4), "float32")
    b.emit(DmaCopy(dst=tile, src=const.block()), DmaCopy(dst=const.block(), src=tile,
                                                         source="k.py:9"))
    with pytest.raises(InvalidArgumentError, match=r"constant .*cannot write it.*k.py:9"):
        simulate(b.build())
    np.testing.assert_array_equal(table, np.arange(128 * 4, dtype=np.float32).reshape(128, 4))
