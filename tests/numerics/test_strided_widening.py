"""`to_compute` and `widen_f32` (what `CoreState.read_compute` widens SBUF/PSUM reads with) copy
a narrow tile strided along its last axis as raw bits before widening it (speed); every bit
pattern of every 1- and 2-byte format must widen exactly as the direct cast does, NaN payloads
included, with the same memory layout."""

import ml_dtypes
import numpy as np
import pytest

from trnsim.numerics import to_compute, widen_f32

NARROW = [ml_dtypes.bfloat16, np.float16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3,
          ml_dtypes.float8_e5m2, np.int8, np.uint8, np.int16, np.uint16]


def _every_pattern(np_dtype) -> np.ndarray:
    """All bit patterns of the format as a [rows, 512] array, four times over, each copy shifted
    by one element: a view taking every 4th element of the rows still sees every pattern."""
    bits = np.uint8 if np.dtype(np_dtype).itemsize == 1 else np.uint16
    patterns = np.arange(np.iinfo(bits).max + 1, dtype=np.int64).astype(bits)
    shifted = np.concatenate([np.roll(patterns, k) for k in range(4)])
    return shifted.reshape(-1, 512).view(np_dtype)


@pytest.mark.parametrize("np_dtype", NARROW, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("view", [lambda a: a[:, ::4], lambda a: a[1::3, 2::9],
                                  lambda a: a.reshape(-1, 8, 64)[:, ::2, ::2],
                                  lambda a: a[:, :1], lambda a: a.T, lambda a: a[:, ::-2],
                                  lambda a: a[:, :100]])
@pytest.mark.parametrize("widen", [to_compute, widen_f32], ids=lambda f: f.__name__)
def test_strided_widening_equals_the_direct_cast(np_dtype, view, widen):
    tile = view(_every_pattern(np_dtype))
    want = tile.astype(np.float32)
    got = widen(tile)
    assert got.dtype == np.float32 and got.shape == want.shape and got.strides == want.strides
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_every_pattern_is_covered_by_the_strided_views():
    for np_dtype, count in ((ml_dtypes.bfloat16, 1 << 16), (ml_dtypes.float8_e4m3fn, 1 << 8)):
        strided = _every_pattern(np_dtype)[:, ::4]
        bits = np.uint8 if count == 256 else np.uint16
        assert np.unique(strided.view(bits)).size == count
