"""The graph-level passes one by one: fold, canonicalize, auto_cast (before/after counts and
numerics against the reference interpreter)."""

import math

import ml_dtypes
import numpy as np

from tests.compiler.zoo import LAYERS
from trnsim.compiler.interpret import evaluate
from trnsim.compiler.ir import Graph
from trnsim.compiler.passes.autocast import auto_cast
from trnsim.compiler.passes.canonicalize import canonicalize, fold_views, recognize_activations
from trnsim.compiler.passes.fold import fold


def inp(g, index, shape, dt="float32"):
    return g.add("input", (), {"index": index, "shape": shape, "dtype": dt}, name=f"x{index}")


def same_numbers(before, after, inputs, tol=1e-6):
    a, b = evaluate(before, inputs), evaluate(after, inputs)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(np.asarray(y, np.float32), np.asarray(x, np.float32),
                                   rtol=tol, atol=tol)


# --- fold ----------------------------------------------------------------------------------
def mask_graph():
    """where(arange(4) + 0 >= 0 ... ) style mask building, plus identities and duplicates."""
    g = Graph("mask")
    x = inp(g, 0, (4, 4))
    r = g.add("arange", (), {"start": 0, "end": 4, "step": 1, "dtype": "int32"})
    r0 = g.add("add", [r, g.add_scalar(0, "int32")])
    rows = g.add("reshape", [r0], {"shape": (4, 1)})
    cols = g.add("reshape", [r], {"shape": (1, 4)})
    keep = g.add("le", [cols, rows])
    keep2 = g.add("le", [cols, rows])  # a duplicate CSE removes
    both = g.add("logical_and", [keep, keep2])
    y = g.add("where", [both, g.add("mul", [x, g.add_scalar(1.0, "float32")]),
                        g.add("full", (), {"shape": (), "value": -1e9, "dtype": "float32"})])
    g.outputs = [y]
    return g.verify()


def test_fold_turns_the_mask_into_one_constant_and_drops_identities():
    g = mask_graph()
    f = fold(g).verify()
    ops = f.op_counts()
    assert ops.get("arange", 0) == 0 and ops.get("le", 0) == 0 and ops.get("mul", 0) == 0
    assert ops["where"] == 1 and len(f.nodes) < len(g.nodes) // 2
    mask = next(f.constant(n) for n in f.nodes if n.op == "constant" and n.dtype.is_bool)
    assert np.array_equal(mask.value(), np.tril(np.ones((4, 4), bool)))
    same_numbers(g, f, [np.arange(16, dtype=np.float32).reshape(4, 4)])


def test_and_with_an_all_true_constant_is_the_other_operand_broadcast():
    """transformers widens a [b, 1, 1, s] padding mask to [b, 1, s, s] by and-ing it with a
    true [s, 1]: fold keeps the padding mask's values and broadcasts them (a view)."""
    g = Graph("mask")
    pad = g.add("cast", [inp(g, 0, (2, 1, 1, 8), "int32")], {"dtype": "bool_"})
    true = g.add_constant(np.ones((1, 1, 8, 1), bool), name="true")
    some = g.add_constant(np.tri(8, dtype=bool).reshape(1, 1, 8, 8), name="tri")
    g.outputs = [g.add("bitwise_and", [true, pad]), g.add("logical_and", [pad, some])]
    f = fold(g.verify()).verify()
    first, second = f.outputs
    assert first.op == "expand" and first.inputs[0].shape == (2, 1, 1, 8)
    assert second.op == "logical_and"  # not all true: kept
    same_numbers(g, f, [np.random.default_rng(0).integers(0, 2, (2, 1, 1, 8), dtype=np.int32)])


