"""The timing model: closed forms, topology effects, contention, CC-cores, memory."""

import tracemalloc

import pytest

from trnsim.collectives import Collective, Fabric, iteration_time_ns, simulate
from trnsim.errors import InvalidArgumentError
from trnsim.hardware.fabric import TRAINIUM2_FABRIC, TRAINIUM_FABRIC

GIB = 2**30


def _time(instance, ranks, size, algorithm=None, nodes=1, op="all_reduce"):
    results, _ = simulate(op, size, ranks, instance, nodes, "float32", algorithm)
    return results[0]


@pytest.mark.parametrize("ranks", [2, 3, 5, 8, 32])
@pytest.mark.parametrize("size", [4096, 2**20, 2**28])
def test_ring_all_reduce_matches_its_closed_form(ranks, size):
    # trn1 ring: every rank's port (its cores' collective DMA path) is the bottleneck, so
    # T = launch + 2(r-1) hops + 2(r-1)/r * S / B (up to whole elements per chunk).
    spec = TRAINIUM_FABRIC
    closed = (spec.launch_latency_ns + 2 * (ranks - 1) * spec.hop_latency_ns
              + 2 * (ranks - 1) / ranks * size / spec.collective_bytes_per_s_per_core * 1e9)
    got = _time("trn1.32xlarge", ranks, size, "ring").duration_ns
    assert got == pytest.approx(closed, rel=1e-3)


def test_ring_all_reduce_on_ultraserver_is_bound_by_the_inter_server_links():
    # The snake ring crosses between servers once per server on one 128 GB/s link direction
    # (256 GB/s per chip over two ring links): below a rank's 2 x 77 GB/s port at LNC=2.
    ring = _time("trn2-ultraserver", 256, GIB, "ring").duration_ns
    port = TRAINIUM2_FABRIC.rank_port_bytes_per_s(2)
    port_bound = 2 * 255 / 256 * GIB / port * 1e9
    link_bound = 2 * 255 / 256 * GIB / 128e9 * 1e9
    fixed = TRAINIUM2_FABRIC.launch_latency_ns + 2 * 255 * TRAINIUM2_FABRIC.hop_latency_ns
    assert ring > fixed + port_bound * 1.1
    assert ring == pytest.approx(fixed + link_bound, rel=0.01)


def test_2d_torus_all_reduce_beats_a_single_ring_on_a_4x4_torus():
    # trn1.32xlarge: 16 chips in a 4x4 torus, 2 cores each. Same bytes per port; the torus
    # algorithm crosses 2 x (1 + 3 + 3) hops instead of 2 x 31.
    ring = _time("trn1.32xlarge", 32, GIB, "ring").duration_ns
    torus = _time("trn1.32xlarge", 32, GIB, "torus2d").duration_ns
    assert torus < ring
    assert ring - torus == pytest.approx(2 * (31 - 7) * TRAINIUM_FABRIC.hop_latency_ns, rel=0.05)
    # On the UltraServer's 4x4x4 torus the ring is link-bound and the torus phases are not.
    assert (_time("trn2-ultraserver", 256, GIB, "torus2d").duration_ns
            < 0.9 * _time("trn2-ultraserver", 256, GIB, "ring").duration_ns)


def test_two_concurrent_all_reduces_on_the_same_links_take_longer():
    request = Collective("all_reduce", 64 * 2**20, "float32", 32, "ring")
    alone = Fabric("trn1.32xlarge").run(request)
    both = Fabric("trn1.32xlarge").run_together([request, request])
    assert all(r.duration_ns > 1.8 * alone.duration_ns for r in both)
    # on disjoint cores (chips 0-3 and chips 4-7) they do not slow each other
    fabric = Fabric("trn1.32xlarge")
    first, second = (Collective("all_reduce", 64 * 2**20, "float32", tuple(range(a, a + 8)), "ring")
                     for a in (0, 8))
    apart = fabric.run_together([first, second])
    single = Fabric("trn1.32xlarge").run(first)
    assert [r.duration_ns for r in apart] == pytest.approx([single.duration_ns] * 2, rel=1e-6)


def test_cc_cores_limit_concurrent_collectives_on_a_chip():
    # Trainium has 6 CC-cores; a 2-rank collective on one chip holds 2, so 3 run at once and
    # the 4th starts when the first finishes. Each core's collectives are admitted in issue order,
    # at most one per issue interval.
    fabric = Fabric("trn1.32xlarge")
    runs = fabric.run_together([Collective("all_reduce", 2**26, "float32", 2, "ring")] * 4)
    interval = TRAINIUM_FABRIC.issue_interval_ns
    assert [r.start_ns for r in runs[:3]] == pytest.approx([0, interval, 2 * interval])
    assert runs[3].start_ns == pytest.approx(runs[0].end_ns)
    assert any(e.kind == "queued" for e in runs[3].events)


def test_back_to_back_small_collectives_are_paced_by_the_issue_interval():
    fabric = Fabric("trn1.32xlarge")
    request = Collective("all_reduce", 1024, "float32", 2)
    first = fabric.run(request)
    second = fabric.run(request, first.end_ns)
    # an empty collective costs about the floor, and the next one cannot come sooner than that
    assert first.duration_ns == pytest.approx(TRAINIUM_FABRIC.issue_interval_ns, rel=0.01)
    assert second.end_ns - first.end_ns >= TRAINIUM_FABRIC.issue_interval_ns


