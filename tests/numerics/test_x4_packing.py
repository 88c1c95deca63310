"""x4-packed MX storage: element order, round trips, cast integration and the MX block scale."""

from __future__ import annotations

import math
import sys

import ml_dtypes
import numpy as np
import pytest

from tests.numerics.bitref import E4M3FN, encode
from trnsim.errors import InvalidArgumentError
from trnsim.numerics import CounterRNG, cast, mx_max_exponent, mx_scale, pack_x4, to_compute, unpack_x4


def test_fp8_element_j_sits_in_bits_8j():
    values = np.array([1.0, 2.0, -0.5, 448.0], dtype=np.float32)
    item = int(cast(values, "float8_e4m3fn_x4", "rne")[0])
    codes = encode(values, E4M3FN)
    assert item == sum(int(c) << (8 * j) for j, c in enumerate(codes))


def test_fp4_element_j_sits_in_bits_4j():
    values = np.array([0.5, 1.0, -6.0, 3.0], dtype=np.float32)
    item = int(cast(values, "float4_e2m1fn_x4", "rne")[0])
    # e2m1 codes (sign, 2 exponent bits, 1 mantissa bit): 0.5=0b0001 1.0=0b0010 -6=0b1111 3=0b0101
    assert item == 0b0001 | 0b0010 << 4 | 0b1111 << 8 | 0b0101 << 12


@pytest.mark.skipif(sys.byteorder != "little", reason="NKI's reference packs by memory view")
def test_matches_nkis_reference_packing_on_little_endian_hosts():
    values = np.random.default_rng(1).standard_normal((8, 32)).astype(np.float32)
    elements = values.astype(ml_dtypes.float8_e5m2)
    assert np.array_equal(pack_x4(elements, "float8_e5m2_x4"), elements.view(np.uint32))
    fp4 = (values * 2).astype(ml_dtypes.float4_e2m1fn)
    raw = fp4.view(np.uint8).reshape(8, 16, 2)
    nki_bytes = (raw[..., 0] & 0xF) | ((raw[..., 1] & 0xF) << 4)  # two fp4 per byte, low first
    assert np.array_equal(pack_x4(fp4, "float4_e2m1fn_x4").view(np.uint8), nki_bytes.reshape(8, 16))


@pytest.mark.parametrize("name, element", [("float8_e4m3fn_x4", ml_dtypes.float8_e4m3fn),
                                           ("float8_e5m2_x4", ml_dtypes.float8_e5m2),
                                           ("float4_e2m1fn_x4", ml_dtypes.float4_e2m1fn)])
def test_pack_unpack_round_trip_over_every_code(name, element):
    bits = 4 if "float4" in name else 8
    codes = np.arange(1 << bits, dtype=np.uint8)
    values = np.tile(codes, 4).view(element).reshape(4, -1)
    packed = pack_x4(values, name)
    assert packed.shape == (4, values.shape[1] // 4)
    assert np.array_equal(unpack_x4(packed, name).view(np.uint8), values.view(np.uint8))


def test_cast_to_and_from_x4():
    x = np.random.default_rng(2).uniform(-400, 400, (16, 64)).astype(np.float32)
    packed = cast(x, "float8_e4m3fn_x4", "rne")
    assert packed.dtype == np.uint32 and packed.shape == (16, 16)
    widened = to_compute(packed, "float8_e4m3fn_x4")
    assert widened.shape == x.shape and widened.dtype == np.float32
    assert np.array_equal(widened, cast(x, "float8_e4m3fn", "rne").astype(np.float32))
    # x4 -> bf16 through `source`, and x4 -> same x4 storage is returned untouched
    as_bf16 = cast(packed, "bfloat16", source="float8_e4m3fn_x4")
    assert np.array_equal(as_bf16.astype(np.float32), widened)
    assert cast(packed, "float8_e4m3fn_x4") is packed


def test_x4_needs_a_multiple_of_four():
    with pytest.raises(InvalidArgumentError, match="multiple of 4"):
        cast(np.ones((2, 6), np.float32), "float8_e5m2_x4")
    with pytest.raises(InvalidArgumentError, match="x4"):
        pack_x4(np.ones(4, ml_dtypes.bfloat16), "bfloat16")
    with pytest.raises(InvalidArgumentError, match="float8_e5m2"):
        pack_x4(np.ones(4, np.float32), "float8_e5m2_x4")


def test_x4_cast_with_stochastic_rounding_rounds_elements():
    x = np.full((4, 4096), 1.1, dtype=np.float32)
    values = to_compute(cast(x, "float8_e5m2_x4", "stochastic", CounterRNG(3)), "float8_e5m2_x4")
    assert set(np.unique(values).tolist()) == {1.0, 1.25}
    assert abs(values.mean() - np.float32(1.1)) < 0.01


@pytest.mark.parametrize("element, emax", [("float8_e4m3fn", 8), ("float8_e5m2", 15),
                                           ("float4_e2m1fn", 2), ("float8_e4m3fn_x4", 8)])
def test_mx_max_exponent(element, emax):
    assert mx_max_exponent(element) == emax


def test_mx_scale_follows_quantize_mx():
    amax = np.array([1.0, 448.0, 500.0, 3e-3, 0.0, 2.0 ** -130, 3e38], dtype=np.float32)
    got = mx_scale(amax, "float8_e4m3fn")
    assert got.dtype == ml_dtypes.float8_e8m0fnu
    for a, scale in zip(amax.tolist(), got.astype(np.float64).tolist(), strict=True):
        if a == 0:
            assert scale == 2.0 ** -127
            continue
        _, exponent = math.frexp(a)
        expected = max(min(exponent - 1 - (8 - 1), 127), -127)
        assert scale == 2.0 ** expected
        if -127 < expected < 127:  # the group's largest value lands in [2^(Emax-1), 2^Emax)
            assert 2 ** 7 <= a / scale < 2 ** 8 < 448
