"""Functional reruns: the kept timeline (`trnsim.sim.replay`) and the reused SBUF/PSUM
(`trnsim.sim.memory.on_chip_memory`) give exactly what a first run gives."""

import numpy as np
import pytest

from tests.sim.helpers import builder, rng_array, sbuf_ap
from tests.sim.test_state import _matmul_program
from trnsim.isa import DmaCopy, Memory, TensorCopy
from trnsim.sim import memory, simulate
from trnsim.sim.scheduler import CoreScheduler

COLUMNS = ("start_ns", "end_ns", "done_ns", "stream", "cause", "moved_record", "moved_pieces",
           "flops", "nbytes")


def _inputs(seed: int = 1, k_tiles: int = 3) -> dict:
    return {"at": rng_array((k_tiles * 128, 128), "bfloat16", seed=seed),
            "b": rng_array((k_tiles * 128, 512), "bfloat16", seed=seed + 1)}


def _same_profile(one, other) -> None:
    for name in COLUMNS:
        a, b = getattr(one, name), getattr(other, name)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), name
    assert one.summary == other.summary


def _count_steps(monkeypatch) -> list:
    steps = []
    step = CoreScheduler.step

    def counted(self, *args, **kwargs):
        steps.append(1)
        return step(self, *args, **kwargs)

    monkeypatch.setattr(CoreScheduler, "step", counted)
    return steps


def test_a_functional_rerun_replays_the_timeline_and_computes_the_same(monkeypatch):
    monkeypatch.setenv("TRNSIM_SIM_LOOP", "python")
    program = _matmul_program(k_tiles=3)
    first = simulate(program, _inputs())
    steps = _count_steps(monkeypatch)
    second = simulate(program, _inputs())
    assert not steps  # nothing stepped: the kept timeline
    _same_profile(first.profile, second.profile)
    assert first.outputs["out"].tobytes() == second.outputs["out"].tobytes()
    # without the kept timeline (check mode never replays): the same records
    monkeypatch.setenv("TRNSIM_SIM_LOOP", "check")
    third = simulate(program, _inputs())
    assert steps
    _same_profile(first.profile, third.profile)
    assert not second.profile.start_ns.flags.writeable  # kept records cannot be changed


def test_timing_runs_neither_replay_nor_keep(monkeypatch):
    monkeypatch.setenv("TRNSIM_SIM_LOOP", "python")
    program = _matmul_program(k_tiles=2)
    timing = simulate(program, None, mode="timing")
    steps = _count_steps(monkeypatch)
    simulate(program, None, mode="timing")
    assert steps
    functional = simulate(program, _inputs(k_tiles=2))
    _same_profile(timing.profile, functional.profile)


def test_new_inputs_give_new_values_on_the_kept_timeline(monkeypatch):
    monkeypatch.setenv("TRNSIM_SIM_LOOP", "python")
    program = _matmul_program(k_tiles=2)
    simulate(program, _inputs(1, k_tiles=2))
    inputs = _inputs(7, k_tiles=2)
    out = simulate(program, inputs).outputs["out"]
    at, bt = inputs["at"][:256], inputs["b"][:256]
    expected = at.astype(np.float64).T @ bt.astype(np.float64)
    np.testing.assert_allclose(out[0], expected, rtol=1e-5, atol=1e-4)


def test_a_changed_program_is_timed_again(monkeypatch):
    monkeypatch.setenv("TRNSIM_SIM_LOOP", "python")
    program = _matmul_program(k_tiles=2)
    simulate(program, _inputs(k_tiles=2))
    extra = program.instructions[-2:]  # the last bank copied out once more
    program.instructions.extend(extra)
    steps = _count_steps(monkeypatch)
    changed = simulate(program, _inputs(k_tiles=2))
    assert len(steps) == len(program.instructions)  # replanned, so stepped afresh
    fresh = _matmul_program(k_tiles=2)
    fresh.instructions.extend(fresh.instructions[-2:])
    monkeypatch.setenv("TRNSIM_SIM_LOOP", "check")
    _same_profile(simulate(fresh, _inputs(k_tiles=2)).profile, changed.profile)


def _writes_then_reads_back():
    """Run 1 writes a tile; the program reads a tile nobody wrote in this run."""
    b = builder()
    x = b.input("x", (128, 64), "float32")
    out = b.output("out", (128, 64), "float32")
    stale = b.output("stale", (128, 64), "float32")
    tile = b.tile((128, 64), "float32")
    copied = b.tile((128, 64), "float32")
    never = b.tile((128, 64), "float32", memory=Memory.PSUM)
    b.emit(DmaCopy(dst=tile, src=x.block()), DmaCopy(dst=out.block(), src=tile),
           TensorCopy(dst=copied, src=never), DmaCopy(dst=stale.block(), src=copied),
           TensorCopy(dst=never, src=tile), TensorCopy(dst=copied, src=tile))
    return b.build()


def test_reused_sbuf_and_psum_start_uninitialised(monkeypatch):
    monkeypatch.setenv("TRNSIM_SIM_LOOP", "python")
    program = _writes_then_reads_back()
    x = rng_array((128, 64), "float32")
    core = program.target
    for _ in range(3):  # PSUM `never` was written by the run before: it must read NaN again
        result = simulate(program, {"x": x}).outputs
        np.testing.assert_array_equal(result["out"], x)
        assert np.isnan(result["stale"]).all()
        kept = memory._FREE[(Memory.PSUM, core.partitions, core.psum_bytes_per_partition)]
        assert kept and kept[-1].cached  # the run's PSUM, with its views, waits for the next


