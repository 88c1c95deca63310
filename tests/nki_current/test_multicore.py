"""Several NeuronCores: LNC=2 launches, sendrecv, core barriers, and nki.collectives on ranks of
one chip and across the 16 chips of a trn2.48xlarge."""

import numpy as np
import pytest

from tests.nki_current.kernels import multicore
from trnsim.errors import InvalidArgumentError, TrnsimError, UnsupportedError
from trnsim.nki.current import Kernel, World, per_rank, simulate
from trnsim.nki.current.collectives import ReplicaGroup


@pytest.mark.parametrize("target", ["trn2", "trn3"])
def test_lnc2_kernel_splits_rows_and_sendrecvs_partial_sums(rng, target):
    x = rng.standard_normal((256, 96)).astype(np.float32)
    kernel = Kernel(multicore.split_sum_sendrecv.fn, platform_target=target)[2]
    got = kernel(x)
    want = x[:128].sum(axis=1, keepdims=True) + x[128:].sum(axis=1, keepdims=True)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    runs = kernel.last_run.results
    assert len(runs) == 2  # the two physical cores of the logical NeuronCore
    exchange = [next(r for r in run.profile.records if r.opcode == "SendRecv") for run in runs]
    # the exchange cannot end before both partial sums exist, on either core
    reduces = [next(r for r in run.profile.records if r.opcode == "TensorReduce") for run in runs]
    assert min(e.end_ns for e in exchange) >= max(r.done_ns for r in reduces)


def test_program_id_and_num_programs_under_lnc(rng):
    x = rng.standard_normal((256, 32)).astype(np.float32)
    np.testing.assert_allclose(multicore.exchange_halves[2](x), np.exp(x), rtol=1e-6)
    with pytest.raises(InvalidArgumentError, match=r"kernel\[2\]"):
        multicore.exchange_halves(x)  # LNC=1: the barrier names core 1, which does not run


@pytest.mark.parametrize("target", ["trn2", "trn3"])
def test_core_barrier_orders_the_other_cores_writes(rng, target):
    x = rng.standard_normal((256, 64)).astype(np.float32)
    kernel = Kernel(multicore.exchange_halves.fn, platform_target=target)[2]
    np.testing.assert_allclose(kernel(x), np.exp(x), rtol=1e-6)
    kernel(x)
    for run in kernel.last_run.results:
        records = run.profile.records
        barrier = next(r for r in records if r.opcode == "CoreBarrier")
        reads_after = [r for r in records if r.opcode == "DmaCopy" and r.index > barrier.index]
        assert barrier.waited_on in ("other cores", "in order")
        assert all(r.start_ns >= barrier.end_ns for r in reads_after[:1])
    ends = [next(r for r in run.profile.records if r.opcode == "CoreBarrier").end_ns
            for run in kernel.last_run.results]
    assert ends[0] == ends[1]  # released together


def test_lnc2_on_trn1_names_the_target(rng):
    kernel = Kernel(multicore.split_sum_sendrecv.fn, platform_target="trn1")[2]
    with pytest.raises(UnsupportedError, match=r"LNC=2.*NeuronCore-v2"):
        kernel(rng.standard_normal((256, 8)).astype(np.float32))


def test_all_reduce_across_4_cores_of_one_chip(rng):
    xs = [rng.standard_normal((128, 512)).astype(np.float32) for _ in range(4)]
    world = World(ranks=4, instance="trn2.48xlarge", ranks_per_chip=4)
    outs = simulate(multicore.all_reduce, world=world)(per_rank(xs), ReplicaGroup([[0, 1, 2, 3]]))
    for out in outs:
        np.testing.assert_allclose(out, np.sum(xs, axis=0), rtol=1e-5, atol=1e-5)
    runs = multicore.all_reduce.last_run.results
    collectives = [next(r for r in run.profile.records if r.opcode == "Collective") for run in runs]
    assert len({c.end_ns for c in collectives}) == 1  # one collective, every rank released at its end


