"""RNE casts agree bit for bit with the independent integer reference (bitref.py).

Inputs: millions of random float32 bit patterns (every exponent, NaN, inf, subnormals), random
values concentrated on each format's own range, and every edge case: all representable values,
every exact halfway point and its float32 neighbours, signed zeros, inf, NaN, the largest finite
value, the overflow tie and beyond.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.numerics.bitref import (
    BF16,
    E4M3,
    E4M3FN,
    E5M2,
    FORMATS,
    FP16,
    TF32,
    Format,
    all_finite_values,
    decode,
    encode,
    midpoints,
    tf32_bits,
)
from trnsim.numerics import cast, round_tf32

RANDOM_PATTERNS = 2_000_000  # per format; with the ranged values, ~15M conversions in all


def _codes(result: np.ndarray) -> np.ndarray:
    return result.view(np.uint16 if result.itemsize == 2 else np.uint8).astype(np.int64)


def _random_patterns(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 1 << 32, n, dtype=np.uint32).view(np.float32)


def _ranged_values(fmt: Format, seed: int, n: int) -> np.ndarray:
    """Random fp32 values whose exponents span the format's subnormals to past its overflow."""
    rng = np.random.default_rng(seed)
    low = fmt.min_normal_exponent - fmt.mantissa_bits - 3
    high = (fmt.max_code >> fmt.mantissa_bits) - fmt.bias + 2
    exponent = rng.integers(low, high, n)
    fraction = rng.integers(0, 1 << 23, n)
    sign = rng.integers(0, 2, n)
    bits = (sign << 31) | (np.clip(exponent + 127, 0, 254) << 23) | fraction
    return bits.astype(np.uint32).view(np.float32)


def _edge_cases(fmt: Format) -> np.ndarray:
    mids = midpoints(fmt)
    exact = all_finite_values(fmt)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan,
                         np.finfo(np.float32).max, -np.finfo(np.float32).max,
                         np.finfo(np.float32).smallest_subnormal, np.finfo(np.float32).tiny,
                         1e30, -1e30], dtype=np.float32)
    return np.concatenate([exact, mids, np.nextafter(mids, np.float32(np.inf)),
                           np.nextafter(mids, np.float32(-np.inf)), specials])


def _assert_matches(x: np.ndarray, fmt: Format) -> None:
    got = cast(x, fmt.name, rounding="rne")
    expected = encode(x, fmt)
    got_codes = _codes(got)
    got_nan = np.isnan(got.astype(np.float32))
    assert np.array_equal(got_nan, np.isnan(decode(expected, fmt))), f"{fmt.name}: NaN placement"
    keep = ~got_nan
    bad = np.nonzero(got_codes[keep] != expected[keep])[0]
    if bad.size:
        i = bad[0]
        value = x[keep][i]
        raise AssertionError(f"{fmt.name}: {bad.size} mismatches; first {value!r} "
                             f"(bits {np.float32(value).view(np.uint32):#010x}) -> "
                             f"{got_codes[keep][i]:#x}, reference {expected[keep][i]:#x}")


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_random_bit_patterns(fmt):
    _assert_matches(_random_patterns(11, RANDOM_PATTERNS), fmt)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_values_across_the_formats_range(fmt):
    _assert_matches(_ranged_values(fmt, 12, 1_000_000), fmt)


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_edge_cases(fmt):
    _assert_matches(_edge_cases(fmt), fmt)


def test_halfway_values_go_to_even():
    # 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties to the even mantissa (1)
    x = np.array([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, -(1 + 2.0 ** -8)], dtype=np.float32)
    assert cast(x, "bfloat16", "rne").astype(np.float32).tolist() == [1.0, 1 + 2.0 ** -6, -1.0]


@pytest.mark.parametrize("name, big, result", [
    ("bfloat16", 3.4e38, np.inf), ("float16", 65520.0, np.inf), ("float16", 65519.0, 65504.0),
    ("float8_e4m3", 248.0, np.inf), ("float8_e4m3", 247.9, 240.0), ("float8_e5m2", 61440.0, np.inf),
    ("float8_e4m3fn", 464.0, 448.0), ("float8_e4m3fn", 465.0, np.nan),
])
def test_overflow_per_format(name, big, result):
    got = cast(np.array([big, -big], dtype=np.float32), name, "rne").astype(np.float32)
    if np.isnan(result):
        assert np.isnan(got).all()
    else:
        assert got.tolist() == [result, -result]


def test_subnormals_and_signed_zero_survive():
    x = np.array([2.0 ** -9, 2.0 ** -10, -(2.0 ** -11), -0.0], dtype=np.float32)
    got = cast(x, "float8_e4m3fn", "rne")
    assert got.astype(np.float32).tolist() == [2.0 ** -9, 0.0, -0.0, -0.0]
    assert np.signbit(got.astype(np.float32)).tolist() == [False, False, True, True]


def _tf32_expected(x: np.ndarray) -> np.ndarray:
    return tf32_bits(encode(x, TF32))


def test_tf32_matches_reference():
    x = np.concatenate([_random_patterns(13, 1_000_000), _ranged_values(TF32, 14, 500_000),
                        _edge_cases(BF16)])
    got = round_tf32(x).view(np.uint32)
    expected = _tf32_expected(x)
    finite = ~np.isnan(x)
    assert np.isnan(round_tf32(x)[~finite]).all()
    assert np.array_equal(got[finite], expected[finite])


def test_tf32_cast_keeps_float32_storage_and_10_bits():
    x = np.array([1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 1.0 + 2.0 ** -12], dtype=np.float32)
    got = cast(x, "tfloat32", "rne")
    assert got.dtype == np.float32
    assert got.tolist() == [1.0, 1 + 2.0 ** -9, 1.0]
    assert not (got.view(np.uint32) & 0x1FFF).any()


def test_narrow_sources_widen_exactly_then_round():
    x = _ranged_values(FP16, 15, 100_000)
    via_fp16 = cast(x, "float16", "rne")
    # fp16 -> e5m2 from the fp16 array must equal the reference applied to the fp16 values
    expected = encode(via_fp16.astype(np.float32), E5M2)
    got = _codes(cast(via_fp16, "float8_e5m2", "rne"))
    finite = ~np.isnan(via_fp16)
    assert np.array_equal(got[finite], expected[finite])


def test_float64_is_rounded_to_float32_first():
    # 1 + 2^-8 + 2^-40 rounds up directly to bf16, but the hardware only ever sees its fp32
    # rounding (1 + 2^-8, a tie) which goes to even: 1.0
    x = np.array([1 + 2.0 ** -8 + 2.0 ** -40])
    assert cast(x, "bfloat16", "rne").astype(np.float32)[0] == 1.0


def test_e4m3_is_the_ieee_like_format():
    assert float(cast(np.float32(240.0), E4M3.name).astype(np.float32)) == 240.0
    assert float(cast(np.float32(448.0), E4M3FN.name).astype(np.float32)) == 448.0