def test_multi_node_hierarchical_beats_a_flat_ring_over_efa():
    # A flat ring crosses each node boundary on one chip's EFA interface; hier spreads the
    # inter-node phase over every chip's interface and sends 1/Y of the data.
    hier = _time("trn1.32xlarge", 64, GIB, "hier", nodes=2)
    ring = _time("trn1.32xlarge", 64, GIB, "ring", nodes=2)
    assert hier.duration_ns * 3 < ring.duration_ns
    step_latencies = {round(e.duration_ns) for e in hier.events if e.kind == "step"}
    assert min(step_latencies) >= TRAINIUM_FABRIC.hop_latency_ns


def test_efa_steps_cost_efa_latency():
    tiny = _time("trn1.32xlarge", 2, 8, "ring", nodes=2)  # one rank per node
    assert tiny.duration_ns == pytest.approx(
        TRAINIUM_FABRIC.launch_latency_ns + 2 * TRAINIUM_FABRIC.efa_latency_ns, rel=1e-3)


def test_timeline_has_one_event_per_step_and_results_follow_each_other():
    results, timeline = simulate("all_gather", [2**20, 2**22], 8, "trn1.32xlarge", 1, "float32",
                                 "ring")
    for r in results:
        steps = [e for e in timeline.of(r.ticket) if e.kind == "step"]
        assert len(steps) == r.steps == 7
        assert steps[0].start_ns == pytest.approx(r.start_ns + TRAINIUM_FABRIC.launch_ns("all_gather"))
        assert steps[-1].end_ns == pytest.approx(r.end_ns)
        assert sum(e.nbytes for e in steps) == pytest.approx(8 * 7 * r.nbytes / 8, rel=1e-6)
    assert results[1].issue_ns == pytest.approx(results[0].end_ns)
    assert timeline.end_ns == pytest.approx(results[1].end_ns)


def test_timing_only_memory_does_not_grow_with_the_message():
    def peak(size):
        tracemalloc.start()
        simulate("all_reduce", size, 32, "trn1.32xlarge", 1, "float32", "ring")
        high = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return high

    small, huge = peak(2**20), peak(64 * GIB)
    assert huge < 2 * small + 2**20
    assert huge < 32 * 2**20


def test_issuing_in_the_past_is_refused():
    fabric = Fabric("trn1.32xlarge")
    fabric.run(Collective("all_reduce", 4096, "float32", 2), 1000.0)
    with pytest.raises(InvalidArgumentError, match="already at"):
        fabric.issue(Collective("all_reduce", 4096, "float32", 2), 0.0)


def test_lockstep_interface_lets_a_later_issue_slow_a_running_collective():
    request = Collective("all_reduce", 64 * 2**20, "float32", 32, "ring")
    alone = Fabric("trn1.32xlarge").run(request)
    fabric = Fabric("trn1.32xlarge")
    first = fabric.issue(request, 0.0)
    halfway = alone.end_ns / 2
    while fabric.next_event_ns() < halfway:
        fabric.advance_to(fabric.next_event_ns())
    fabric.advance_to(halfway)
    assert fabric.result(first) is None and fabric.now_ns == halfway
    second = fabric.issue(request, halfway)
    fabric.advance_to(10 * alone.end_ns)
    slowed, late = fabric.result(first), fabric.result(second)
    assert slowed.end_ns > 1.2 * alone.end_ns
    assert late.end_ns > halfway + alone.duration_ns
    assert fabric.next_event_ns() == float("inf")
    with pytest.raises(InvalidArgumentError, match="already at"):
        fabric.advance_to(0.0)


def test_copying_collectives_are_not_held_at_the_reduction_floor():
    fabric = Fabric("trn1.32xlarge")
    gather, _ = iteration_time_ns(fabric, Collective("all_gather", 1024, "float32", 8))
    reduce, _ = iteration_time_ns(fabric, Collective("all_reduce", 1024, "float32", 8))
    assert gather == pytest.approx(TRAINIUM_FABRIC.copy_issue_interval_ns, rel=0.05)
    assert reduce >= TRAINIUM_FABRIC.issue_interval_ns > 2 * gather


def test_kangaring_rings_the_chips_not_the_ranks():
    from trnsim.collectives import bus_factor

    fabric = Fabric("trn1.32xlarge")
    size = 512 * 2**20
    kanga, result = iteration_time_ns(fabric, Collective("all_reduce", size, "float32", 16,
                                                         algorithm="kangaring"))
    # 8 chips: a fused on-chip exchange, then 7 ring steps of primaries, each way
    hops = [s for s in fabric.idle_copy().run(Collective("all_reduce", 4096, "float32", 16,
                                                         algorithm="kangaring")).events
            if s.kind == "step" and s.nbytes > 0]
    assert len(hops) == 2 * 7
    two_rank, _ = iteration_time_ns(fabric, Collective("all_reduce", size, "float32", 2))
    busbw = bus_factor("all_reduce", 16) * size / kanga
    # two primaries per chip move data: bus bandwidth above the 2-rank (one core pair) figure
    assert busbw > 1.5 * bus_factor("all_reduce", 2) * size / two_rank
    assert result.algorithm == "kangaring"