def test_folded_float_to_int_casts_truncate_like_torch():
    """T5's relative-position buckets: (log(|i - j| / 8) / log(16) * 8).to(long) on constants.
    A pending cast rounds to nearest; .to(torch.long) truncates toward zero."""
    g = Graph("buckets")
    x = inp(g, 0, (5,))
    pos = g.add("arange", (), {"start": 1, "end": 6, "step": 1, "dtype": "float32"})
    scaled = g.add("mul", [g.add("log", [pos]), g.add_scalar(2.9, "float32")])  # 0, 2.01, 3.19..
    negative = g.add("sub", [g.add_scalar(0.0, "float32"), scaled])  # -0.0, -2.01, -3.19..
    buckets = [g.add("cast", [t], {"dtype": "int32"}) for t in (scaled, negative)]
    g.outputs = [g.add("add", [x, g.add("cast", [b], {"dtype": "float32"})]) for b in buckets]
    f = fold(g.verify()).verify()
    assert f.op_counts().get("cast", 0) == 0  # folded
    want = np.log(np.arange(1, 6, dtype=np.float32)) * np.float32(2.9)
    got = evaluate(f, [np.zeros(5, np.float32)])
    assert np.array_equal(got[0], np.trunc(want)) and np.array_equal(got[1], np.trunc(-want))


def test_fold_keeps_views_of_parameters_and_large_results_unevaluated():
    g = Graph("w")
    x = inp(g, 0, (2, 3))
    w = g.add_constant(np.ones((4, 3), np.float32), name="w", origin="parameter:fc.weight")
    wt = g.add("permute", [w], {"dims": (1, 0)})
    big = g.add("expand", [g.add_scalar(1.0, "float32")], {"shape": (2048, 1024)})
    g.outputs = [g.add("matmul", [x, wt]), g.add("add", [big, g.add_scalar(1.0, "float32")])]
    f = fold(g.verify()).verify()
    assert f.op_counts()["permute"] == 1 and f.op_counts()["expand"] == 1


def test_fold_on_gpt2_removes_the_causal_mask_computation(zoo):
    m = zoo.get("gpt2")
    f = fold(m.graph).verify()
    before, after = m.graph.op_counts(), f.op_counts()
    for op in ("arange", "index", "cumsum", "bitwise_and", "le"):
        assert before.get(op, 0) > 0 and after.get(op, 0) == 0, op
    same_numbers(m.graph, f, m.flat_inputs, tol=1e-5)


# --- canonicalize ----------------------------------------------------------------------------
def test_view_chains_collapse():
    g = Graph("views")
    x = inp(g, 0, (2, 3, 4))
    a = g.add("reshape", [g.add("reshape", [x], {"shape": (6, 4)})], {"shape": (3, 8)})
    p = g.add("permute", [g.add("permute", [x], {"dims": (1, 0, 2)})], {"dims": (1, 0, 2)})
    s = g.add("slice", [g.add("slice", [x], {"axis": 2, "start": 1, "end": 4, "step": 1})],
              {"axis": 2, "start": 1, "end": 3, "step": 2})
    g.outputs = [a, p, s]
    c = fold_views(g.verify()).verify()
    assert c.op_counts() == {"input": 1, "reshape": 1, "slice": 1}
    assert c.outputs[1] is c.inputs[0]
    same_numbers(g, c, [np.arange(24, dtype=np.float32).reshape(2, 3, 4)])


def test_tanh_gelu_arithmetic_becomes_one_gelu_node():
    g = Graph("newgelu")
    x = inp(g, 0, (8,))
    s = lambda v: g.add_scalar(v, "float32")  # noqa: E731
    cube = g.add("pow", [x, s(3.0)])
    inner = g.add("mul", [g.add("add", [x, g.add("mul", [cube, s(0.044715)])]),
                          s(math.sqrt(2 / math.pi))])
    out = g.add("mul", [g.add("mul", [x, s(0.5)]), g.add("add", [g.add("tanh", [inner]), s(1.0)])])
    silu = g.add("mul", [x, g.add("sigmoid", [x])])
    g.outputs = [out, silu]
    c = recognize_activations(g.verify()).verify()
    assert c.op_counts() == {"input": 1, "gelu": 1, "silu": 1}
    assert c.nodes[1].attrs == {"approximate": "tanh"}
    same_numbers(g, c, [np.linspace(-4, 4, 8, dtype=np.float32)], tol=2e-6)


