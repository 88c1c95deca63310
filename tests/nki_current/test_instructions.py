"""Every destination-first nisa instruction on every target it exists on, against numpy.

One record per case: a body (nisa calls writing one SBUF result), inputs, the result's shape and
dtype, a numpy reference, and the oldest NeuronCore version that has the instruction.
"""

from dataclasses import dataclass, field

import ml_dtypes
import numpy as np
import pytest

from tests.nki_current.kernels.harness import run
from trnsim.errors import UnsupportedError
from trnsim.nki.current import isa as nisa
from trnsim.nki.current import language as nl

TARGETS = {"trn1": 2, "trn2": 3, "trn3": 4}
R = np.random.default_rng(7)
X = R.standard_normal((128, 64)).astype(np.float32)
Y = R.standard_normal((128, 64)).astype(np.float32)
COL = R.standard_normal((128, 1)).astype(np.float32) + 3.0
POS = np.abs(X) + 0.5
SMALL = R.standard_normal((32, 32)).astype(np.float32)
IDS = np.array([[1, 1, 1, 0, 2, 2, 3, 3, 3, 3, 0, 0, 4, 5, 5, 5]], dtype=np.float32)


@dataclass
class Case:
    name: str
    body: object
    inputs: list
    shape: tuple
    reference: object
    dtype: str = "float32"
    since: int = 2
    tol: dict = field(default_factory=lambda: dict(rtol=1e-5, atol=1e-5))


def _scratch(shape, dtype="float32"):
    return nl.ndarray(shape, dtype=dtype, buffer=nl.sbuf)


def _act_reduce(d, a):
    e = _scratch(a.shape)
    nisa.activation_reduce(dst=e, op=nl.exp, data=a, reduce_op=nl.add, reduce_res=d)


def _ts_reduce(d, a):
    e = _scratch(a.shape)
    nisa.tensor_scalar_reduce(dst=e, data=a, op0=nl.multiply, operand0=2.0, reduce_op=nl.max,
                              reduce_res=d)


def _ts_reduce_chained(d, a):
    """Two calls share VectorE's accumulators: reset_reduce, then reduce + read out negated."""
    e = _scratch((128, 32))
    nisa.tensor_scalar_reduce(dst=e, data=a[:, 0:32], op0=nl.multiply, operand0=2.0, reduce_op=nl.add)
    nisa.tensor_scalar_reduce(dst=e, data=a[:, 32:64], op0=nl.multiply, operand0=2.0, reduce_op=nl.add,
                              reduce_res=d, reduce_cmd=nisa.reduce_cmd.reduce, reduce_res_negate=True)


def _ts_reduce_loaded(d, a, c):
    e = _scratch((128, 64))
    nisa.tensor_scalar_reduce(dst=e, data=a, op0=nl.add, operand0=0.0, reduce_op=nl.max,
                              reduce_res=d, reduce_cmd=nisa.reduce_cmd.load_reduce, reduce_init=c)


def _bn(d, a):
    stats = _scratch((128, 6))
    nisa.bn_stats(dst=stats, data=a)
    nisa.bn_aggr(dst=d, data=stats)


def _transpose_tensor(d, a):
    ps = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_transpose(dst=ps, data=a, engine=nisa.engine.tensor)
    nisa.tensor_copy(dst=d, src=ps)


def _matmul(d, a, b):
    ps = nl.ndarray((64, 64), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=a, moving=b)
    nisa.tensor_copy(dst=d, src=ps)


def _matmul_double_row(d, a, b):
    ps = nl.ndarray((32, 32), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=a.reshape((128, 2, 32)), moving=b.reshape((128, 2, 32)),
                   perf_mode=nisa.matmul_perf_mode.double_row)
    nisa.tensor_copy(dst=d, src=ps)


def _dma_transpose(d, a):
    nisa.dma_transpose(dst=d, src=a)


def _dma_compute(d, a, b):
    nisa.dma_compute(dst=d, srcs=[a, b], reduce_op=nl.add)


def _predicated(d, a, b):
    mask = _scratch((128, 64), "uint8")
    nisa.tensor_scalar(dst=mask, data=b, op0=nl.greater, operand0=0.0)
    nisa.memset(dst=d, value=-1.0)
    nisa.tensor_copy_predicated(dst=d, src=a, predicate=mask)


