"""Layout (stationary choice, view access patterns), HBM planning and scheduling, on small
hand-built kernel-level graphs (no torch needed)."""

import numpy as np
import pytest

from trnsim.compiler.errors import ModelTooLargeError
from trnsim.compiler.fused import Step
from trnsim.compiler.ir import Graph
from trnsim.compiler.passes.layout import choose_layout, choose_stationary, reshape_strides
from trnsim.compiler.passes.memory import device_budget, plan_memory
from trnsim.compiler.passes.schedule import schedule
from trnsim.hardware import core

V2 = core("v2")


def test_stationary_operand_is_the_cheaper_one_to_load():
    assert choose_stationary(16, 4096, V2) == "a"  # few tokens: hold them, stream the weights
    assert choose_stationary(4096, 64, V2) == "b"  # many tokens, few features: hold the weights
    assert choose_stationary(128, 128, V2) == "a"


def view_graph():
    g = Graph("views")
    x = g.add("input", (), {"index": 0, "shape": (2, 16, 4, 8), "dtype": "float32"})
    alias = g.add("reshape", [x], {"shape": (32, 32)})
    heads = g.add("permute", [x], {"dims": (0, 2, 1, 3)})
    merged = g.add("reshape", [heads], {"shape": (8, 128)})
    bcast = g.add("expand", [g.add("slice", [x], {"axis": 1, "start": 3, "end": 4, "step": 1})],
                  {"shape": (2, 5, 4, 8)})
    g.outputs = [alias, heads, merged, bcast]
    return g.verify()


def test_views_are_classified_and_given_access_patterns():
    out = choose_layout(view_graph(), V2).verify()
    by_name = {n.op + str(n.shape): n.attrs for n in out.nodes}
    alias = by_name["reshape(32, 32)"]
    assert alias["fold"] == "alias" and alias["access"] == (0, ((32, 32), (1, 32)))
    heads = by_name["permute(2, 4, 16, 8)"]
    assert heads["fold"] == "dma" and heads["access"] == (0, ((512, 2), (8, 4), (32, 16), (1, 8)))
    assert by_name["reshape(8, 128)"]["fold"] == "copy"  # merging heads back needs a copy
    bcast = by_name["expand(2, 5, 4, 8)"]
    assert bcast["fold"] == "dma" and bcast["access"] == (96, ((512, 2), (0, 5), (8, 4), (1, 8)))


def test_a_row_broadcast_is_read_in_place_by_elementwise_kernels_only():
    """A mean's gradient ([rows, 1] expanded along the rows): an element-wise kernel loads the
    column once and spreads it on chip, so it reads the view in place; other readers get it
    materialised (one descriptor per element otherwise)."""
    def graph(reader: str):
        g = Graph("broadcast")
        x = g.add("input", (), {"index": 0, "shape": (64, 1), "dtype": "float32"})
        y = g.add("input", (), {"index": 1, "shape": (64, 32), "dtype": "float32"})
        wide = g.add("expand", [x], {"shape": (64, 32)})
        if reader == "elementwise":
            out = g.add("k.elementwise", [wide, y], {"program": (Step("mul", ("in0", "in1")),),
                                                      "dtype": "float32"})
        else:
            out = g.add("k.reduce", [wide], {"op": "sum", "axes": (0,), "keepdim": False,
                                             "prologue": (), "dtype": "float32"})
        g.outputs = [out]
        return choose_layout(g.verify(), V2)

    def fold(g):
        return next(n for n in g.nodes if n.op == "expand").attrs["fold"]

    assert fold(graph("elementwise")) == "dma"
    assert fold(graph("reduce")) == "copy"


def test_reshape_strides_follows_numpys_no_copy_rule():
    assert reshape_strides([4, 6], [6, 1], [2, 2, 6]) == [12, 6, 1]
    assert reshape_strides([6, 4], [1, 6], [24]) is None  # a transposed matrix cannot flatten
    a = np.zeros((3, 8))[:, ::2]
    assert reshape_strides([3, 4], [8, 2], [3, 2, 2]) == [s // 8 for s in a.reshape(3, 2, 2)
                                                         .strides]


def chain_graph(width=1024):
    """x -> 4 elementwise kernels in a row, each reading a weight; only the last is returned."""
    g = Graph("chain")
    x = g.add("input", (), {"index": 0, "shape": (width,), "dtype": "float32"})
    value = x
    for i in range(4):
        w = g.add_constant(np.full(width, i, np.float32), name=f"w{i}", origin="parameter:w")
        value = g.add("k.elementwise", [value, w], {
            "program": (Step("add", ("in0", "in1")),), "dtype": "float32"})
    g.outputs = [value]
    return g.verify()


def test_activations_reuse_freed_buffers_and_weights_stay_resident():
    plan = plan_memory(chain_graph(), "inf2.xlarge").meta["memory_plan"]
    assert plan.weight_bytes == 4 * 4096
    assert plan.naive_activation_bytes == 5 * 4096
    assert plan.activation_bytes == 2 * 4096  # input, then two buffers ping-pong
    offsets = {off for off, _ in plan.activations.values()}
    assert len(offsets) == 2
    assert plan.total_bytes == plan.weight_bytes + plan.activation_bytes


def test_per_core_share_of_device_memory():
    budget, name = device_budget("inf2.xlarge")
    assert (budget, name) == (16 * 2**30, "inf2.xlarge")  # 32 GiB chip, 2 NeuronCores
    assert device_budget("inf2.xlarge", cores=2)[0] == 32 * 2**30


def test_a_model_too_large_names_its_bytes_and_the_devices():
    g = Graph("huge")
    ids = g.add("input", (), {"index": 0, "shape": (2,), "dtype": "int32"})
    table = np.broadcast_to(np.zeros(1, np.float32), (5 * 2**30 // 4, 4))  # 20 GiB, no memory
    w = g.add_constant(table, name="table", origin="parameter:table")
    g.outputs = [g.add("k.gather", [w, ids], {"kind": "embedding", "dtype": "float32"})]
    with pytest.raises(ModelTooLargeError) as info:
        plan_memory(g.verify(), "inf2.xlarge")
    text = str(info.value)
    assert "20.00 GiB (21474836480 bytes) weights" in text
    assert "exceeds limit 16.00 GiB (17179869184 bytes)" in text and "inf2.xlarge" in text
    assert info.value.model_bytes == 21474836480 + 2 * 64
    plan_memory(g, "inf2.xlarge", cores=2)  # two cores' share (32 GiB) holds it


def test_schedule_prefetches_the_next_kernels_weights():
    out = schedule(chain_graph())
    ks = [n for n in out.nodes if n.op == "k.elementwise"]
    assert [k.attrs["prefetch"] for k in ks] == [("w1",), ("w2",), ("w3",), ()]
    assert out.meta["schedule"] == [k.name for k in ks]
