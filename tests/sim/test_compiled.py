"""The compiled scheduler loop records exactly what the Python loop does (TRNSIM_SIM_LOOP=check).

Check mode runs both loops on the same program and raises at the first record, DMA piece or
final region time that differs by as much as one bit; these programs exercise every part of the
loop: TensorE's two pipelines, the NC-v2 shared ports (and their pruning), DMA queues chosen and
pinned, the DMA engine pool shared by overlapping transfers (and its pruning), small and large
transfers.
"""

import dataclasses

import numpy as np
import pytest

from tests.sim.helpers import builder
from tests.sim.synthetic import tiled_matmul
from trnsim.errors import InvalidArgumentError
from trnsim.isa import (
    Activation,
    DmaCopy,
    LoadStationary,
    Memory,
    MultiplyMoving,
    TensorCopy,
    TensorScalar,
    TensorTensor,
)
from trnsim.sim import compiled, simulate


@pytest.fixture(autouse=True)
def _numba(monkeypatch):
    assert compiled.kernel() is not None, "numba is part of the test extra"
    monkeypatch.setenv(compiled.LOOP_ENV, "check")


def _mixed(version: str, repeats: int, seed: int = 0):
    """Vector/Scalar/GpSimd work between DMAs of several sizes, some on pinned queues."""
    rng = np.random.default_rng(seed)
    b = builder(version)
    x = b.input("x", (128, 2048), "float32")
    out = b.output("out", (128, 2048), "float32")
    tiles = [b.tile((128, 512), "float32") for _ in range(4)]
    low = b.tile((128, 512), "bfloat16")
    for i in range(repeats):
        width = int(rng.choice([8, 64, 512]))
        parts = int(rng.choice([16, 64, 128]))
        src = x.block((0, (i * 8) % 1536), (parts, width))
        dst = dataclasses.replace(tiles[i % 2], partitions=parts, dims=((1, width),))
        queue = int(rng.integers(0, 16)) if i % 5 == 0 else None
        b.emit(DmaCopy(dst=dst, src=src, queue=queue),
               TensorTensor(dst=tiles[2], in0=tiles[i % 2], in1=tiles[3], op="add"),
               Activation(dst=tiles[3], src=tiles[2], func="exp"),
               TensorScalar(dst=tiles[2], src=tiles[3], op0="multiply", operand0=0.5,
                            engine="gpsimd"),
               TensorCopy(dst=low, src=tiles[2]),
               DmaCopy(dst=out.block((0, (i * 64) % 1536), (128, 512)), src=tiles[2]))
    return b.build()


@pytest.mark.parametrize("version", ["v2", "v3"])
def test_tiled_matmul_records_are_bit_identical(version):
    program = tiled_matmul(512, 1024, 2048, core=version)
    result = simulate(program, mode="timing")  # raises SimulationMismatchError on any difference
    assert len(result.profile) == len(program.instructions)


@pytest.mark.parametrize("version", ["v2", "v3"])
def test_ports_queues_and_the_engine_pool_are_bit_identical(version):
    program = _mixed(version, 700)  # > 512 port bookings and > 256 DMA bookings: both prune
    profile = simulate(program, mode="timing").profile
    assert len(profile.moved_record) > len(program.instructions) // 6  # DMAs moved data


def test_check_mode_fails_when_the_loops_differ(monkeypatch):
    run = compiled.kernel()

    def off_by_one_ulp(*args):
        out = list(run(*args))
        out[1] = np.nextafter(out[1], np.inf)  # starts
        return tuple(out)

    monkeypatch.setattr(compiled, "_KERNEL", off_by_one_ulp)
    with pytest.raises(compiled.SimulationMismatchError, match="starts"):
        simulate(tiled_matmul(128, 256, 1024), mode="timing")


def test_a_multiply_with_no_stationary_raises_the_python_loops_error(monkeypatch):
    monkeypatch.setenv(compiled.LOOP_ENV, "compiled")
    b = builder()
    moving = b.tile((128, 512), "bfloat16")
    stationary = b.tile((128, 128), "bfloat16")
    dst = b.tile((128, 512), "float32", memory=Memory.PSUM)
    b.emit(TensorCopy(dst=moving, src=moving),
           MultiplyMoving(dst=dst, moving=moving, stationary=stationary),
           LoadStationary(src=stationary))
    with pytest.raises(InvalidArgumentError, match="no stationary tile loaded"):
        simulate(b.build(), mode="timing")


def test_the_loop_choice_is_checked(monkeypatch):
    monkeypatch.setenv(compiled.LOOP_ENV, "fastest")
    with pytest.raises(InvalidArgumentError, match="TRNSIM_SIM_LOOP"):
        simulate(tiled_matmul(128, 128, 512), mode="timing")


