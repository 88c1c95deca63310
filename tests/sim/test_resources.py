"""Rate timelines (first come, first served with backfill) and exclusive ports."""

import pytest

from trnsim.sim.resources import BusyIntervals, RateTimeline, reserve


def test_reservations_share_a_capacity_first_come_first_served():
    pool = RateTimeline(16.0)
    assert reserve(0.0, 160.0, 16.0, pool) == pytest.approx(10.0)  # all 16 units for 10 ns
    assert reserve(0.0, 80.0, 8.0, pool) == pytest.approx(20.0)  # waits, then 8 units
    assert reserve(5.0, 40.0, 8.0, pool) == pytest.approx(15.0)  # the other 8 units from t=10
    assert pool.used_at(12.0) == pytest.approx(16.0)
    assert pool.used_at(25.0) == 0.0


def test_reservation_backfills_a_gap_and_continues_after():
    pool = RateTimeline(1.0)
    reserve(10.0, 10.0, 1.0, pool)  # busy [10, 20)
    assert reserve(0.0, 15.0, 1.0, pool) == pytest.approx(25.0)  # 10 before, 5 after


def test_a_shared_timeline_limits_the_rate():
    engines, hbm = RateTimeline(16.0), RateTimeline(50.0)  # 50 bytes/ns
    # 17 bytes per engine-ns: 16 engines would need 272 bytes/ns; HBM allows 50/17 engines
    end = reserve(0.0, 1700.0, 16.0, engines, hbm, 17.0)
    assert end == pytest.approx(1700.0 * 17.0 / 50.0)
    assert hbm.used_at(1.0) == pytest.approx(50.0)


def test_prune_keeps_the_future():
    pool = RateTimeline(1.0)
    for i in range(10):
        reserve(float(3 * i), 1.0, 1.0, pool)
    pool.prune(14.5)
    assert pool.times[0] <= 14.5
    assert pool.used_at(15.5) == 1.0 and pool.used_at(16.5) == 0.0


def test_busy_intervals_find_the_earliest_gap():
    port = BusyIntervals()
    port.book(10.0, 20.0)
    port.book(25.0, 30.0)
    assert port.earliest(0.0, 10.0) == 0.0
    assert port.earliest(5.0, 10.0) == 30.0
    assert port.earliest(12.0, 5.0) == 20.0
    port.prune(21.0)
    assert port.starts == [25.0]
