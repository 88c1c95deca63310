"""Vector-engine semantics against numpy references, per dtype."""

import numpy as np
import pytest

from tests.isa.conftest import ref_cast, tile
from trnsim.isa import (
    BnAggr,
    BnStats,
    Dropout,
    FindIndex8,
    MatchReplace8,
    Max8,
    Memset,
    RangeSelect,
    Reciprocal,
    ScalarTensorTensor,
    SelectReduce,
    StreamShuffle,
    TensorCopy,
    TensorCopyPredicated,
    TensorReduce,
    TensorScalar,
    TensorTensor,
    TensorTensorScan,
    VectorTranspose,
)

rng = np.random.default_rng(2)
FLOATS = ["float32", "bfloat16", "float16", "float8_e4m3"]


def data(shape, scale=3.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op,ref", [("add", np.add), ("multiply", np.multiply),
                                    ("subtract", np.subtract), ("max", np.maximum)])
def test_tensor_tensor_computes_fp32_then_casts(state, dtype, op, ref):
    a, b = data((16, 40)), data((16, 40))
    x = state.put(tile((16, 40), dtype), a)
    y = state.put(tile((16, 40), dtype), b)
    out = tile((16, 40), dtype)
    TensorTensor(dst=out, in0=x, in1=y, op=op).execute(state)
    stored_a, stored_b = ref_cast(a, dtype).astype(np.float32), ref_cast(b, dtype).astype(np.float32)
    want = ref_cast(ref(stored_a, stored_b), dtype)
    np.testing.assert_array_equal(state.read(out).view(np.uint8), want.view(np.uint8))


def test_tensor_tensor_bitwise_on_int32_bits(state):
    a = rng.integers(-2**31, 2**31 - 1, (8, 16), dtype=np.int64).astype(np.int32)
    b = rng.integers(-2**31, 2**31 - 1, (8, 16), dtype=np.int64).astype(np.int32)
    x, y, out = tile((8, 16), "int32"), tile((8, 16), "int32"), tile((8, 16), "int32")
    state.arrays[x], state.arrays[y] = a, b
    TensorTensor(dst=out, in0=x, in1=y, op="bitwise_xor").execute(state)
    np.testing.assert_array_equal(state.read(out), a ^ b)  # beyond 2**24: not via fp32


