"""Shared resources the scheduler books time on: rates (DMA engines, HBM) and exclusive ports.

Both are booked in program order and never revised: a later instruction takes what earlier ones
left, filling gaps ("backfilling") where it fits. That keeps list scheduling exact for a
first-come-first-served arbiter, deterministic, and cheap.

`RateTimeline` is a piecewise-constant use of a capacity over time (a core's 16 DMA engines, or
a chip's HBM bytes/ns). `reserve()` places an amount of work no earlier than a start time at the
highest rate the transfer and the timelines allow, then books it.

`BusyIntervals` is an exclusive resource (the NeuronCore-v2 SBUF port that VectorE and GpSimd
cannot use at once): an instruction takes the earliest gap long enough for it.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from math import inf


class RateTimeline:
    """Use of a capacity over time: ``used[i]`` holds on ``[times[i], times[i+1])``."""

    __slots__ = ("capacity", "eps", "times", "used")

    def __init__(self, capacity: float) -> None:
        self.capacity = float(capacity)
        self.eps = self.capacity * 1e-9
        self.times = [0.0]
        self.used = [0.0]

    def segment(self, t: float) -> int:
        return max(bisect_right(self.times, t) - 1, 0)

    def used_at(self, t: float) -> float:
        return self.used[self.segment(t)]

    def add(self, start: float, end: float, amount: float) -> None:
        if end <= start:
            return
        i = self._cut(start)
        j = self._cut(end)
        used = self.used
        for k in range(i, j):
            used[k] += amount
        self._merge(j)
        self._merge(i)

    def prune(self, horizon: float) -> None:
        """Forget the past before `horizon`: no booking will start earlier."""
        i = bisect_right(self.times, horizon) - 1
        if i > 0:
            del self.times[:i]
            del self.used[:i]

    def _cut(self, t: float) -> int:
        times = self.times
        i = bisect_left(times, t)
        if i < len(times) and times[i] == t:
            return i
        times.insert(i, t)
        self.used.insert(i, self.used[i - 1] if i else 0.0)
        return i

    def _merge(self, i: int) -> None:
        if 0 < i < len(self.times) and abs(self.used[i] - self.used[i - 1]) <= self.eps:
            del self.times[i]
            del self.used[i]


def reserve(t0: float, work: float, max_rate: float, pool: RateTimeline,
            shared: RateTimeline | None = None, shared_per_work: float = 0.0) -> float:
    """Book `work` units on `pool` from `t0` at rate <= max_rate, and the same transfer's
    ``shared_per_work`` units per unit of work on `shared` (e.g. HBM bytes per engine-ns).
    Returns the finish time."""
    pieces = reserve_pieces(t0, work, max_rate, pool, shared, shared_per_work)
    return pieces[-1][1] if pieces else t0


def reserve_pieces(t0: float, work: float, max_rate: float, pool: RateTimeline,
                   shared: RateTimeline | None = None, shared_per_work: float = 0.0
                   ) -> list[tuple[float, float, float]]:
    """`reserve`, returning what it booked: (start, end, rate) pieces in time order, the rate
    constant within each (none when there is no work)."""
    if work <= 0:
        return []
    if shared is not None and shared_per_work <= 0:
        shared = None
    pieces: list[tuple[float, float, float]] = []
    t = t0
    ptimes, pused = pool.times, pool.used
    i = pool.segment(t)
    j = shared.segment(t) if shared is not None else 0
    floor = max_rate * 1e-9
    while True:
        rate = min(max_rate, pool.capacity - pused[i])
        following = ptimes[i + 1] if i + 1 < len(ptimes) else inf
        if shared is not None:
            rate = min(rate, (shared.capacity - shared.used[j]) / shared_per_work)
            if j + 1 < len(shared.times):
                following = min(following, shared.times[j + 1])
        if rate > floor:
            finish = t + work / rate
            if finish <= following:
                pieces.append((t, finish, rate))
                t = finish
                break
            work -= rate * (following - t)
            pieces.append((t, following, rate))
        t = following
        if i + 1 < len(ptimes) and ptimes[i + 1] <= t:
            i += 1
        if shared is not None and j + 1 < len(shared.times) and shared.times[j + 1] <= t:
            j += 1
    for start, end, rate in pieces:
        pool.add(start, end, rate)
        if shared is not None:
            shared.add(start, end, rate * shared_per_work)
    return pieces


class BusyIntervals:
    """Non-overlapping busy intervals of an exclusive resource, sorted by start."""

    __slots__ = ("ends", "starts")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def earliest(self, t: float, duration: float) -> float:
        """The earliest time >= t at which [time, time + duration) is free."""
        starts, ends = self.starts, self.ends
        k = bisect_right(ends, t)  # intervals are disjoint and sorted: ends are sorted too
        while k < len(starts):
            if starts[k] >= t + duration:
                return t
            if ends[k] > t:
                t = ends[k]
            k += 1
        return t

    def book(self, start: float, end: float) -> None:
        if end <= start:
            return
        k = bisect_left(self.starts, start)
        self.starts.insert(k, start)
        self.ends.insert(k, end)

    def prune(self, horizon: float) -> None:
        k = bisect_right(self.ends, horizon)
        if k:
            del self.starts[:k]
            del self.ends[:k]

