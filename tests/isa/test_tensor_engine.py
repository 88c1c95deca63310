"""TensorE semantics: LS + MM into PSUM, accumulation, dtypes, double-row, transposes."""

import ml_dtypes
import numpy as np
import pytest

from tests.isa.conftest import tile
from trnsim.isa import LoadStationary, MultiplyMoving, TensorTranspose
from trnsim.numerics import round_tf32

rng = np.random.default_rng(1)


def matmul(state, stationary, moving, dst, accumulate=False, perf_mode=None):
    LoadStationary(src=stationary, perf_mode=perf_mode).execute(state)
    MultiplyMoving(dst=dst, moving=moving, stationary=stationary, accumulate=accumulate,
                   perf_mode=perf_mode).execute(state)


@pytest.mark.parametrize("dtype,np_dtype", [("bfloat16", ml_dtypes.bfloat16), ("float16", np.float16),
                                             ("float8_e4m3", ml_dtypes.float8_e4m3),
                                             ("float32", np.float32)])
def test_matmul_is_stationary_transpose_times_moving(state, dtype, np_dtype):
    k, m, n = 128, 96, 200
    a = rng.standard_normal((k, m)).astype(np_dtype)
    b = rng.standard_normal((k, n)).astype(np_dtype)
    st = state.put(tile((k, m), dtype), a.astype(np.float32))
    mv = state.put(tile((k, n), dtype), b.astype(np.float32))
    out = tile((m, n), "float32", "psum")
    matmul(state, st, mv, out)
    want = a.astype(np.float64).T @ b.astype(np.float64)  # products of the stored values, exact sum
    np.testing.assert_allclose(state.read(out), want, rtol=1e-5, atol=1e-4)


def test_psum_accumulation_group_over_k(state):
    k_tiles, m, n = 3, 64, 128
    a = rng.standard_normal((k_tiles * 128, m)).astype(np.float32)
    b = rng.standard_normal((k_tiles * 128, n)).astype(np.float32)
    out = tile((m, n), "float32", "psum")
    for i in range(k_tiles):
        st = state.put(tile((128, m)), a[i * 128:(i + 1) * 128])
        mv = state.put(tile((128, n)), b[i * 128:(i + 1) * 128])
        matmul(state, st, mv, out, accumulate=i > 0)
    np.testing.assert_allclose(state.read(out), a.T.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)


def test_overwrite_resets_the_accumulator(state):
    st = state.put(tile((4, 2)), np.ones((4, 2)))
    mv = state.put(tile((4, 3)), np.ones((4, 3)))
    out = tile((2, 3), "float32", "psum")
    matmul(state, st, mv, out)
    matmul(state, st, mv, out, accumulate=True)
    assert np.all(state.read(out) == 8)
    matmul(state, st, mv, out, accumulate=False)
    assert np.all(state.read(out) == 4)


def test_tfloat32_inputs_are_rounded_to_10_bit_mantissa(state):
    a = np.full((1, 1), 1 + 2**-12, np.float32)  # not representable in tf32: rounds to 1.0
    st = state.put(tile((1, 1), "tfloat32"), a)
    mv = state.put(tile((1, 1), "tfloat32"), np.ones((1, 1), np.float32))
    out = tile((1, 1), "float32", "psum")
    matmul(state, st, mv, out)
    assert state.read(out)[0, 0] == round_tf32(a)[0, 0] == 1.0
    st32 = state.put(tile((1, 1), "float32"), a)
    mv32 = state.put(tile((1, 1), "float32"), np.ones((1, 1), np.float32))
    matmul(state, st32, mv32, out)
    assert state.read(out)[0, 0] == np.float32(1 + 2**-12)  # fp32 matmul is exact fp32