def test_canonicalize_finds_every_gelu_of_gpt2(zoo):
    m = zoo.get("gpt2")
    c = canonicalize(fold(m.graph)).verify()
    assert c.op_counts()["gelu"] == LAYERS and "tanh" not in c.op_counts()
    same_numbers(m.graph, c, m.flat_inputs, tol=1e-5)


# --- auto-cast -------------------------------------------------------------------------------
def linear_graph(w):
    g = Graph("linear")
    x = inp(g, 0, (4, w.shape[0]))
    wn = g.add_constant(w, name="w", origin="parameter:w")
    g.outputs = [g.add("relu", [g.add("matmul", [x, wn])])]
    return g.verify()


def test_matmult_casts_matmul_operands_keeps_fp32_accumulation_and_result():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    x = rng.standard_normal((4, 16)).astype(np.float32)
    g = linear_graph(w)
    c = auto_cast(g, "matmult", "bf16").verify()
    mm = next(n for n in c.nodes if n.op == "matmul")
    assert mm.dtype.name == "float32" and mm.attrs["out_dtype"] == "float32"
    assert [i.dtype.name for i in mm.inputs] == ["bfloat16", "bfloat16"]
    weight = c.constant(mm.inputs[1])
    assert weight.pending.name == "bfloat16" and weight.data is g.constants["w"].data
    assert c.op_counts()["cast"] == 1  # the activation; the weight cast is pending
    bf = lambda a: a.astype(ml_dtypes.bfloat16).astype(np.float64)  # noqa: E731
    expected = np.maximum(bf(x) @ bf(w), 0)
    (out,) = evaluate(c, [x])
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
    (fp32,) = evaluate(g, [x])
    assert not np.allclose(out, fp32, rtol=1e-6, atol=0)


def test_all_casts_every_fp32_tensor_and_restores_output_dtypes():
    w = np.ones((16, 8), np.float32)
    c = auto_cast(linear_graph(w), "all", "bf16").verify()
    inner = [n for n in c.nodes if n.op not in ("input",) and n is not c.outputs[0]]
    assert all(n.dtype.name == "bfloat16" for n in inner)
    assert c.outputs[0].dtype.name == "float32" and c.outputs[0].op == "cast"


def test_none_is_the_identity_and_tf32_all_only_touches_matmuls():
    g = linear_graph(np.ones((16, 8), np.float32))
    assert auto_cast(g, "none") is g
    c = auto_cast(g, "all", "tf32").verify()
    assert c.op_counts()["relu"] == 1
    relu = next(n for n in c.nodes if n.op == "relu")
    assert relu.dtype.name == "float32"
    assert next(n for n in c.nodes if n.op == "matmul").inputs[1].dtype.name == "tfloat32"


def test_fp8_weights_are_stored_as_float8(zoo):
    m = zoo.get("mlp")
    c = auto_cast(canonicalize(fold(m.graph)), "matmult", "fp8_e4m3").verify()
    weights = [c.constant(n) for n in c.nodes if n.op == "constant" and n.rank == 2]
    assert weights and all(w.dtype.name == "float8_e4m3" for w in weights)
    assert c.weight_bytes() < m.graph.weight_bytes() / 2


def test_matmult_on_bert_changes_numbers_only_at_bf16_level(zoo):
    m = zoo.get("bert")
    g = canonicalize(fold(m.graph))
    c = auto_cast(g, "matmult", "bf16").verify()
    a = evaluate(g, m.flat_inputs)[0]
    b = evaluate(c, m.flat_inputs)[0]
    err = float(np.max(np.abs(a - b)))
    assert 1e-5 < err < 0.1
