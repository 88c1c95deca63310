"""Op table: each primitive's shape/dtype rule, and the reference interpreter against numpy."""

import math

import numpy as np
import pytest

from trnsim.compiler.errors import IRError
from trnsim.compiler.interpret import erf, evaluate, pool2d
from trnsim.compiler.ir import Graph
from trnsim.compiler.ops import OPS, broadcast, conv_out


def graph_with(*arrays):
    g = Graph("t")
    nodes = []
    for i, a in enumerate(arrays):
        a = np.asarray(a)
        nodes.append(g.add("input", (), {"index": i, "shape": a.shape,
                                         "dtype": str(a.dtype).replace("bool", "bool_")}))
    return g, nodes


def run(op, arrays, attrs=None):
    g, ins = graph_with(*arrays)
    out = g.add(op, ins, attrs or {})
    g.outputs = [out]
    g.verify()
    (value,) = evaluate(g, list(arrays))
    assert value.shape == out.shape, (op, value.shape, out.shape)
    return out, value


RNG = np.random.default_rng(0)
A = RNG.standard_normal((2, 3, 4)).astype(np.float32)
B = RNG.standard_normal((2, 4, 5)).astype(np.float32)
ROW = RNG.standard_normal(4).astype(np.float32)
IDX = np.array([[0, 2], [1, 1]], np.int32)
IDX0 = np.array([[0, 1], [1, 0]], np.int32)

# (op, operands, attrs, numpy reference)
RECORDS = [
    ("add", [A, ROW], {}, A + ROW),
    ("mul", [A, A], {}, A * A),
    ("div", [A, ROW], {"true_div": True}, A / ROW),
    ("maximum", [A, ROW], {}, np.maximum(A, ROW)),
    ("gt", [A, ROW], {}, A > ROW),
    ("where", [A > 0, A, ROW], {}, np.where(A > 0, A, ROW)),
    ("tanh", [A], {}, np.tanh(A)),
    ("rsqrt", [np.abs(A) + 1], {}, 1 / np.sqrt(np.abs(A) + 1)),
    ("sum", [A], {"axes": (1,), "keepdim": False}, A.sum(1)),
    ("mean", [A], {"axes": (2,), "keepdim": True}, A.mean(2, keepdims=True)),
    ("amax", [A], {"axes": (0, 2), "keepdim": False}, A.max((0, 2))),
    ("var", [A], {"axes": (2,), "keepdim": False, "correction": 1}, A.var(2, ddof=1)),
    ("softmax", [A], {"axis": 2}, np.exp(A) / np.exp(A).sum(2, keepdims=True)),
    ("cumsum", [A], {"axis": 1}, np.cumsum(A, 1)),
    ("matmul", [A, B], {}, A @ B),
    ("reshape", [A], {"shape": (6, 4)}, A.reshape(6, 4)),
    ("permute", [A], {"dims": (2, 0, 1)}, A.transpose(2, 0, 1)),
    ("expand", [ROW], {"shape": (3, 4)}, np.broadcast_to(ROW, (3, 4))),
    ("slice", [A], {"axis": 2, "start": 1, "end": 4, "step": 2}, A[:, :, 1:4:2]),
    ("concat", [A, A], {"axis": 1}, np.concatenate([A, A], 1)),
    ("pad", [A], {"pads": ((0, 0), (1, 0), (0, 2)), "value": 0.5},
     np.pad(A, ((0, 0), (1, 0), (0, 2)), constant_values=0.5)),
    ("embedding", [A[0], IDX], {}, A[0][IDX]),
    ("gather", [A[0, :2], IDX], {"axis": 1}, np.take_along_axis(A[0, :2], IDX, 1)),
    ("index", [A, IDX0, IDX], {"dims": (0, 2)}, A[IDX0, :, IDX]),
    ("index", [A, IDX], {"dims": (1,)}, A[:, IDX]),
    ("layer_norm", [A], {"normalized": 1, "eps": 1e-5, "weight": False, "bias": False},
     (A - A.mean(-1, keepdims=True)) / np.sqrt(A.var(-1, keepdims=True) + 1e-5)),
]