def test_all_reduce_across_the_16_chips_of_trn2_48xlarge_is_slower_than_on_chip(rng):
    xs = [rng.standard_normal((128, 512)).astype(np.float32) for _ in range(16)]
    group = ReplicaGroup([list(range(16))])
    outs = simulate(multicore.all_reduce, world=World(ranks=16, ranks_per_chip=1))(per_rank(xs), group)
    for out in outs:
        np.testing.assert_allclose(out, np.sum(xs, axis=0), rtol=1e-4, atol=1e-4)
    inter_chip = max(r.profile.total_ns for r in multicore.all_reduce.last_run.results)
    four = [rng.standard_normal((128, 512)).astype(np.float32) for _ in range(4)]
    simulate(multicore.all_reduce, world=World(ranks=4, ranks_per_chip=4))(
        per_rank(four), ReplicaGroup([[0, 1, 2, 3]]))
    on_chip = max(r.profile.total_ns for r in multicore.all_reduce.last_run.results)
    assert inter_chip > on_chip  # 16 ranks over NeuronLink take more steps than 4 on one chip


def test_two_replica_groups_reduce_separately(rng):
    xs = [np.full((128, 64), r, dtype=np.float32) for r in range(4)]
    outs = simulate(multicore.all_reduce, world=World(ranks=4))(per_rank(xs),
                                                                ReplicaGroup([[0, 1], [2, 3]]))
    assert [o[0, 0] for o in outs] == [1.0, 1.0, 5.0, 5.0]


def test_gather_scatter_all_to_all(rng):
    ranks = 4
    xs = [rng.standard_normal((8, 16)).astype(np.float32) for _ in range(ranks)]
    outs = simulate(multicore.gather_scatter, world=World(ranks=ranks))(
        per_rank(xs), ReplicaGroup([list(range(ranks))]), ranks)
    total = np.sum(xs, axis=0)
    for r, (gathered, scattered, swapped) in enumerate(outs):
        np.testing.assert_array_equal(gathered, np.concatenate(xs, axis=1))
        np.testing.assert_allclose(scattered, total[2 * r:2 * r + 2], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(swapped, np.concatenate([x[2 * r:2 * r + 2] for x in xs]))


def test_collective_permute_and_rank_id(rng):
    xs = [np.full((4, 8), r, dtype=np.float32) for r in range(3)]
    outs = simulate(multicore.rotate, world=World(ranks=3))(per_rank(xs), 3)
    assert [o[0, 0] for o in outs] == [2.0, 0.0, 1.0]
    table = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    got = simulate(multicore.my_slice, world=World(ranks=2))(table)
    np.testing.assert_array_equal(got[0], table[0])
    np.testing.assert_array_equal(got[1], table[1])


def test_lnc2_ranks_all_reduce(rng):
    """Two ranks of two physical cores each (LNC=2): both cores of a rank see the result."""
    xs = [rng.standard_normal((128, 64)).astype(np.float32) for _ in range(2)]
    outs = simulate(multicore.all_reduce[2], world=World(ranks=2))(per_rank(xs), ReplicaGroup([[0, 1]]))
    for out in outs:
        np.testing.assert_allclose(out, xs[0] + xs[1], rtol=1e-5)
    assert len(multicore.all_reduce.last_run.results) == 4


def test_collective_on_a_rank_outside_the_launch_is_reported(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    with pytest.raises(InvalidArgumentError, match="launched on 2 rank"):
        simulate(multicore.all_reduce, world=World(ranks=2))(x, ReplicaGroup([[0, 1, 2]]))


def test_mismatched_sendrecv_deadlocks_with_a_clear_error(rng):
    from trnsim.nki.current import isa as nisa
    from trnsim.nki.current import jit
    from trnsim.nki.current import language as nl

    @jit(platform_target="trn2")
    def lopsided(x):
        t = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        if nl.program_id(0) == 0:
            nisa.core_barrier(data=x, cores=(0, 1))
        out = nl.ndarray((128, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out

    with pytest.raises(TrnsimError, match=r"deadlock.*core 1 \(finished\)"):
        lopsided[2](rng.standard_normal((128, 8)).astype(np.float32))


def test_timing_only_collective_has_the_functional_timeline(rng):
    from trnsim.nki import typing as nt

    group = ReplicaGroup([[0, 1, 2, 3]])
    world = World(ranks=4, ranks_per_chip=1)
    multicore.all_reduce.run((nt.tensor[[128, 256], "float32"], group), {}, mode="timing", world=world)
    timing = [r.profile.total_ns for r in multicore.all_reduce.last_run.results]
    xs = [rng.standard_normal((128, 256)).astype(np.float32) for _ in range(4)]
    simulate(multicore.all_reduce, world=world)(per_rank(xs), group)
    functional = [r.profile.total_ns for r in multicore.all_reduce.last_run.results]
    assert timing == functional
