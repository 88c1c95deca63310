"""CounterRNG is Philox4x32-10: published known answers, seekable, chunking-independent."""

from __future__ import annotations

import numpy as np
import pytest

from trnsim.errors import InvalidArgumentError
from trnsim.numerics import CounterRNG
from trnsim.numerics.random import philox4x32

# Known-answer vectors of the Random123 distribution (kat_vectors, philox4x32 with 10 rounds):
# counter, key -> output.
KNOWN_ANSWERS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("counter, key, expected", KNOWN_ANSWERS)
def test_philox_known_answers(counter, key, expected):
    lanes = tuple(np.array([c], dtype=np.uint32) for c in counter)
    assert tuple(int(lane[0]) for lane in philox4x32(lanes, key)) == expected


def _block_words(seed: int, stream: int, block: int) -> list[int]:
    """The 4 words of one counter block, computed directly from the documented layout."""
    lanes = tuple(np.array([v], dtype=np.uint32) for v in (
        block & 0xFFFFFFFF, block >> 32, stream & 0xFFFFFFFF, stream >> 32))
    return [int(lane[0]) for lane in philox4x32(lanes, (seed & 0xFFFFFFFF, seed >> 32))]


@pytest.mark.parametrize("seed, stream, start", [(0, 0, 0), (7, 3, 10), (2 ** 40 + 5, 2 ** 35, 99),
                                                 (1, 0, 4 * (2 ** 32 - 1) - 2)])
def test_words_follow_the_documented_counter_layout(seed, stream, start):
    rng = CounterRNG(seed, stream)
    got = rng.words_at(start, 12).tolist()
    first = start // 4
    expected = []
    for block in range(first, first + 5):
        expected += _block_words(seed, stream, block)
    offset = start - 4 * first
    assert got == expected[offset:offset + 12]


def test_draws_are_independent_of_how_they_are_split():
    whole = CounterRNG(11).bits32(600_001)
    rng = CounterRNG(11)
    parts = [rng.bits32(n) for n in (1, 3, 262_143, 5, 337_849)]
    assert np.array_equal(np.concatenate(parts), whole)
    assert rng.position == 600_001


def test_seek_and_position():
    rng = CounterRNG(3)
    first = rng.bits32(10)
    rng.seek(4)
    assert rng.position == 4
    assert np.array_equal(rng.bits32(6), first[4:])


def test_uniform_is_in_unit_interval_and_roughly_flat():
    u = CounterRNG(5).uniform(400_000)
    assert u.dtype == np.float32
    assert u.min() >= 0.0 and u.max() < 1.0
    counts = np.bincount((u * 16).astype(int), minlength=16)
    expected = u.size / 16
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 50  # 15 degrees of freedom: p < 1e-5 beyond this


def test_every_bit_is_balanced():
    words = CounterRNG(8).bits32(200_000)
    ones = np.array([((words >> np.uint32(b)) & np.uint32(1)).mean() for b in range(32)])
    assert np.all(np.abs(ones - 0.5) < 0.01)


@pytest.mark.parametrize("kwargs", [{"seed": -1}, {"seed": 2 ** 64}, {"seed": 1.5},
                                    {"seed": 0, "stream": -2}, {"seed": True}])
def test_bad_seeds_are_rejected(kwargs):
    with pytest.raises(InvalidArgumentError):
        CounterRNG(**kwargs)


def test_negative_draws_and_positions_are_rejected():
    with pytest.raises(InvalidArgumentError):
        CounterRNG(0).bits32(-1)
    with pytest.raises(InvalidArgumentError):
        CounterRNG(0).seek(-5)


def test_cached_small_draws_equal_direct_computation():
    rng = CounterRNG(21, stream=4)
    whole = CounterRNG(21, stream=4).words_at(0, 300_000)
    for start, n in [(100, 10), (50, 10), (70_000, 3), (131_071, 9), (3, 1), (299_990, 10)]:
        assert np.array_equal(rng.words_at(start, n), whole[start:start + n]), (start, n)