def test_double_row_fp8_contracts_over_both_rows(state_v3):
    a = rng.standard_normal((128, 2, 64)).astype(ml_dtypes.float8_e4m3)
    b = rng.standard_normal((128, 2, 256)).astype(ml_dtypes.float8_e4m3)
    st = state_v3.put(tile((128, 2, 64), "float8_e4m3"), a.astype(np.float32))
    mv = state_v3.put(tile((128, 2, 256), "float8_e4m3"), b.astype(np.float32))
    out = tile((64, 256), "float32", "psum")
    matmul(state_v3, st, mv, out, perf_mode="double_row")
    want = np.einsum("krm,krn->mn", a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(state_v3.read(out), want, rtol=1e-5, atol=1e-4)


def test_tensor_transpose_v3_is_bit_exact_with_nan_and_inf(state_v3):
    x = rng.standard_normal((32, 16)).astype(np.float32)
    x[3, 5], x[7, 1] = np.inf, np.nan
    src = state_v3.put(tile((32, 16)), x)
    dst = tile((16, 32), "float32", "psum")
    TensorTranspose(dst=dst, src=src).execute(state_v3)
    got = state_v3.read(dst)
    np.testing.assert_array_equal(got.view(np.uint32), x.T.view(np.uint32))


def test_tensor_transpose_v2_is_identity_matmul_so_inf_poisons_its_row(state):
    x = rng.standard_normal((32, 16)).astype(np.float32)
    x[3, 5] = np.inf
    src = state.put(tile((32, 16)), x)
    dst = tile((16, 32), "float32", "psum")
    TensorTranspose(dst=dst, src=src).execute(state)
    got = state.read(dst)
    assert np.isnan(got[5]).sum() == 31 and got[5, 3] == np.inf  # 0 * inf = NaN elsewhere
    clean = np.delete(np.arange(16), 5)
    np.testing.assert_array_equal(got[clean], x.T[clean])


def test_v2_transpose_equals_the_identity_matmul_it_stands_for():
    """`identity_matmul_transpose` skips the matmul; its results are those of ``values.T @ I``
    bit for bit (NaN positions alike; NaN payloads are not modelled), signed zeros included."""
    from trnsim.isa.tensor_engine import identity_matmul_transpose

    rng = np.random.default_rng(7)
    specials = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45, -3e38], np.float32)
    for trial in range(300):
        p, f = int(rng.integers(1, 129)), int(rng.integers(1, 129))
        values = rng.standard_normal((p, f)).astype(np.float32)
        for _ in range(trial % 5):
            values[rng.integers(p), rng.integers(f)] = specials[rng.integers(len(specials))]
        values[:, rng.integers(f)] = -0.0
        with np.errstate(invalid="ignore"):
            expected = np.matmul(values.T, np.eye(p, dtype=np.float32), dtype=np.float32)
        got = identity_matmul_transpose(values)
        nan = np.isnan(expected)
        assert np.array_equal(np.isnan(got), nan)
        assert np.array_equal(got.view(np.uint32)[~nan], expected.view(np.uint32)[~nan])


@pytest.mark.parametrize("m,n", [(128, 512), (2, 3), (64, 1), (1, 64), (1, 1)])
def test_fp32_matmul_is_np_matmul_bit_for_bit_for_one_partition(m, n):
    """K = 1 (bias broadcasts) skips numpy's element loop for an outer product plus +0: the
    bits must be np.matmul's, signed zeros, subnormals, overflow, Inf and NaN included."""
    from trnsim.isa.tensor_engine import fp32_matmul

    rng = np.random.default_rng(11)
    specials = np.array([0.0, -0.0, 1e-45, -1e-45, 1e-30, -1e-30, 3e38, -3e38, np.inf, -np.inf,
                         np.nan, 1.0, -1.0, 1.17549435e-38], np.float32)

    def operand(size):
        values = rng.standard_normal(size).astype(np.float32) * np.float32(10) ** rng.integers(-30, 30, size)
        values[: min(size, specials.size)] = specials[: min(size, specials.size)]
        return rng.permutation(values.astype(np.float32)).reshape(1, size)

    for _ in range(20):
        a, b = operand(m), operand(n)
        with np.errstate(all="ignore"):
            want, got = np.matmul(a.T, b), fp32_matmul(a, b)
        assert got.dtype == np.float32 and got.shape == (m, n)
        nan = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(got), nan)
        np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
    assert (np.signbit(fp32_matmul(np.float32([[-1.0, 1.0]]), np.float32([[0.0, 2.0]]))) ==
            np.signbit(np.matmul(np.float32([[-1.0], [1.0]]), np.float32([[0.0, 2.0]])))).all()