def _select_reduce(d, a, b):
    mask = _scratch((128, 64), "uint8")
    nisa.tensor_scalar(dst=mask, data=b, op0=nl.greater, operand0=0.0)
    sel = _scratch((128, 64))
    nisa.select_reduce(dst=sel, predicate=mask, on_true=a, on_false=-5.0, reduce_res=d,
                       reduce_cmd=nisa.reduce_cmd.reset_reduce)


def _range_select(d, a):
    lo, hi = _scratch((128, 1)), _scratch((128, 1))
    nisa.memset(dst=lo, value=8.0)
    nisa.memset(dst=hi, value=40.0)
    nisa.range_select(dst=d, on_true_tile=a, comp_op0=nl.greater_equal, comp_op1=nl.less,
                      bound0=lo, bound1=hi, range_start=0)


def _find_index8(d, a):
    top = _scratch((128, 8))
    nisa.max8(dst=top, src=a)
    nisa.nc_find_index8(dst=d, data=a, vals=top)


def _match_replace8(d, a):
    top = _scratch((128, 8))
    nisa.max8(dst=top, src=a)
    nisa.nc_match_replace8(dst=d, data=a, vals=top, imm=-100.0)


def _local_gather(d, a, idx):
    nisa.local_gather(dst=d, src_buffer=a, index=idx)


def _n_gather(d, a, idx):
    nisa.nc_n_gather(dst=d, data=a, indices=idx)


def _cumulative(d, a):
    nisa.tensor_scalar_cumulative(dst=d, src=a, op0=nl.multiply, op1=nl.add, imm0=0.5)


def _topk(d, a):
    vals = _scratch((16, 2), "bfloat16")
    nisa.topk(val_dst=vals, idx_dst=d, src=a, n=64)


def _exponential(d, a):
    nisa.exponential(dst=d, src=a, max_value=1.5)


def _activate2(d, a):
    nisa.activate2(dst=d, op=nl.relu, data=a, imm0=2.0, imm1=0.5, op0=nl.multiply, op1=nl.add)


