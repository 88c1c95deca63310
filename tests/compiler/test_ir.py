"""Graph IR: building, verify() catching each kind of inconsistency, pretty(), rewriting, DCE."""

import ml_dtypes
import numpy as np
import pytest

from trnsim.compiler.errors import IRError
from trnsim.compiler.interpret import evaluate
from trnsim.compiler.ir import Constant, Graph, Node, Rewriter
from trnsim.numerics import dtype


def small_graph():
    g = Graph("small")
    x = g.add("input", (), {"index": 0, "shape": (2, 3), "dtype": "float32"}, name="x")
    w = g.add_constant(np.arange(12, dtype=np.float32).reshape(3, 4), name="w", origin="parameter:w")
    y = g.add("matmul", [x, w], source="model.py:7")
    z = g.add("relu", [y])
    g.add("exp", [y])  # dead: nothing reads it
    g.outputs = [z]
    return g


def test_add_infers_shape_and_dtype_and_keeps_source():
    g = small_graph()
    mm = g.nodes[2]
    assert (mm.op, mm.shape, mm.dtype.name, mm.source) == ("matmul", (2, 4), "float32", "model.py:7")
    assert g.verify() is g


def test_verify_rejects_a_shape_that_disagrees_with_the_rule():
    g = small_graph()
    g.nodes[3].shape = (2, 5)
    with pytest.raises(IRError, match="relu rule gives"):
        g.verify()


def test_verify_rejects_use_before_definition_and_duplicate_names():
    g = small_graph()
    g.nodes[2], g.nodes[3] = g.nodes[3], g.nodes[2]
    with pytest.raises(IRError, match="not defined before"):
        g.verify()
    g = small_graph()
    g.nodes[4].name = g.nodes[3].name
    with pytest.raises(IRError, match="defined twice"):
        g.verify()


def test_verify_rejects_dangling_outputs_and_missing_constant_data():
    g = small_graph()
    g.outputs = [Node("ghost", "relu", (), {}, (1,), dtype("float32"))]
    with pytest.raises(IRError, match="not a node"):
        g.verify()
    g = small_graph()
    del g.constants["w"]
    with pytest.raises(IRError, match="no data"):
        g.verify()


def test_bad_operands_are_rejected_when_added():
    g = small_graph()
    x = g.nodes[0]
    with pytest.raises(IRError, match="contraction"):
        g.add("matmul", [x, x])
    with pytest.raises(IRError, match="missing attribute"):
        g.add("softmax", [x])


def test_pretty_prints_one_line_per_node_with_types_and_sources():
    text = small_graph().pretty()
    assert "%matmul: float32[2,4] = matmul(%x, %w)  # model.py:7" in text
    assert "<parameter:w>" in text
    assert text.splitlines()[-1] == "  return (%relu)"


def test_rewriter_leaves_the_input_graph_alone_and_drops_dead_nodes():
    g = small_graph()
    rw = Rewriter(g)
    for node in g.nodes:
        if node.op == "relu":
            rw.replace(node, rw.emit("sigmoid", rw.operands(node)))
        else:
            rw.keep(node)
    new = rw.finish().verify()
    assert [n.op for n in new.nodes] == ["input", "constant", "matmul", "sigmoid"]
    assert [n.op for n in g.nodes] == ["input", "constant", "matmul", "relu", "exp"]
    x = np.ones((2, 3), np.float32)
    (out,) = evaluate(new, [x])
    np.testing.assert_allclose(out, 1 / (1 + np.exp(-(x @ g.constants["w"].data))), rtol=1e-6)


def test_constant_pending_cast_is_applied_only_on_demand():
    data = np.array([1.0, 1.00390625, 3.0], np.float32)  # 1 + 2^-8 rounds to 1.0 in bf16 (RNE)
    c = Constant(data, dtype("float32"), "parameter:w").cast_to(dtype("bfloat16"))
    assert c.data is data and c.pending.name == "bfloat16"
    assert c.nbytes == 6
    value = c.value()
    assert value.dtype == ml_dtypes.bfloat16
    assert value.astype(np.float32).tolist() == [1.0, 1.0, 3.0]


def test_weight_bytes_counts_each_used_constant_once_in_its_declared_dtype():
    g = small_graph()
    assert g.weight_bytes() == 12 * 4


def test_keep_takes_the_type_of_alike_operands_and_reinfers_changed_ones():
    g = small_graph()
    x, w, mm, relu = g.nodes[:4]
    rw = Rewriter(g)
    rw.keep(x)
    rw.keep(w)
    kept = rw.keep(mm)  # operands alike: the node's own type, not re-derived
    assert (kept.shape, kept.dtype, kept.attrs is not mm.attrs) == (mm.shape, mm.dtype, True)
    rw.replace(mm, rw.emit("cast", [kept], {"dtype": "bfloat16"}))  # a cast: another op, dtype
    out = rw.keep(relu)
    assert (out.shape, out.dtype.name) == ((2, 4), "bfloat16")
    rw.new.outputs = [out]
    rw.new.verify()
