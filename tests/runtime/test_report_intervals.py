"""The report's interval helpers (how much of a run TensorE and DMA were busy) and its grouping
of records by kernel: vectorised, and equal bit for bit to plain loops over the intervals and
instructions (ties, nested, touching and zero-length intervals included)."""

from types import SimpleNamespace

import numpy as np

from trnsim.runtime.report import _kernel_of_instructions, _length, _subtract
from trnsim.sim.profile import merged_intervals as _union


def _merged(starts, ends):
    """The union by a plain walk over the intervals sorted by start."""
    out: list[list[float]] = []
    for s, e in sorted(zip(starts.tolist(), ends.tolist(), strict=True)):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(a, b) for a, b in out]


def _walk_subtract(a, b):
    """`a` minus `b` (lists of sorted disjoint intervals) by a walk over both."""
    out, j = [], 0
    for start, end in a:
        cursor = start
        while j < len(b) and b[j][1] <= cursor:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            if b[k][0] > cursor:
                out.append((cursor, b[k][0]))
            cursor = max(cursor, b[k][1])
            k += 1
        if cursor < end:
            out.append((cursor, end))
    return out


def _pairs(intervals):
    return list(zip(intervals[0].tolist(), intervals[1].tolist(), strict=True))


def _random(rng, n):
    starts = np.round(rng.uniform(0, 500, n), int(rng.integers(0, 2)))  # rounding: ties
    return starts, starts + np.round(rng.exponential(5, n), int(rng.integers(0, 2)))


def test_union_is_the_merge_of_sorted_intervals():
    rng = np.random.default_rng(0)
    for _ in range(200):
        starts, ends = _random(rng, int(rng.integers(0, 200)))
        assert _pairs(_union(starts, ends)) == _merged(starts, ends)
    assert _pairs(_union(np.zeros(0), np.zeros(0))) == []


def test_difference_equals_a_walk_over_both_and_lengths_add_in_order():
    rng = np.random.default_rng(1)
    for _ in range(300):
        a = _union(*_random(rng, int(rng.integers(0, 80))))
        b = _union(*_random(rng, int(rng.integers(0, 80))))
        expected = _walk_subtract(_pairs(a), _pairs(b))
        assert _pairs(_subtract(a, b)) == expected
        assert _length(_subtract(a, b)) == sum(e - s for s, e in expected)


def test_busy_length_and_difference():
    tensor = _union(np.array([0.0, 1.0, 5.0, 5.5]), np.array([2.0, 3.0, 6.0, 5.7]))
    assert _pairs(tensor) == [(0.0, 3.0), (5.0, 6.0)] and _length(tensor) == 4.0
    dma = _union(np.array([2.0, 7.0]), np.array([5.5, 8.0]))
    assert _pairs(_subtract(dma, tensor)) == [(3.0, 5.0), (7.0, 8.0)]


def test_kernel_of_each_instruction_is_found_once_a_run():
    rng = np.random.default_rng(2)
    labels = [f"k.op:{int(v)}" for v in rng.integers(0, 6, 40) for _ in range(int(rng.integers(1, 4)))]
    instructions = [SimpleNamespace(label=label, source=f"line {i}") for i, label in enumerate(labels)]
    codes: dict[str, int] = {}
    expected = [codes.setdefault(ins.label, len(codes)) for ins in instructions]
    by_pc, names, sources = _kernel_of_instructions(instructions)
    assert by_pc.tolist() == expected and names == list(codes)
    assert sources == {ins.label: ins.source for ins in instructions}
    assert _kernel_of_instructions([])[1] == []
    # spans of one label (replayed calls, `isa.Repeats`) are taken whole: the same answer
    spans, at = [], 0
    while True:
        at += int(rng.integers(0, 5))
        end = at
        while end < len(labels) and labels[end] == labels[at]:
            end += 1
        if end >= len(labels):
            break
        length = int(rng.integers(1, end - at + 1))
        spans.append((at, length, 0, ()))
        at += length
    assert len(spans) > 5
    found = _kernel_of_instructions(instructions, spans)
    assert (found[0].tolist(), found[1:]) == (expected, (names, sources))


def test_bound_fractions_equal_unions_of_masked_records():
    """`bound_fractions` takes the profile's kept unions of TensorE's and the DMA queues'
    streams: the same as the union of their records picked out by a mask."""
    from tests.sim.test_profile_streams import _profile
    from trnsim.runtime.report import bound_fractions
    from trnsim.sim.engines import DMA_BASE, engine_name

    rng = np.random.default_rng(4)
    for trial in range(100):
        profile = _profile(rng, int(rng.integers(1, 300)), backwards=trial % 4 == 0)
        is_tensor = np.array([engine_name(int(c)) == "tensor" for c in profile.stream], bool)
        is_dma = profile.stream >= DMA_BASE
        tensor = _union(profile.start_ns[is_tensor], profile.end_ns[is_tensor])
        dma_only = _length(_subtract(_union(profile.start_ns[is_dma], profile.end_ns[is_dma]),
                                     tensor))
        total = profile.total_ns
        assert bound_fractions(profile) == {
            "tensor": _length(tensor) / total, "dma": dma_only / total,
            "other": max(0.0, 1.0 - (_length(tensor) + dma_only) / total)}
