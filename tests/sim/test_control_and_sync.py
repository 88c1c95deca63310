"""Programs with control flow (registers, branches, register-addressed operands) and cores that
synchronise (barriers, send/receive), built directly with ProgramBuilder."""

import numpy as np
import pytest

from trnsim.errors import TrnsimError
from trnsim.isa import (
    Branch,
    CoreBarrier,
    DmaCopy,
    Jump,
    RegisterAddressed,
    RegisterAlu,
    RegisterMove,
    RegisterOffset,
    SendRecv,
    TensorScalar,
    UnknownRegisterValue,
)
from trnsim.sim import simulate, simulate_cores

from .helpers import builder


def _counting_loop(trips: int, core: str = "v3"):
    """tile += 1, `trips` times, as a loop: r0 = 0; while r0 < trips: tile += 1; r0 += 1."""
    b = builder(core)
    x = b.input("x", (128, 64), "float32")
    tile = b.tile((128, 64), "float32")
    b.emit(DmaCopy(dst=tile, src=x.block()))
    b.emit(RegisterMove(dst=0, src=0))
    test = len(b.program.instructions)
    b.emit(Branch(a="r0", cmp="greater_equal", b=trips, target=test + 4))
    b.emit(TensorScalar(dst=tile, src=tile, op0="add", operand0=1.0))
    b.emit(RegisterAlu(dst=0, op="add", a="r0", b=1))
    b.emit(Jump(target=test))
    result = b.output("result", (128, 64), "float32")
    b.emit(DmaCopy(dst=result.block(), src=tile))
    return b.build()


def test_a_branching_loop_runs_its_body_trip_count_times():
    program = _counting_loop(5)
    run = simulate(program, {"x": np.zeros((128, 64), np.float32)})
    assert np.all(run.outputs["result"] == 5.0)
    records = run.profile.records
    body = [r for r in records if r.opcode == "TensorScalar"]
    assert len(body) == 5 and {r.pc for r in body} == {3}
    assert [r.opcode for r in records].count("Branch") == 6  # five taken back, one exit


def test_loop_timeline_matches_unrolled_code_plus_sequencer_time():
    looped = simulate(_counting_loop(8), mode="timing").profile
    b = builder("v3")
    x = b.input("x", (128, 64), "float32")
    tile = b.tile((128, 64), "float32")
    b.emit(DmaCopy(dst=tile, src=x.block()))
    for _ in range(8):
        b.emit(TensorScalar(dst=tile, src=tile, op0="add", operand0=1.0))
    result = b.output("result", (128, 64), "float32")
    b.emit(DmaCopy(dst=result.block(), src=tile))
    unrolled = simulate(b.build(), mode="timing").profile
    assert unrolled.total_ns <= looped.total_ns < unrolled.total_ns * 1.05


def test_register_addressed_operands_move_with_the_register():
    b = builder("v3")
    x = b.input("x", (8, 16), "float32")
    out = b.output("out", (8, 16), "float32")
    row = b.tile((1, 16), "float32")
    row_bytes = 16 * 4
    b.emit(RegisterMove(dst=0, src=0))
    b.emit(Branch(a="r0", cmp="greater_equal", b=8, target=7))
    b.emit(RegisterAddressed(inner=DmaCopy(dst=row, src=x.block((0, 0), (1, 16))),
                             offsets=(RegisterOffset("src", 0, row_bytes),)))
    b.emit(TensorScalar(dst=row, src=row, op0="multiply", operand0=-1.0))
    b.emit(RegisterAddressed(inner=DmaCopy(dst=out.block((0, 0), (1, 16)), src=row),
                             offsets=(RegisterOffset("dst", 0, row_bytes),)))
    b.emit(RegisterAlu(dst=0, op="add", a="r0", b=1))
    b.emit(Jump(target=1))
    data = np.arange(128, dtype=np.float32).reshape(8, 16)
    np.testing.assert_array_equal(simulate(b.build(), {"x": data}).outputs["out"], -data)


def test_timing_only_needs_known_registers():
    from trnsim.isa import RegisterLoad

    b = builder("v3")
    n = b.input("n", (1, 1), "int32")
    tile = b.tile((1, 1), "int32")
    b.emit(DmaCopy(dst=tile, src=n.block()))
    b.emit(RegisterLoad(dst=0, src=tile, source="k.py:3"))
    b.emit(Branch(a="r0", cmp="equal", b=0, target=3, source="k.py:4"))
    program = b.build()
    assert simulate(program, {"n": np.array([[2]], np.int32)}).profile.total_ns > 0
    with pytest.raises(UnknownRegisterValue, match=r"loaded from memory at k\.py:3"):
        simulate(program, mode="timing")


def _pair(barrier_on_core1: bool, core: str = "v3"):
    programs = []
    for index in range(2):
        b = builder(core, f"core{index}")
        shared = b.output("shared", (128, 64), "float32")
        tile = b.tile((128, 64), "float32")
        b.emit(TensorScalar(dst=tile, src=tile, op0="bypass", operand0=0.0))
        if index == 0 or barrier_on_core1:
            b.emit(CoreBarrier(data=shared.block(), cores=(0, 1)))
        programs.append(b.build())
    return programs


def test_core_barrier_releases_both_cores_after_the_later_one_arrives():
    runs = simulate_cores(_pair(True), mode="timing", shared=["shared"])
    barriers = [next(r for r in run.profile.records if r.opcode == "CoreBarrier") for run in runs]
    assert barriers[0].end_ns == barriers[1].end_ns


def test_a_missing_partner_is_a_deadlock_error():
    with pytest.raises(TrnsimError, match=r"deadlock.*CoreBarrier.*core 1 \(finished\)"):
        simulate_cores(_pair(False), mode="timing", shared=["shared"])


def test_sendrecv_swaps_two_cores_tiles():
    programs = []
    for index in range(2):
        b = builder("v3", f"core{index}")
        x = b.input("x", (128, 8), "float32")
        out = b.output("out", (128, 8), "float32")
        mine, theirs = b.tile((128, 8), "float32"), b.tile((128, 8), "float32")
        b.emit(DmaCopy(dst=mine, src=x.block()))
        b.emit(SendRecv(src=mine, dst=theirs, send_to=1 - index, recv_from=1 - index))
        b.emit(DmaCopy(dst=out.block(), src=theirs))
        programs.append(b.build())
    a, c = np.full((128, 8), 1.0, np.float32), np.full((128, 8), 2.0, np.float32)
    runs = simulate_cores(programs, [{"x": a}, {"x": c}])
    assert np.all(runs[0].outputs["out"] == 2.0) and np.all(runs[1].outputs["out"] == 1.0)
