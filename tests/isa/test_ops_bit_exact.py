"""The float64 activations (GELU, its derivative, erf) run in cache-sized chunks; their bits must
be those of the whole-tile formula they replaced, kept here as the reference. NaN is compared as
NaN: which operand's NaN an x86 add propagates (its sign and payload) depends on numpy's SIMD
loop and the array length even within the reference, and trnsim does not model NaN payloads."""

import numpy as np
import pytest

from trnsim.isa import ops
from trnsim.isa.ops import ACTIVATIONS

_COEFFS = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807,
           -1.13520398, 1.48851587, -0.82215223, 0.17087277)


def _erfc64_reference(z):
    az = np.abs(z)
    t = 1.0 / (1.0 + 0.5 * az)
    poly = t * _COEFFS[-1]
    for c in _COEFFS[-2:0:-1]:
        poly = (poly + c) * t
    poly = poly + _COEFFS[0] - np.square(az)
    with np.errstate(over="ignore", under="ignore"):
        poly = np.exp(poly) * t
    return np.where(z >= 0, poly, 2.0 - poly)


def _gelu_reference(x):
    x64 = x.astype(np.float64)
    return (0.5 * x64 * _erfc64_reference(-x64 / np.sqrt(2.0))).astype(np.float32)


def _gelu_dx_reference(x):
    x64 = x.astype(np.float64)
    cdf = 0.5 * _erfc64_reference(-x64 / np.sqrt(2.0))
    pdf = np.exp(-0.5 * x64 * x64) / np.sqrt(2.0 * np.pi)
    return (cdf + x64 * pdf).astype(np.float32)


def _erf_reference(x):
    x = x.astype(np.float64)
    x2 = x * x
    series = x * (1 + x2 * (-1 / 3 + x2 * (1 / 10 + x2 * (-1 / 42 + x2 * (1 / 216 + x2 * (-1 / 1320
                                                                              + x2 / 9360))))))
    series *= 2 / np.sqrt(np.pi)
    return np.where(np.abs(x) < 0.5, series, 1.0 - _erfc64_reference(x)).astype(np.float32)


def assert_same_bits(got, want):
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


def _float32_sample() -> np.ndarray:
    """Every 997th float32 bit pattern (all signs, exponents, NaNs, subnormals), the special
    values, and a dense normal sample where the activations curve; an odd length so the last
    chunk is partial."""
    patterns = np.arange(0, 1 << 32, 997, dtype=np.uint64).astype(np.uint32).view(np.float32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45,
                         np.finfo(np.float32).max, -np.finfo(np.float32).max,
                         np.finfo(np.float32).tiny, 5.9, -5.9, 10.0, -10.0, 0.5, -0.5], np.float32)
    dense = np.random.default_rng(3).standard_normal(300_001).astype(np.float32) * 4
    return np.concatenate([patterns, specials, dense])


@pytest.mark.parametrize("name,reference", [("gelu", _gelu_reference),
                                            ("gelu_dx", _gelu_dx_reference),
                                            ("erf", _erf_reference)])
def test_chunked_activation_is_bit_identical_to_the_whole_tile_formula(name, reference):
    x = _float32_sample()
    assert x.size > 4 * ops._CHUNK and x.size % ops._CHUNK
    with np.errstate(all="ignore"):
        want = reference(x)
        got = ACTIVATIONS[name](x)
        tile = ACTIVATIONS[name](x[: 128 * 4096].reshape(128, 4096)[:, ::3])  # strided 2-D view
        small = ACTIVATIONS[name](x[:100])
        fortran = x[: 512 * 300].reshape(512, 300).T  # an F-ordered tile: the result keeps it
        want_f = reference(fortran)
        got_f = ACTIVATIONS[name](fortran)
    assert_same_bits(got, want)
    assert_same_bits(tile, want[: 128 * 4096].reshape(128, 4096)[:, ::3])
    assert_same_bits(small, want[:100])
    assert_same_bits(got_f, want_f)
    assert got_f.strides == want_f.strides == (4, 1200)
    assert got.dtype == np.float32 and tile.shape == (128, 1366)