def test_memories_are_reused_with_their_views_unless_an_array_over_them_is_held():
    sbuf = memory.on_chip_memory(Memory.SBUF, 4, 256)
    ap = sbuf_ap(0, 4, (8,), "float32")
    sbuf.views(ap)[0][...] = 0
    assert sbuf.reusable()
    assert memory._REFERENCES_COUNTED  # this interpreter's counts read as `reusable` expects
    held = sbuf.views(ap)[1]  # a caller keeps the cached view itself
    assert not sbuf.reusable()
    held = sbuf.views(ap)  # or the pair of views
    assert not sbuf.reusable()
    del held
    derived = sbuf.views(ap)[0][1:]  # or any array over the bytes
    assert not sbuf.reusable()
    del derived
    assert sbuf.reusable()
    memory.release(sbuf)
    again = memory.on_chip_memory(Memory.SBUF, 4, 256)
    assert again is sbuf and ap in again.cached
    assert (again.buffer == memory.UNINITIALISED_BYTE).all()  # refilled
    kept = again.views(ap)[0]
    memory.release(again)  # `kept` is still held: not handed out again
    assert memory.on_chip_memory(Memory.SBUF, 4, 256) is not again
    del kept


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "int32", "float8_e4m3"])
def test_read_compute_is_to_compute_of_the_view(dtype):
    from trnsim import hardware
    from trnsim.numerics import to_compute
    from trnsim.sim.memory import HbmSpace
    from trnsim.sim.state import CoreState

    chip = hardware.chip("trn1")
    state = CoreState(chip.core, HbmSpace(chip.memory_bytes), {})
    tile = builder().tile((8, 16), dtype)
    state.write(tile, rng_array((8, 16), "float32", seed=3) * 4)
    view = state.read(tile)
    fast, general = state.read_compute(tile), to_compute(view, tile.dtype)
    assert fast.dtype == general.dtype and fast.tobytes() == general.tobytes()
    state.release()


def test_an_error_in_a_replayed_run_names_its_instruction(monkeypatch):
    import dataclasses

    from trnsim.errors import InvalidArgumentError

    monkeypatch.setenv("TRNSIM_SIM_LOOP", "python")
    program = _writes_then_reads_back()
    index = next(i for i, ins in enumerate(program.instructions) if isinstance(ins, TensorCopy))
    program.instructions[index] = dataclasses.replace(program.instructions[index],
                                                      source="model.py:7")
    x = rng_array((128, 64), "float32")
    simulate(program, {"x": x})

    def fails(self, state):
        raise InvalidArgumentError("a value the instruction cannot take")

    monkeypatch.setattr(TensorCopy, "execute", fails)
    steps = _count_steps(monkeypatch)
    with pytest.raises(InvalidArgumentError) as raised:
        simulate(program, {"x": x})
    assert not steps  # replayed: nothing stepped, the error still located
    assert raised.value.source == "model.py:7"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "tfloat32"])
def test_fp32_out_is_the_writable_view_only_where_a_write_stores_float32_unchanged(dtype):
    """`CoreState.fp32_out`: instructions compute into it instead of `write`; only float32
    destinations qualify (bfloat16 rounds, tfloat32 drops mantissa bits), and only as a view."""
    from trnsim import hardware
    from trnsim.isa import Memory
    from trnsim.sim.memory import HbmSpace
    from trnsim.sim.state import CoreState

    chip = hardware.chip("trn1")
    state = CoreState(chip.core, HbmSpace(chip.memory_bytes), {})
    tile = builder().tile((8, 4, 4), dtype, memory=Memory.PSUM)
    out = state.fp32_out(tile, (8, 16))
    if dtype != "float32":
        assert out is None
    else:
        out[...] = np.arange(128, dtype=np.float32).reshape(8, 16)
        np.testing.assert_array_equal(state.read(tile).reshape(8, 16), out)
        assert np.shares_memory(out, state.read(tile))
        assert state.fp32_out(tile, (16, 8)) is None  # across partitions: only a copy has it
    state.release()


def test_fp32_to_bf16_write_is_the_rne_cast_bit_for_bit():
    """`CoreState.write` casts fp32 into a bfloat16 view directly (no temporary): the bits must
    be `cast(..., rounding="rne")`'s for every bf16 rounding case (ties, carries into the
    exponent, overflow to Inf, NaN payloads, subnormals, signed zeros), broadcasting included.
    (All 2^32 float32 patterns were checked once against astype offline; this samples them.)"""
    from trnsim import hardware
    from trnsim.errors import InvalidArgumentError
    from trnsim.numerics import cast
    from trnsim.sim.memory import HbmSpace
    from trnsim.sim.state import CoreState

    chip = hardware.chip("trn1")
    state = CoreState(chip.core, HbmSpace(chip.memory_bytes), {})
    state.rounding = "rne"
    tile = builder().tile((128, 512), "bfloat16")
    rng = np.random.default_rng(5)
    high = rng.integers(0, 1 << 16, 128 * 512, dtype=np.uint32) << np.uint32(16)
    low = rng.choice(np.uint32([0, 0x7FFF, 0x8000, 0x8001, 0xFFFF]), 128 * 512)
    bits = (high | low).reshape(128, 512)
    values = bits.view(np.float32)
    state.write(tile, values)
    with np.errstate(all="ignore"):
        want = cast(values, "bfloat16", rounding="rne")
    assert state.read(tile).view(np.uint16).tobytes() == want.view(np.uint16).tobytes()
    state.write(tile, values[:1])  # one row broadcast over the partitions
    assert (state.read(tile).view(np.uint16) == want[:1].view(np.uint16)).all()
    with pytest.raises(InvalidArgumentError, match="cannot store"):
        state.write(tile, values[:, :3])
    state.release()