def _psum_like(shape, row_stride=49152, fill=7.0):
    """A float32 [rows, cols] view with PSUM's gap between rows (a partition's bank row)."""
    rows, cols = shape
    buffer = np.full(rows * row_stride + cols, np.float32(fill), np.float32)
    return np.lib.stride_tricks.as_strided(buffer, shape, (row_stride * 4, 4))


def _operands(rng, k, m, n):
    specials = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45, -3e38, 3e38], np.float32)
    a = rng.standard_normal((k, m)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    for x in (a, b):
        flat = x.reshape(-1)
        count = min(4, flat.size)
        flat[rng.integers(flat.size, size=count)] = specials[rng.integers(specials.size, size=count)]
    b[:, 0] = -0.0
    return a, b


@pytest.mark.parametrize("k,m,n", [(128, 128, 512), (128, 64, 3), (7, 5, 9), (1, 64, 96), (1, 2, 2),
                                   (128, 1, 64), (128, 64, 1), (3, 1, 1)])
def test_fp32_matmul_into_a_psum_view_is_the_same_bits(k, m, n):
    """MultiplyMoving computes straight into the PSUM view (`out=`) only where BLAS takes it as
    its C matrix; the bits must equal computing into a fresh array, NaN/Inf/-0 included; other
    shapes return a fresh result and leave `out` alone."""
    from trnsim.isa.tensor_engine import fp32_matmul

    rng = np.random.default_rng(k * 1000 + m * 10 + n)
    for _ in range(5):
        a, b = _operands(rng, k, m, n)
        out = _psum_like((m, n))
        with np.errstate(all="ignore"):
            want, got = fp32_matmul(a, b), fp32_matmul(a, b, out)
        assert got.view(np.uint32).tobytes() == np.ascontiguousarray(want).view(np.uint32).tobytes()
        if m > 1 and n > 1:
            assert got is out
        else:
            assert got is not out and (out == 7.0).all()


def test_fp32_matmul_does_not_hand_a_non_blas_output_to_numpy():
    """numpy computes into an output BLAS cannot take with its own loop (another summation
    order), so such an `out` is left alone and the result is fresh."""
    from trnsim.isa.tensor_engine import fp32_matmul

    a, b = _operands(np.random.default_rng(3), 128, 32, 48)
    gapped = np.full((32, 96), 7.0, np.float32)[:, ::2]  # column stride 8 bytes
    with np.errstate(all="ignore"):
        got, want = fp32_matmul(a, b, gapped), fp32_matmul(a, b)
    assert got is not gapped and (gapped == 7.0).all()
    assert got.view(np.uint32).tobytes() == want.view(np.uint32).tobytes()


@pytest.mark.parametrize("p,f", [(128, 128), (64, 3), (1, 17), (5, 1)])
def test_v2_transpose_into_a_psum_view_is_the_same_bits(p, f):
    """`identity_matmul_transpose(values, out)`: same bits as into a fresh array (Inf rows, NaN,
    -0 -> +0), in a strided view and in place over its own input (the scan comes first)."""
    from trnsim.isa.tensor_engine import identity_matmul_transpose

    rng = np.random.default_rng(p + f)
    for trial in range(6):
        values, _ = _operands(rng, p, f, 1)
        if trial % 2:
            values[:] = rng.standard_normal((p, f)).astype(np.float32)  # the all-finite path
        with np.errstate(all="ignore"):
            want = identity_matmul_transpose(values)
            out = _psum_like((f, p))
            got = identity_matmul_transpose(values, out)
        assert got is out
        assert got.view(np.uint32).tobytes() == want.view(np.uint32).tobytes()
    if p == f:  # out overlapping values: PSUM transposed onto itself
        values, _ = _operands(rng, p, f, 1)
        with np.errstate(all="ignore"):
            want = identity_matmul_transpose(values.copy())
            got = identity_matmul_transpose(values, values)
        assert got.view(np.uint32).tobytes() == want.view(np.uint32).tobytes()
