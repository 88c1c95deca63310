"""Footprints: exact rectangles on chip and in HBM row bands; neighbour discovery."""

import random

import numpy as np
import pytest

from tests.sim.helpers import hbm_ap, sbuf_ap
from trnsim import hardware
from trnsim.sim.dependencies import Region, RegionIndex, _dense_pairs, _rectangle_pairs, _Space


def test_sbuf_rectangles_overlap_only_on_shared_bytes_and_partitions():
    index = RegionIndex(hardware.core("v2"))
    a = index.region(sbuf_ap(0, 64, (16,), "float32"))
    b = index.region(sbuf_ap(0, 64, (16,), "float32", start=64))  # other partitions
    c = index.region(sbuf_ap(64, 128, (16,), "float32"))  # next bytes
    d = index.region(sbuf_ap(32, 128, (16,), "float32"))  # straddles a and c
    assert b.uid not in a.neighbor_ids and c.uid not in a.neighbor_ids
    assert set(d.neighbor_ids) == {a.uid, b.uid, c.uid, d.uid}
    assert index.region(sbuf_ap(0, 64, (16,), "float32")) is a  # same footprint, same region


def test_hbm_blocks_of_one_row_band_are_independent():
    index = RegionIndex(hardware.core("v2"))
    left = index.region(hbm_ap("x", "bfloat16", 128, 8192, ((1, 512),)))
    right = index.region(hbm_ap("x", "bfloat16", 128, 8192, ((1, 512),), offset_elements=512))
    assert right.uid not in left.neighbor_ids
    flat = index.region(hbm_ap("x", "bfloat16", 1, 0, ((1, 600),)))  # row 0, columns 0..599, flat
    assert left.uid in flat.neighbor_ids and right.uid in flat.neighbor_ids
    other = index.region(hbm_ap("y", "bfloat16", 128, 8192, ((1, 512),)))
    assert other.neighbor_ids == [other.uid]


def test_vectorised_discovery_matches_pairwise_overlap():
    rng = random.Random(0)
    space = _Space()
    regions = []
    for _ in range(200):
        pitch = rng.choice([0, 64, 128])
        r0 = rng.randrange(0, 8)
        c0 = rng.randrange(0, 60)
        regions.append(space.get(pitch, r0, r0 + rng.randrange(1, 4), c0, c0 + rng.randrange(1, 20)))
    for region in regions:
        expected = {o.uid for o in regions if o.overlaps(region)}
        assert set(region.neighbor_ids) == expected


def test_region_overlap_falls_back_to_flat_spans_across_pitches():
    a = Region(64, 0, 2, 0, 8)  # bytes 0-7 and 64-71
    b = Region(32, 1, 2, 0, 8)  # bytes 32-39: inside a's flat span, not its bytes
    assert a.overlaps(b)  # conservative
    assert not Region(64, 0, 2, 0, 8).overlaps(Region(64, 0, 2, 8, 16))


def test_one_pitch_pairs_equal_every_pair_tested():
    # a space of one row pitch (SBUF's) takes the sorted-columns search: the same pairs, in
    # the same order, as testing every pair; narrow tiles, then a few wide ones among them
    rng = random.Random(2)
    for wide in (0, 3):
        rows = []
        for k in range(400):
            r0, c0 = rng.randrange(0, 120), rng.randrange(0, 4000)
            c1 = c0 + (rng.randrange(1, 3000) if k < wide else rng.randrange(1, 64))
            r1 = r0 + rng.randrange(1, 9)
            rows.append((512, r0, r1, c0, c1, r0 * 512 + c0, (r1 - 1) * 512 + c1))
        t = np.array(rows, dtype=np.int64)
        for first in (0, 150, 399):
            got, want = _rectangle_pairs(t, first, len(t)), _dense_pairs(t, first, len(t))
            assert first or len(want[0]) > 100  # (a test that can find pairs)
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def _linked_in_batches(monkeypatch, compiled_pairs: bool, pitches=(0, 64, 128, 128)) -> list:
    from trnsim.sim import compiled

    if not compiled_pairs:
        monkeypatch.setattr(compiled, "loaded", lambda name: None)
    else:
        assert compiled.kernel() is not None, "numba is part of the test extra"
    index = RegionIndex(hardware.core("v2"))
    space = _Space(owner=index)
    regions = {}
    rng = random.Random(1)
    for batch in (150, 300, 7):  # deferred batches after earlier ones, as programs are planned
        with index.deferred():
            index.hbm["t"] = space
            for _ in range(batch):
                pitch = rng.choice(pitches)
                r0, c0 = rng.randrange(0, 8), rng.randrange(0, 60)
                region = space.get(pitch, r0, r0 + rng.randrange(1, 4), c0, c0 + rng.randrange(1, 20))
                regions[region.uid] = region  # (a footprint met again is the same region)
    return list(regions.values())


@pytest.mark.parametrize("pitches", [(0, 64, 128, 128), (128,)])
@pytest.mark.parametrize("compiled_pairs", [False, True])
def test_deferred_linking_lists_neighbours_in_discovery_order(monkeypatch, compiled_pairs, pitches):
    regions = _linked_in_batches(monkeypatch, compiled_pairs, pitches)
    for region in regions:
        if region.empty:
            continue
        others = [o.uid for o in regions if o is not region and not o.empty and o.overlaps(region)]
        assert region.neighbor_ids == [region.uid, *sorted(others)]
