"""The summary's per-stream grouping and busy-interval unions (one sort of the stream codes; an
engine's union merged from its streams' unions) equal a mask over every record per stream, bit
for bit: ties, nested, touching, zero-length and (falling back) backwards intervals included."""

from collections import defaultdict

import numpy as np

from trnsim import hardware
from trnsim.sim.engines import DMA_BASE, engine_name, stream_name
from trnsim.sim.profile import (
    Profile,
    _cause_name,
    indices_by_code,
    merged_intervals,
    summarise,
    wait_gaps,
)

STREAMS = [0, 1, 2, 3, 4, DMA_BASE, DMA_BASE + 1, DMA_BASE + 5]


def _profile(rng, records: int, backwards: bool = False, rounded: bool = True) -> Profile:
    """A profile's columns drawn at random (rounded: many ties and touching intervals)."""
    profile = Profile.__new__(Profile)
    profile.start_ns = rng.uniform(0, 400 if rounded else 8 * records, records)
    lengths = rng.exponential(4, records)
    if rounded:
        decimals = int(rng.integers(0, 2))
        profile.start_ns, lengths = np.round(profile.start_ns, decimals), np.round(lengths, decimals)
    if backwards and records:
        lengths[rng.integers(0, records)] = -3.0
    profile.end_ns = profile.start_ns + lengths
    profile.done_ns = profile.end_ns + rng.uniform(0, 2, records)
    profile.stream = rng.choice(STREAMS, records).astype(np.int32)
    profile.cause = rng.choice([-3, -2, -1, 0, 1, 2], records).astype(np.int32)
    profile.nbytes = rng.integers(0, 1 << 20, records)
    profile.flops = rng.integers(0, 1 << 30, records)
    profile.hbm_read = rng.integers(0, 1 << 20, records)
    profile.hbm_write = rng.integers(0, 1 << 20, records)
    profile.flops_by_precision = {"bf16": int(profile.flops.sum())}
    profile.core = hardware.core("v2")
    profile.sbuf_peak_bytes_per_partition = profile.psum_peak_bytes_per_partition = 0
    return profile


def _union_by_mask(profile, codes):
    mask = np.isin(profile.stream, codes)
    return merged_intervals(profile.start_ns[mask], profile.end_ns[mask])


def _reference_figures(profile) -> dict:
    """Each stream's active time and waits, each engine's active time and DMA's, by masks."""
    out = {}
    codes = sorted(int(c) for c in np.unique(profile.stream))
    for code in codes:
        index = np.flatnonzero(profile.stream == code)
        gaps = wait_gaps(profile.start_ns[index], profile.end_ns[index])
        causes = profile.cause[index]
        waits: dict[str, float] = defaultdict(float)
        for cause in np.unique(causes):
            waited = float(gaps[causes == cause].sum())
            if waited > 0:
                waits[_cause_name(int(cause))] += waited
        starts, ends = _union_by_mask(profile, [code])
        out[stream_name(code)] = (float(np.sum(ends - starts)), dict(waits))
    for engine in {engine_name(c) for c in codes}:
        starts, ends = _union_by_mask(profile, [c for c in codes if engine_name(c) == engine])
        out[engine] = float(np.sum(ends - starts))
    starts, ends = _union_by_mask(profile, [c for c in codes if c >= DMA_BASE])
    out["dma_active"] = float(np.sum(ends - starts))
    return out


def _figures(profile) -> dict:
    summary = summarise(profile)
    out = {name: (s.active_ns, s.waiting_ns) for name, s in summary.streams.items()}
    out.update(summary.engine_active_ns)
    out["dma_active"] = summary.dma_active_ns
    return out


def test_records_of_each_stream_equal_a_mask():
    rng = np.random.default_rng(0)
    for _ in range(50):
        codes = rng.choice([-40000, -5, 0, 3, 7, 40000], int(rng.integers(0, 300))).astype(np.int32)
        groups = indices_by_code(codes)
        assert list(groups) == sorted(int(c) for c in np.unique(codes))
        for code, index in groups.items():
            assert np.array_equal(index, np.flatnonzero(codes == code))


def test_unions_of_stream_unions_equal_the_union_of_the_records():
    rng = np.random.default_rng(1)
    for trial in range(200):
        profile = _profile(rng, int(rng.integers(0, 300)), backwards=trial % 5 == 0)
        for codes in ([0, 1], [DMA_BASE, DMA_BASE + 1, DMA_BASE + 5], STREAMS, [2], []):
            got, want = profile.busy_intervals(codes), _union_by_mask(profile, codes)
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_summary_figures_equal_masks_over_every_record():
    rng = np.random.default_rng(2)
    for trial in range(100):
        profile = _profile(rng, int(rng.integers(1, 400)), backwards=trial % 4 == 0)
        assert _figures(profile) == _reference_figures(profile)
    for _ in range(3):  # long streams of unrounded times: sums in numpy's pairwise order
        profile = _profile(rng, 20000, rounded=False)
        assert _figures(profile) == _reference_figures(profile)


def _merged_by_sorting(starts, ends):
    """The union by a stable sort of the starts and a maximum per segment (no shortcut)."""
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    opens = np.concatenate([[True], s[1:] > np.maximum.accumulate(e)[:-1]])
    first = np.flatnonzero(opens)
    return s[first], np.maximum.reduceat(e, first)


def test_intervals_in_order_of_start_merge_as_sorted_ones():
    """An in-order stream's intervals skip the sort (and, none backwards, the per-segment
    maximum): the same segments bit for bit, with the running maximum given or not."""
    rng = np.random.default_rng(3)
    for trial in range(300):
        n = int(rng.integers(1, 200))
        starts = np.sort(np.round(rng.uniform(0, 300, n), int(rng.integers(0, 2))))
        ends = starts + np.round(rng.exponential(4, n), int(rng.integers(0, 2)))
        if trial % 3 == 0:
            ends[rng.integers(0, n)] -= 10.0  # backwards
        want = _merged_by_sorting(starts, ends)
        for reach in (None, np.maximum.accumulate(ends)):
            got = merged_intervals(starts, ends, reach)
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
