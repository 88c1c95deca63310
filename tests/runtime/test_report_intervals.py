"""The report's interval helpers (how much of a run TensorE and DMA were busy): the union of
intervals equals a plain merge of sorted intervals exactly, ties and nested intervals included."""

import numpy as np

from trnsim.runtime.report import _length, _subtract, _union


def _merged(starts, ends):
    """The union by a plain walk over the intervals sorted by start."""
    out: list[list[float]] = []
    for s, e in sorted(zip(starts.tolist(), ends.tolist(), strict=True)):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(a, b) for a, b in out]


def test_union_is_the_merge_of_sorted_intervals():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(0, 200))
        starts = np.round(rng.uniform(0, 500, n), int(rng.integers(0, 2)))  # rounding: ties
        ends = starts + np.round(rng.exponential(5, n), int(rng.integers(0, 2)))
        assert _union(starts, ends) == _merged(starts, ends)
    assert _union(np.zeros(0), np.zeros(0)) == []


def test_busy_length_and_difference():
    tensor = _union(np.array([0.0, 1.0, 5.0, 5.5]), np.array([2.0, 3.0, 6.0, 5.7]))
    assert tensor == [(0.0, 3.0), (5.0, 6.0)] and _length(tensor) == 4.0
    dma = _union(np.array([2.0, 7.0]), np.array([5.5, 8.0]))
    assert _subtract(dma, tensor) == [(3.0, 5.0), (7.0, 8.0)]