def test_auto_loads_the_compiled_loop_once_the_python_loop_has_done_enough(monkeypatch):
    monkeypatch.setenv(compiled.LOOP_ENV, "auto")
    monkeypatch.setattr(compiled, "_KERNEL", None)  # not loaded yet in this "process"
    monkeypatch.setattr(compiled, "_python_instructions", 0)
    monkeypatch.setattr(compiled, "kernel", lambda: "loaded")
    assert not compiled.use_compiled(compiled.COMPILED_FROM - 1)  # small: never worth it
    assert not compiled.use_compiled(compiled.LOAD_AFTER // 2)
    assert compiled._python_instructions == compiled.LOAD_AFTER // 2
    assert compiled.use_compiled(compiled.LOAD_AFTER // 2)  # together they pay for loading
    monkeypatch.setenv(compiled.LOOP_ENV, "python")
    assert not compiled.use_compiled(10 * compiled.LOAD_AFTER)


def test_a_functional_run_times_with_the_compiled_loop_and_computes_the_same_values(monkeypatch):
    program = _mixed("v2", 40)
    x = np.random.default_rng(1).standard_normal((128, 2048)).astype(np.float32)
    checked = simulate(program, {"x": x}, mode="functional")  # check mode: records compared
    monkeypatch.setenv(compiled.LOOP_ENV, "python")
    python = simulate(program, {"x": x}, mode="functional")
    np.testing.assert_array_equal(checked.outputs["out"], python.outputs["out"])
    assert checked.profile.total_ns == python.profile.total_ns


def test_a_functional_run_raises_the_python_loops_error_where_a_timing_step_fails(monkeypatch):
    monkeypatch.setenv(compiled.LOOP_ENV, "compiled")
    b = builder()
    x = b.input("x", (128, 512), "float32")
    moving = b.tile((128, 512), "float32")
    stationary = b.tile((128, 128), "float32")
    dst = b.tile((128, 512), "float32", memory=Memory.PSUM)
    b.emit(DmaCopy(dst=moving, src=x.block((0, 0), (128, 512))),
           MultiplyMoving(dst=dst, moving=moving, stationary=stationary),
           LoadStationary(src=stationary))
    with pytest.raises(InvalidArgumentError, match="no stationary tile loaded"):
        simulate(b.build(), {"x": np.ones((128, 512), np.float32)}, mode="functional")


def test_plan_arrays_give_each_plans_neighbour_lists_in_order():
    from trnsim.sim.plan import Planner

    program = _mixed("v2", 60)
    planner = Planner(program.target)
    planner.plan_program(program)
    plans = planner.distinct
    for arrays in (compiled.PlanArrays(plans, planner.regions.neighbor_lists()),
                   compiled.PlanArrays(plans)):
        for plan in plans:
            u = plan.uid
            nb, at = arrays.neighbors, arrays.nb_ptr  # (through the plan's regions, as `_run`)
            assert [n for r in arrays.reads[arrays.r_ptr[u]:arrays.r_ptr[u + 1]]
                    for n in nb[at[r]:at[r + 1]]] == [n for nb in plan.read_neighbors for n in nb]
            assert [n for r in arrays.writes[arrays.w_ptr[u]:arrays.w_ptr[u + 1]]
                    for n in nb[at[r]:at[r + 1]]] == [n for nb in plan.write_neighbors for n in nb]
            assert arrays.reads[arrays.r_ptr[u]:arrays.r_ptr[u + 1]].tolist() == list(plan.reads)
            assert arrays.ports[arrays.p_ptr[u]:arrays.p_ptr[u + 1]].tolist() == list(plan.ports)
            assert (arrays.code[u], arrays.busy[u], arrays.latency[u]) == \
                (plan.code, plan.busy, plan.latency)
            assert arrays.dma_queue[u] == (-1 if plan.dma is None or plan.dma.queue is None
                                           else plan.dma.queue)


def test_region_neighbours_are_laid_out_by_uid_whatever_the_mapping_order():
    # uids out of order, a hole (uid 2) and an empty list: as a per-region Python loop lays them
    regions = {5: [5, 1], 0: [0], 3: [], 1: [1, 5, 4], 4: [4, 1]}
    lists, ptr = compiled.region_neighbors(regions)
    for uid in range(6):
        assert lists[ptr[uid]:ptr[uid + 1]].tolist() == regions.get(uid, [])
    assert len(lists) == ptr[-1] == 8


def test_segments_gathered_by_the_compiled_copy_equal_the_array_operations(monkeypatch):
    if compiled.kernel() is None:
        pytest.skip("numba is not installed")
    rng = np.random.default_rng(7)
    counts = rng.integers(0, 5, 300)  # empty segments among them
    ptr = np.concatenate([[0], np.cumsum(counts)])
    lists = rng.integers(0, 10**6, int(ptr[-1]))
    ids = rng.integers(0, 300, 1000)
    fast, fast_ends = compiled._segments(lists, ptr, ids)
    monkeypatch.setattr(compiled, "loaded", lambda function: None)
    slow, slow_ends = compiled._segments(lists, ptr, ids)
    assert fast.tolist() == slow.tolist() == [v for i in ids for v in lists[ptr[i]:ptr[i + 1]]]
    assert fast_ends.tolist() == slow_ends.tolist()