def _quantize_roundtrip(d, a):
    """quantize_mx then nc_matmul_mx against an identity-like moving tile picks rows back."""
    q = nl.ndarray((128, 16), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    s = nl.ndarray((128, 16), dtype=nl.float8_e8m0fnu, buffer=nl.sbuf)
    nisa.quantize_mx(dst=q, src=a, dst_scale=s)
    ps = nl.ndarray((16, 16), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul_mx(dst=ps, stationary=q, moving=q, stationary_scale=s, moving_scale=s)
    nisa.tensor_copy(dst=d, src=ps)


def _quantized(x):
    """numpy MX quantisation (groups of 8 partitions x 4 elements), as floats."""
    from trnsim.numerics import cast, mx_scale

    g = x.reshape(16, 8, 16, 4).astype(np.float32)
    scale = mx_scale(np.abs(g).max(axis=(1, 3)), "float8_e4m3fn").view(np.uint8).astype(np.int32)
    factor = np.ldexp(1.0, scale - 127)[:, None, :, None]
    q = cast(g / factor, "float8_e4m3fn").astype(np.float32) * factor
    return q.reshape(128, 64)


def _mx_reference(x):
    q = _quantized(x).reshape(128, 16, 4).transpose(0, 2, 1).reshape(512, 16)  # K = 4p + q
    return q.T @ q


def _seq_bounds_reference(ids):
    ids = ids[0]
    n = len(ids)
    lo, hi = np.zeros(n), np.zeros(n)
    for i in range(n):
        if ids[i] == 0:
            lo[i], hi[i] = n, -1
            continue
        j = i
        while j > 0 and ids[j - 1] == ids[i]:
            j -= 1
        k = i
        while k + 1 < n and ids[k + 1] == ids[i]:
            k += 1
        lo[i], hi[i] = j, k + 1
    return np.stack([lo, hi]).reshape(1, 2, n)


GATHER_SRC = R.standard_normal((32, 16)).astype(np.float32)
GATHER_IDX = np.tile(np.arange(16, dtype=np.uint16)[::-1].reshape(16, 1), (2, 1))  # [32, 1]
N_IDX = R.integers(0, 64, (128, 8)).astype(np.uint32)
SNAKE = R.permutation(256).astype(np.float32).reshape(16, 16).astype(ml_dtypes.bfloat16)
BF = X.astype(ml_dtypes.bfloat16)
FP8 = (X / 4).astype(ml_dtypes.float8_e4m3)


def _local_gather_reference(src, idx):
    out = np.empty((32, 16, 1), dtype=np.float32)
    for g in (0, 16):
        flat = idx[g:g + 16].flatten(order="F")
        out[g:g + 16, :, 0] = src[g:g + 16][:, flat]
    return out


def _topk_reference(snake):
    values = snake.astype(np.float32)
    positions = np.arange(64)
    flat = values[positions % 16, positions // 16]
    order = np.argsort(-flat, kind="stable")[:32][::-1]
    idx = np.zeros((16, 2), dtype=np.uint32)
    j = np.arange(32)
    idx[j % 16, j // 16] = order
    return idx


CASES = [
    Case("tensor_copy", lambda d, a: nisa.tensor_copy(dst=d, src=a), [X], (128, 64), lambda x: x),
    Case("tensor_copy_scalar", lambda d, a: nisa.tensor_copy(dst=d, src=a, engine=nisa.engine.scalar),
         [X], (128, 64), lambda x: x, since=3),
    Case("memset", lambda d, a: nisa.memset(dst=d, value=3.5), [X], (128, 64),
         lambda x: np.full_like(x, 3.5)),
    Case("tensor_tensor", lambda d, a, b: nisa.tensor_tensor(dst=d, data1=a, data2=b, op=nl.maximum),
         [X, Y], (128, 64), np.maximum),
    Case("tensor_tensor_gpsimd", lambda d, a, b: nisa.tensor_tensor(dst=d, data1=a, data2=b, op=np.add,
                                                                    engine=nisa.engine.gpsimd),
         [X, Y], (128, 64), np.add),
    Case("tensor_scalar", lambda d, a: nisa.tensor_scalar(dst=d, data=a, op0=nl.multiply, operand0=2.0,
                                                          op1=nl.add, operand1=1.0),
         [X], (128, 64), lambda x: x * 2 + 1),
    Case("tensor_scalar_vector", lambda d, a, c: nisa.tensor_scalar(dst=d, data=a, op0=nl.subtract,
                                                                    operand0=c, reverse0=True),
         [X, COL], (128, 64), lambda x, c: c - x),
    Case("scalar_tensor_tensor", lambda d, a, b: nisa.scalar_tensor_tensor(
        dst=d, data=a, op0=nl.subtract, operand0=1.0, op1=nl.multiply, operand1=b),
         [X, Y], (128, 64), lambda x, y: (x - 1) * y),
    Case("tensor_scalar_reduce", _ts_reduce, [X], (128, 1), lambda x: (2 * x).max(1, keepdims=True)),
    Case("tensor_scalar_reduce_chained", _ts_reduce_chained, [X], (128, 1),
         lambda x: -2 * x.sum(1, keepdims=True), tol=dict(rtol=1e-4, atol=1e-4)),
    Case("tensor_scalar_reduce_load", _ts_reduce_loaded, [X, COL], (128, 1),
         lambda x, c: np.maximum(x.max(1, keepdims=True), c)),
    Case("tensor_reduce", lambda d, a: nisa.tensor_reduce(dst=d, op=nl.add, data=a, axis=1),
         [X], (128, 1), lambda x: x.sum(1, keepdims=True)),
    Case("tensor_reduce_negate", lambda d, a: nisa.tensor_reduce(dst=d, op=nl.max, data=a, axis=(1,),
                                                                 negate=True),
         [X], (128, 1), lambda x: -x.max(1, keepdims=True)),
    Case("tensor_partition_reduce", lambda d, a: nisa.tensor_partition_reduce(dst=d, op=nl.add, data=a),
         [X], (1, 64), lambda x: x.sum(0, keepdims=True), tol=dict(rtol=1e-4, atol=1e-4)),
    Case("tensor_scalar_cumulative", _cumulative, [X], (128, 64), lambda x: np.cumsum(x * 0.5, axis=1),
         tol=dict(rtol=1e-4, atol=1e-4)),
    Case("tensor_tensor_scan", lambda d, a, b: nisa.tensor_tensor_scan(
        dst=d, data0=a, data1=b, initial=0.0, op0=nl.multiply, op1=nl.add),
         [np.full((128, 64), 0.5, np.float32), Y], (128, 64),
         lambda a, b: _scan(a, b), tol=dict(rtol=1e-4, atol=1e-4)),
    Case("activation", lambda d, a, c: nisa.activation(dst=d, op=nl.exp, data=a, scale=0.5, bias=c),
         [X, COL], (128, 64), lambda x, c: np.exp(0.5 * x + c), tol=dict(rtol=1e-5, atol=1e-4)),
    Case("activation_reduce", _act_reduce, [X], (128, 1), lambda x: np.exp(x).sum(1, keepdims=True),
         tol=dict(rtol=1e-4, atol=1e-4)),
    Case("reciprocal", lambda d, a: nisa.reciprocal(dst=d, data=a), [POS], (128, 64), lambda x: 1 / x),
    Case("dropout_keep", lambda d, a: nisa.dropout(dst=d, data=a, prob=0.0), [X], (128, 64), lambda x: x),
    Case("dropout_drop", lambda d, a: nisa.dropout(dst=d, data=a, prob=1.0), [X], (128, 64),
         lambda x: np.zeros_like(x)),
    Case("bn_stats_aggr", _bn, [X], (128, 2),
         lambda x: np.stack([x.mean(1), x.var(1)], axis=1), tol=dict(rtol=1e-4, atol=1e-5)),
    Case("iota", lambda d, a: nisa.iota(dst=d, pattern=[[1, 64]], offset=3, channel_multiplier=64),
         [X], (128, 64), lambda x: np.arange(128 * 64).reshape(128, 64) + 3.0),
    Case("affine_select", lambda d, a: nisa.affine_select(
        dst=d, pattern=[[-1, 64]], channel_multiplier=1, on_true_tile=a, on_false_value=-9.0,
        cmp_op=nl.greater_equal), [X], (128, 64),
         lambda x: np.where(np.arange(128)[:, None] >= np.arange(64)[None, :], x, -9.0)),
    Case("nc_transpose_vector", lambda d, a: nisa.nc_transpose(dst=d, data=a, engine=nisa.engine.vector),
         [SMALL], (32, 32), lambda x: x.T),
    Case("nc_transpose_tensor", _transpose_tensor, [X], (64, 128), lambda x: x.T),
    Case("nc_matmul", _matmul, [X, Y], (64, 64), lambda a, b: a.T @ b, tol=dict(rtol=1e-4, atol=1e-4)),
    Case("nc_matmul_double_row", _matmul_double_row, [FP8, (Y / 4).astype(ml_dtypes.float8_e4m3)],
         (32, 32), lambda a, b: a.reshape(256, 32).T @ b.reshape(256, 32),
         since=3, tol=dict(rtol=1e-4, atol=1e-4)),
    Case("dma_transpose", _dma_transpose, [BF[:64]], (64, 64), lambda x: x.T, dtype="bfloat16"),
    Case("dma_compute", _dma_compute, [X, Y], (128, 64), np.add),
    Case("tensor_copy_predicated", _predicated, [X, Y], (128, 64), lambda x, y: np.where(y > 0, x, -1.0)),
    Case("select_reduce", _select_reduce, [X, Y], (128, 1),
         lambda x, y: np.where(y > 0, x, -5.0).max(1, keepdims=True)),
    Case("range_select", _range_select, [X], (128, 64),
         lambda x: np.where((np.arange(64) >= 8) & (np.arange(64) < 40), x, np.finfo(np.float32).min),
         since=3),
    Case("max8", lambda d, a: nisa.max8(dst=d, src=a), [X], (128, 8), lambda x: -np.sort(-x, 1)[:, :8]),
    Case("nc_find_index8", _find_index8, [X], (128, 8), lambda x: np.argsort(-x, 1)[:, :8],
         dtype="uint32"),
    Case("nc_match_replace8", _match_replace8, [X], (128, 64),
         lambda x: np.where(x >= -np.sort(-x, 1)[:, 7:8], -100.0, x)),
    Case("local_gather", _local_gather, [GATHER_SRC, GATHER_IDX], (32, 16, 1), _local_gather_reference),
    Case("nc_n_gather", _n_gather, [X, N_IDX], (128, 8), lambda x, i: np.take_along_axis(x, i, 1)),
    Case("nc_stream_shuffle", lambda d, a: nisa.nc_stream_shuffle(dst=d, src=a,
                                                                  shuffle_mask=list(range(31, -1, -1))),
         [X[:32]], (32, 64), lambda x: x[::-1]),
    Case("sequence_bounds", lambda d, a: nisa.sequence_bounds(dst=d, segment_ids=a), [IDS], (1, 2, 16),
         _seq_bounds_reference),
    Case("nonzero_with_count", lambda d, a: nisa.nonzero_with_count(dst=d, src=a, index_offset=10),
         [np.tile(np.array([[0, 1, 1, 0, 0, 1, 0, 0]], np.int32), (16, 1))], (16, 9),
         # only partition 0 of each 16 is written; the others were never written: -1 (0xFF bytes)
         lambda x: np.where(np.arange(16)[:, None] == 0,
                            np.array([11, 12, 15, -1, -1, -1, -1, -1, 3]), -1),
         dtype="int32", since=3),
    Case("topk", _topk, [SNAKE], (16, 2), _topk_reference, dtype="uint32"),
    Case("exponential", _exponential, [X], (128, 64), lambda x: np.exp(x - 1.5), since=4,
         tol=dict(rtol=1e-5, atol=1e-5)),
    Case("activate2", _activate2, [X], (128, 64), lambda x: np.maximum(2 * x + 0.5, 0), since=4),
    Case("quantize_mx_nc_matmul_mx", _quantize_roundtrip, [BF], (16, 16),
         lambda x: _mx_reference(x.astype(np.float32)), since=4, tol=dict(rtol=1e-4, atol=1e-3)),
]


def _scan(a, b):
    out = np.empty_like(b)
    carry = np.zeros(a.shape[0], np.float32)
    for i in range(a.shape[1]):
        carry = a[:, i] * carry + b[:, i]
        out[:, i] = carry
    return out


def _targets(case):
    return [pytest.param(case, t, id=f"{case.name}-{t}") for t, v in TARGETS.items() if v >= case.since]


@pytest.mark.parametrize(("case", "target"), [p for c in CASES for p in _targets(c)])
def test_instruction_matches_numpy(case, target):
    got, kernel = run(case.body, case.inputs, case.shape, case.dtype, target)
    want = case.reference(*[np.asarray(x).astype(np.float32) if np.asarray(x).dtype.kind == "f"
                            or np.asarray(x).dtype.name in ("bfloat16", "float8_e4m3") else x
                            for x in case.inputs])
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64),
                               **case.tol)
    assert kernel.last_run.latency_ns > 0


@pytest.mark.parametrize("case", [c for c in CASES if c.since > 2], ids=lambda c: c.name)
def test_newer_instruction_on_older_target_names_the_target(case):
    older = next(t for t, v in TARGETS.items() if v == case.since - 1)
    with pytest.raises(UnsupportedError, match=r"NeuronCore-v\d.*target is NeuronCore-v"):
        run(case.body, case.inputs, case.shape, case.dtype, older)


@pytest.mark.parametrize("target", ["trn2", "trn3"])
def test_random_generators_are_seeded_restorable_and_in_range(target):
    from trnsim.nki.current import jit

    @jit(platform_target=target)
    def draws(seed):
        s = nl.ndarray((1, 1), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=seed)
        bits = [nl.ndarray((16, 32), dtype=nl.uint16, buffer=nl.sbuf) for _ in range(3)]
        nisa.set_rng_seed(s)
        nisa.rng(dst=bits[0])
        state = nl.ndarray((16, 6), dtype=nl.uint32, buffer=nl.sbuf)
        nisa.rand_get_state(dst=state, engine=nisa.engine.gpsimd)
        nisa.rng(dst=bits[1], engine=nisa.engine.gpsimd)
        nisa.rand_set_state(src_seeds=state, engine=nisa.engine.gpsimd)
        nisa.rng(dst=bits[2], engine=nisa.engine.gpsimd)
        u = nl.rand((16, 32), dtype=nl.float32)
        out = nl.ndarray((4, 16, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        for i, b in enumerate(bits):
            nisa.dma_copy(dst=out[i], src=b)
        nisa.dma_copy(dst=out[3], src=u)
        return out

    first = draws(np.array([[42]], np.uint32))
    again = draws(np.array([[42]], np.uint32))
    other = draws(np.array([[7]], np.uint32))
    np.testing.assert_array_equal(first, again)  # same seed, same bits
    assert not np.array_equal(first[0], other[0])
    np.testing.assert_array_equal(first[1], first[2])  # get_state / set_state replays
    assert first[0].max() <= 65535 and len(np.unique(first[0])) > 400
    assert first[3].min() >= 0.0 and first[3].max() < 1.0


def test_rand2_draws_uniformly_between_its_bounds():
    got, _ = run(lambda d, a: nisa.rand2(dst=d, min=a, max=10.0), [COL], (128, 64), target="trn3")
    assert np.all(got >= COL) and np.all(got < 10.0)
    assert abs(float(((got - COL) / (10.0 - COL)).mean()) - 0.5) < 0.02