def test_gpsimd_int32_arithmetic_is_native_integer(state):
    # exact beyond 2**24, C division and remainder (truncate toward zero), 32-bit wrap-around
    a = np.array([[2**30 + 3, -7, 7, 2**31 - 1]], dtype=np.int32)
    b = np.array([[3, 2, -2, 2]], dtype=np.int32)
    x, y = tile((1, 4), "int32"), tile((1, 4), "int32")
    state.arrays[x], state.arrays[y] = a, b
    results = {}
    for op in ("divide", "mod", "multiply", "add"):
        out = tile((1, 4), "int32")
        TensorTensor(dst=out, in0=x, in1=y, op=op, engine="gpsimd").execute(state)
        results[op] = state.read(out)[0].tolist()
    assert results["divide"] == [(2**30 + 3) // 3, -3, -3, 2**30 - 1]
    assert results["mod"] == [(2**30 + 3) % 3, -1, 1, 1]
    assert results["multiply"] == [-1073741815, -14, -14, -2]  # (2**30 + 3) * 3 wraps
    assert results["add"] == [2**30 + 6, -5, 5, -2**31 + 1]
    out = tile((1, 4), "int32")
    TensorScalar(dst=out, src=x, op0="divide", operand0=2.0, engine="gpsimd").execute(state)
    assert state.read(out)[0].tolist() == [(2**30 + 3) // 2, -3, 3, 2**30 - 1]
    out = tile((1, 4), "int32")  # VectorE: fp32 math, rounded on the int32 write
    TensorTensor(dst=out, in0=x, in1=y, op="divide", engine="vector").execute(state)
    assert state.read(out)[0].tolist()[1:3] == [-4, -4]


def test_tensor_scalar_two_ops_reverse_and_vector_operand(state):
    a = data((8, 32))
    col = data((8, 1))
    x = state.put(tile((8, 32)), a)
    v = state.put(tile((8, 1)), col)
    out = tile((8, 32))
    TensorScalar(dst=out, src=x, op0="subtract", operand0=v, reverse0=True, op1="multiply",
                 operand1=2.5).execute(state)
    np.testing.assert_allclose(state.read(out), (col - a) * 2.5, rtol=1e-6)


def test_tensor_scalar_reduce_writes_per_partition_sum(state):
    a = data((8, 32))
    x = state.put(tile((8, 32)), a)
    out, red = tile((8, 32)), tile((8, 1))
    TensorScalar(dst=out, src=x, op0="multiply", operand0=2.0, reduce_op="add",
                 reduce_dst=red).execute(state)
    np.testing.assert_allclose(state.read(red)[:, 0], (a * 2).sum(axis=1), rtol=1e-5)


def test_scalar_tensor_tensor(state):
    a, b, s = data((4, 20)), data((4, 20)), data((4, 1))
    x, y, v = state.put(tile((4, 20)), a), state.put(tile((4, 20)), b), state.put(tile((4, 1)), s)
    out = tile((4, 20))
    ScalarTensorTensor(dst=out, src=x, op0="subtract", operand0=v, op1="multiply", in1=y).execute(state)
    np.testing.assert_allclose(state.read(out), (a - s) * b, rtol=1e-6)


@pytest.mark.parametrize("op,ref", [("add", np.sum), ("max", np.max), ("min", np.min)])
def test_tensor_reduce_over_trailing_axes(state, op, ref):
    a = data((8, 3, 4, 10))
    x = state.put(tile((8, 3, 4, 10)), a)
    out = tile((8, 3))
    TensorReduce(dst=out, src=x, op=op, axes=(2, 3)).execute(state)
    np.testing.assert_allclose(state.read(out), ref(a, axis=(2, 3)), rtol=1e-5)
    neg = tile((8, 3, 4))
    TensorReduce(dst=neg, src=x, op=op, axes=(3,), negate=True).execute(state)
    np.testing.assert_allclose(state.read(neg), -ref(a, axis=3), rtol=1e-5)


def test_tensor_tensor_scan_matches_loop(state):
    a, b = data((4, 50), 0.5), data((4, 50))
    x, y = state.put(tile((4, 50)), a), state.put(tile((4, 50)), b)
    out = tile((4, 50))
    TensorTensorScan(dst=out, in0=x, in1=y, initial=1.5, op0="multiply", op1="add").execute(state)
    want = np.empty_like(a)
    carry = np.full(4, 1.5, np.float32)
    for i in range(50):
        carry = (a[:, i] * carry + b[:, i]).astype(np.float32)
        want[:, i] = carry
    np.testing.assert_allclose(state.read(out), want, rtol=1e-5)


def test_copy_is_bit_exact_on_vector_but_fp32_on_scalar(state):
    nan_payload = np.array([[0x7FC01234]], dtype=np.uint32).view(np.float32)
    src = tile((1, 1))
    state.arrays[src] = nan_payload
    out_v, out_s = tile((1, 1)), tile((1, 1))
    TensorCopy(dst=out_v, src=src).execute(state)
    assert state.read(out_v).view(np.uint32)[0, 0] == 0x7FC01234
    TensorCopy(dst=out_s, src=src, engine="scalar").execute(state)
    assert np.isnan(state.read(out_s)[0, 0])


def test_copy_casts_between_dtypes(state):
    a = data((4, 8))
    src = state.put(tile((4, 8)), a)
    out = tile((4, 8), "bfloat16")
    TensorCopy(dst=out, src=src).execute(state)
    np.testing.assert_array_equal(state.read(out).view(np.uint16), ref_cast(a, "bfloat16").view(np.uint16))


def test_memset_reciprocal_predicated_copy(state):
    out = tile((4, 8), "bfloat16")
    Memset(dst=out, value=3.0).execute(state)
    assert np.all(state.read(out).astype(np.float32) == 3.0)
    a = data((4, 8)) + 10
    x = state.put(tile((4, 8)), a)
    r = tile((4, 8))
    Reciprocal(dst=r, src=x).execute(state)
    np.testing.assert_allclose(state.read(r), 1 / a, rtol=1e-6)
    pred = state.put(tile((4, 8), "uint8"), (np.arange(32).reshape(4, 8) % 2))
    dst = state.put(tile((4, 8)), np.zeros((4, 8)))
    TensorCopyPredicated(dst=dst, src=x, predicate=pred).execute(state)
    np.testing.assert_allclose(state.read(dst), np.where(np.arange(32).reshape(4, 8) % 2, a, 0))


def test_dropout_probabilities(state):
    a = data((16, 512)) + 100
    x = state.put(tile((16, 512)), a)
    keep_all, drop_all, half = tile((16, 512)), tile((16, 512)), tile((16, 512))
    Dropout(dst=keep_all, src=x, prob=0.0).execute(state)
    Dropout(dst=drop_all, src=x, prob=1.0).execute(state)
    Dropout(dst=half, src=x, prob=0.5).execute(state)
    np.testing.assert_array_equal(state.read(keep_all), a)
    assert np.all(state.read(drop_all) == 0)
    dropped = (state.read(half) == 0).mean()
    assert 0.47 < dropped < 0.53
    kept = state.read(half) != 0
    np.testing.assert_array_equal(state.read(half)[kept], a[kept])


def test_bn_stats_and_aggr_give_mean_and_variance(state):
    a = data((8, 1100)) + 5
    stats = tile((8, 18))
    chunks = [a[:, 0:512], a[:, 512:1024], a[:, 1024:]]
    for i, chunk in enumerate(chunks):
        x = state.put(tile(chunk.shape), chunk)
        part = tile((8, 6))
        BnStats(dst=part, src=x).execute(state)
        state.arrays.setdefault(stats, np.zeros((8, 18), np.float32))
        state.arrays[stats][:, 6 * i:6 * i + 6] = state.read(part)
    out = tile((8, 2))
    BnAggr(dst=out, src=stats).execute(state)
    np.testing.assert_allclose(state.read(out)[:, 0], a.mean(axis=1), rtol=1e-5)
    np.testing.assert_allclose(state.read(out)[:, 1], a.var(axis=1), rtol=1e-4)


def test_max8_find_index8_match_replace8(state):
    a = rng.permutation(np.arange(4 * 64, dtype=np.float32)).reshape(4, 64)
    x = state.put(tile((4, 64)), a)
    top = tile((4, 8))
    Max8(dst=top, src=x).execute(state)
    want = -np.sort(-a, axis=1)[:, :8]
    np.testing.assert_array_equal(state.read(top), want)
    idx = tile((4, 8), "uint32")
    FindIndex8(dst=idx, src=x, values=top).execute(state)
    np.testing.assert_array_equal(np.take_along_axis(a, state.read(idx).astype(np.int64), 1), want)
    replaced, where = tile((4, 64)), tile((4, 8), "uint32")
    MatchReplace8(dst=replaced, src=x, values=top, imm=-1.0, index_dst=where).execute(state)
    got = state.read(replaced)
    assert (got == -1).sum(axis=1).tolist() == [8] * 4
    np.testing.assert_array_equal(state.read(where), state.read(idx))


def test_select_reduce_and_range_select(state_v3):
    st = state_v3
    a = data((4, 16))
    pred_np = (np.arange(64).reshape(4, 16) % 3 == 0).astype(np.uint8)
    x, pred = st.put(tile((4, 16)), a), st.put(tile((4, 16), "uint8"), pred_np)
    out, red = tile((4, 16)), tile((4, 1))
    SelectReduce(dst=out, predicate=pred, on_true=x, on_false=-7.0, reduce_dst=red,
                 reduce_cmd="reset_reduce").execute(st)
    want = np.where(pred_np != 0, a, -7.0)
    np.testing.assert_array_equal(st.read(out), want)
    np.testing.assert_array_equal(st.read(red)[:, 0], want.max(axis=1))
    lo, hi = st.put(tile((4, 1)), [[2], [0], [5], [9]]), st.put(tile((4, 1)), [[6], [3], [15], [10]])
    out2, red2 = tile((4, 16)), tile((4, 1))
    RangeSelect(dst=out2, src=x, cmp0="greater_equal", bound0=lo, cmp1="less", bound1=hi,
                range_start=0, reduce_dst=red2, reduce_cmd="reset_reduce").execute(st)
    idx = np.arange(16)
    mask = (idx >= np.array([[2], [0], [5], [9]])) & (idx < np.array([[6], [3], [15], [10]]))
    want2 = np.where(mask, a, np.finfo(np.float32).min)
    np.testing.assert_array_equal(st.read(out2), want2)
    np.testing.assert_array_equal(st.read(red2)[:, 0], want2.max(axis=1))


def test_vector_transpose_and_stream_shuffle(state):
    a = data((32, 20))
    x = state.put(tile((32, 20)), a)
    out = tile((20, 32))
    VectorTranspose(dst=out, src=x).execute(state)
    np.testing.assert_array_equal(state.read(out), a.T)
    b = data((64, 4))
    y = state.put(tile((64, 4)), b)
    dst = state.put(tile((64, 4)), np.zeros((64, 4)))
    mask = tuple(31 - i if i % 2 == 0 else 255 for i in range(32))
    StreamShuffle(dst=dst, src=y, mask=mask).execute(state)
    got = state.read(dst)
    for q in (0, 32):
        for i in range(32):
            want = b[q + 31 - i] if i % 2 == 0 else np.zeros(4)
            np.testing.assert_array_equal(got[q + i], want)