@pytest.mark.parametrize("op,operands,attrs,expected", RECORDS, ids=[r[0] for r in RECORDS])
def test_each_op_matches_numpy(op, operands, attrs, expected):
    node, value = run(op, operands, attrs)
    assert node.shape == np.asarray(expected).shape
    np.testing.assert_allclose(np.asarray(value, np.float64), expected, rtol=2e-5, atol=2e-6)


def test_conv2d_matches_a_direct_loop():
    x = RNG.standard_normal((1, 4, 6, 5)).astype(np.float32)
    w = RNG.standard_normal((6, 2, 3, 3)).astype(np.float32)
    attrs = {"stride": (2, 1), "padding": (1, 0), "dilation": (1, 2), "groups": 2}
    node, value = run("conv2d", [x, w], attrs)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (0, 0)))
    ref = np.zeros(node.shape, np.float64)
    for o in range(6):
        g = o // 3
        for i in range(node.shape[2]):
            for j in range(node.shape[3]):
                patch = xp[0, 2 * g:2 * g + 2, 2 * i:2 * i + 3, j:j + 5:2]
                ref[0, o, i, j] = (patch * w[o]).sum()
    np.testing.assert_allclose(value, ref, rtol=1e-5, atol=1e-5)


def test_pooling_ceil_mode_and_padding_counts():
    x = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
    # 5 with k=2, s=2, ceil -> 3 windows; the last one holds only column/row 4
    out = pool2d(x, "avg", (2, 2), (2, 2), (0, 0), (1, 1), True)
    assert out.shape == (1, 1, 3, 3)
    assert out[0, 0, 2, 2] == 24.0
    mx = pool2d(x, "max", (3, 3), (2, 2), (1, 1), (1, 1), False)
    assert mx[0, 0, 0, 0] == 6.0 and mx.shape == (1, 1, 3, 3)
    assert conv_out(5, 2, 2, 0, 1, True) == 3


def test_erf_is_accurate_to_fp32_level():
    xs = np.linspace(-4, 4, 101)
    ref = np.array([math.erf(v) for v in xs])
    assert np.max(np.abs(erf(xs.astype(np.float32)) - ref)) < 3e-7


@pytest.mark.parametrize("dtypes,expected", [
    (("int32", "float32"), "float32"), (("bfloat16", "float16"), "float32"),
    (("int8", "uint8"), "int16"), (("bool_", "int32"), "int32"),
])
def test_type_promotion_of_tensors(dtypes, expected):
    g = Graph("t")
    a = g.add("input", (), {"index": 0, "shape": (2,), "dtype": dtypes[0]})
    b = g.add("input", (), {"index": 1, "shape": (2,), "dtype": dtypes[1]})
    assert g.add("add", [a, b]).dtype.name == expected


def test_python_numbers_are_weak_in_promotion():
    g = Graph("t")
    half = g.add("input", (), {"index": 0, "shape": (2,), "dtype": "bfloat16"})
    ints = g.add("input", (), {"index": 1, "shape": (2,), "dtype": "int32"})
    assert g.add("mul", [half, g.add_scalar(0.5, "float32")]).dtype.name == "bfloat16"
    assert g.add("mul", [ints, g.add_scalar(0.5, "float32")]).dtype.name == "float32"
    assert g.add("add", [ints, g.add_scalar(1, "int32")]).dtype.name == "int32"
    assert g.add("div", [ints, ints], {"true_div": True}).dtype.name == "float32"


def test_broadcast_rule_and_its_error():
    assert broadcast((2, 1, 4), (3, 1)) == (2, 3, 4)
    with pytest.raises(IRError, match="do not broadcast"):
        broadcast((2, 3), (4,))


def test_every_primitive_has_an_interpreter_rule():
    from trnsim.compiler.interpret import EVAL
    missing = sorted(op for op in OPS if op not in EVAL and op != "input")
    assert missing == []
