"""Float <-> integer and bool conversions, `to_compute`, and cast's no-copy and source rules."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from trnsim.errors import InvalidArgumentError
from trnsim.numerics import FLOAT_TO_INT, CounterRNG, cast, round_tf32, to_compute


@pytest.mark.parametrize("name, values, expected", [
    ("int8", [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999, 2.5001], [0, 2, 2, 0, -2, -2, 2, 3]),
    ("int8", [127.4, 127.5, 300.0, -128.5, -1e9, np.inf, -np.inf, np.nan],
     [127, 127, 127, -128, -128, 127, -128, 0]),
    ("uint8", [-1.0, -0.4, 255.5, 254.5, 1e20], [0, 0, 255, 254, 255]),
    ("int32", [2.0 ** 31, -(2.0 ** 31) - 1e3, 16777217.0, 3.5], [2 ** 31 - 1, -(2 ** 31), 16777216, 4]),
    ("uint32", [4.3e9, -3.0, 1e3 + 0.5], [2 ** 32 - 1, 0, 1000]),
    ("int16", [40000.0, -40000.0, 0.5], [32767, -32768, 0]),
])
def test_float_to_int_rounds_half_even_and_saturates(name, values, expected):
    got = cast(np.array(values, dtype=np.float32), name)
    assert got.dtype == np.dtype(name)
    assert got.tolist() == expected


def test_float_to_int_rule_is_stated():
    assert "even" in FLOAT_TO_INT and "saturate" in FLOAT_TO_INT and "NaN" in FLOAT_TO_INT


def test_narrow_float_sources_to_int():
    x = np.array([2.5, -3.5, 250.0], dtype=np.float32).astype(ml_dtypes.bfloat16)
    assert cast(x, "int8").tolist() == [2, -4, 127]


def test_int_to_int_saturates():
    x = np.array([-300, -1, 0, 200, 70000], dtype=np.int32)
    assert cast(x, "int8").tolist() == [-128, -1, 0, 127, 127]
    assert cast(x, "uint8").tolist() == [0, 0, 0, 200, 255]
    assert cast(np.array([2 ** 63], dtype=np.uint64), "int32").tolist() == [2 ** 31 - 1]
    assert cast(np.array([-(2 ** 40), 2 ** 40], dtype=np.int64), "uint32").tolist() == [0, 2 ** 32 - 1]


def test_int_to_float_goes_through_fp32_like_the_engines():
    # 2^24 + 1 is not an fp32: the engine sees 2^24; 2^24 + 3 -> 2^24 + 4
    x = np.array([2 ** 24 + 1, 2 ** 24 + 3, -7], dtype=np.int32)
    assert cast(x, "float32").tolist() == [2.0 ** 24, 2.0 ** 24 + 4, -7.0]
    # int32 -> bf16 rounds twice (to fp32, then to bf16): 2^24+2^16+1 -> fp32 2^24+2^16 (a bf16 tie)
    y = np.array([2 ** 24 + 2 ** 16 + 1], dtype=np.int32)
    assert cast(y, "bfloat16", "rne").astype(np.float32)[0] == 2.0 ** 24


def test_bool_conversions():
    x = np.array([0.0, -0.0, 0.1, np.nan, -3.0], dtype=np.float32)
    assert cast(x, "bool_").tolist() == [False, False, True, True, True]
    assert cast(np.array([True, False]), "float32").tolist() == [1.0, 0.0]
    assert cast(np.array([True, False]), "int8").tolist() == [1, 0]


def test_same_storage_returns_the_array_itself():
    for array in (np.ones(3, np.float32), np.ones(3, ml_dtypes.bfloat16), np.ones(3, np.int8)):
        assert cast(array, array.dtype) is array
    x = np.ones(3, np.float32)
    assert cast(x, "tfloat32", source="tfloat32") is x


def test_float32_to_tfloat32_is_not_a_no_op():
    x = np.array([1 + 2.0 ** -12 * 3], dtype=np.float32)
    assert cast(x, "tfloat32")[0] != x[0]
    assert round_tf32(x)[0] == cast(x, "tfloat32")[0]


def test_to_compute_is_float32():
    assert to_compute(np.ones(2, ml_dtypes.float8_e4m3)).dtype == np.float32
    x = np.ones(2, np.float32)
    assert to_compute(x) is x
    assert to_compute(np.array([2 ** 24 + 1], np.int32)).tolist() == [2.0 ** 24]
    assert to_compute(np.array([True])).tolist() == [1.0]
    assert to_compute(np.array([0.1], np.float64)).tolist() == [np.float32(0.1)]


def test_non_numeric_sources_are_rejected():
    with pytest.raises(InvalidArgumentError, match="not a numeric dtype"):
        cast(np.array(["a"]), "float32")
    with pytest.raises(InvalidArgumentError, match="stored as"):
        cast(np.ones(2, np.float16), "float32", source="bfloat16")


def test_scalars_and_lists_are_accepted():
    assert cast(1.5, "int8").tolist() == 2
    assert cast([1.0, 2.5], "bfloat16").dtype == ml_dtypes.bfloat16


def test_to_compute_uses_dtype_only_where_storage_is_ambiguous():
    packed = cast(np.array([[1.0, 2.0, 3.0, 4.0]], np.float32), "float8_e5m2_x4")
    assert to_compute(packed, "float8_e5m2_x4").tolist() == [[1.0, 2.0, 3.0, 4.0]]
    assert to_compute(packed).tolist() == [[float(np.float32(packed[0, 0]))]]  # plain uint32
    x = np.array([0.1], np.float32)
    assert to_compute(x, "bfloat16") is x  # already in the compute format
    with pytest.raises(InvalidArgumentError, match="numeric"):
        to_compute(np.array(["a"]))


@pytest.mark.parametrize("name", ["bfloat16", "float16", "float8_e4m3", "tfloat32", "int8", "bool_"])
@pytest.mark.parametrize("mode", ["rne", "stochastic"])
def test_shapes_are_kept_for_scalars_empty_and_strided_arrays(name, mode):
    for x in (np.float32(1.3), np.zeros(0, np.float32), np.ones((0, 4), np.float32),
              np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]):
        got = cast(x, name, mode, CounterRNG(0))
        assert got.shape == np.shape(x)
        contiguous = cast(np.array(x, order="C"), name, mode, CounterRNG(0))
        assert np.array_equal(to_compute(got), to_compute(contiguous))
