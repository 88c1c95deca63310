"""Elementwise fusion, and the 1:1 mapping of every remaining primitive onto a kernel.

Groups of elementwise ops in which each producer is used only by the next (a tree ending at one
root) become one ``k.elementwise`` node with a `Program`: a kernel that reads each operand once
and writes once, instead of one HBM round trip per op. After this pass a graph is at kernel
level (`trnsim.compiler.fused.check_kernel_level`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trnsim.compiler.fused import Step
from trnsim.compiler.ir import Graph, Node, Rewriter
from trnsim.compiler.ops import REDUCE
from trnsim.compiler.ops import kind as op_kind
from trnsim.compiler.passes.match import literal, only_user


def fuse_elementwise(graph: Graph) -> Graph:
    users = graph.users()
    outputs = {id(o) for o in graph.outputs}
    root_of: dict[int, Node] = {}  # producer -> the root of the group it joins
    for node in reversed(graph.nodes):
        if op_kind(node.op) != "elementwise" or node.op == "scalar":
            continue
        root = root_of.get(id(node), node)
        for x in node.inputs:
            if op_kind(x.op) == "elementwise" and only_user(x, users, outputs) is node and \
                    x.shape == node.shape:
                root_of[id(x)] = root
    members: dict[int, list[Node]] = {}
    for node in graph.nodes:
        if op_kind(node.op) == "elementwise":
            members.setdefault(id(root_of.get(id(node), node)), []).append(node)
    rw = Rewriter(graph)
    for node in graph.nodes:
        if op_kind(node.op) == "elementwise":
            if id(node) in root_of:
                continue  # emitted with its group's root
            rw.replace(node, _emit_group(rw, graph, members[id(node)]))
        elif node.op in _ONE_TO_ONE:
            rw.replace(node, _ONE_TO_ONE[node.op](rw, graph, node))
        else:
            rw.keep(node)
    return rw.finish()


def _emit_group(rw: Rewriter, graph: Graph, group: list[Node]) -> Node:
    inputs: list[Node] = []
    steps: list[Step] = []
    ref: dict[int, str] = {}
    for node in group:  # graph order: producers first
        args: list[Any] = []
        for x in node.inputs:
            if id(x) in ref:
                args.append(ref[id(x)])
                continue
            lit = literal(x, graph) if x.numel == 1 and x.rank <= 1 else None
            if lit is not None:
                args.append(lit)
                continue
            operand = rw.get(x)
            if operand not in inputs:
                inputs.append(operand)
            args.append(f"in{inputs.index(operand)}")
        steps.append(Step(node.op, tuple(args), tuple(sorted(node.attrs.items())),
                          node.dtype.name))
        ref[id(node)] = f"s{len(steps) - 1}"
    root = group[-1]
    if not inputs:  # literals only (folding skipped it): evaluate once, here
        from trnsim.compiler.kernel_ops import run_program
        value = np.broadcast_to(run_program(tuple(steps), []), root.shape)
        from trnsim.compiler.interpret import store
        return rw.new.add_constant(np.ascontiguousarray(store(value, root.dtype)),
                                   name=root.name, source=root.source)
    out = rw.emit("k.elementwise", inputs, {"program": tuple(steps), "dtype": root.dtype.name},
                  source=root.source, name="elementwise")
    if out.shape != root.shape:  # every operand was smaller than the output (broadcast only)
        out = rw.emit("expand", [out], {"shape": root.shape}, source=root.source)
    return out


# --- 1:1 kernels --------------------------------------------------------------------------
def _reduce(rw: Rewriter, graph: Graph, node: Node) -> Node:
    attrs = {"op": node.op, "axes": node.attrs["axes"], "keepdim": node.attrs["keepdim"],
             "prologue": (), "dtype": node.dtype.name}
    if node.op == "var":
        attrs["correction"] = node.attrs.get("correction", 1)
    return rw.emit("k.reduce", rw.operands(node), attrs, source=node.source, name="reduce")


def _same(kernel: str, *keys: str, **fixed: Any):
    def emit(rw: Rewriter, graph: Graph, node: Node) -> Node:
        attrs = {k: node.attrs[k] for k in keys if k in node.attrs}
        attrs.update(fixed)
        attrs["dtype"] = node.dtype.name
        return rw.emit(kernel, rw.operands(node), attrs, source=node.source,
                       name=kernel.split(".")[1])
    return emit


def _pool(kind: str):
    def emit(rw: Rewriter, graph: Graph, node: Node) -> Node:
        a = node.attrs
        attrs = {"kind": kind, "kernel": a.get("kernel"), "stride": a.get("stride"),
                 "padding": a.get("padding"), "dilation": a.get("dilation", (1, 1)),
                 "ceil_mode": a.get("ceil_mode", False),
                 "count_include_pad": a.get("count_include_pad", True),
                 "divisor_override": a.get("divisor_override"),
                 "output_size": a.get("output_size"), "dtype": node.dtype.name}
        return rw.emit("k.pool2d", rw.operands(node), attrs, source=node.source, name="pool")
    return emit


def _gather(kind: str):
    def emit(rw: Rewriter, graph: Graph, node: Node) -> Node:
        attrs = {"kind": kind, **node.attrs, "dtype": node.dtype.name}
        return rw.emit("k.gather", rw.operands(node), attrs, source=node.source, name=kind)
    return emit


def _softmax(rw: Rewriter, graph: Graph, node: Node) -> Node:
    return rw.emit("k.softmax", rw.operands(node), {
        "axis": node.attrs["axis"], "scale": 1.0, "log": node.op == "log_softmax",
        "mask_kind": "none", "dtype": node.dtype.name,
        **({"safe": True} if node.attrs.get("safe") else {})}, source=node.source, name="softmax")


def _layer_norm(rw: Rewriter, graph: Graph, node: Node) -> Node:
    a = node.attrs
    return rw.emit("k.norm", rw.operands(node), {
        "kind": "layer", "normalized": a["normalized"], "eps": a["eps"], "residual": False,
        "weight": a["weight"], "bias": a["bias"], "dtype": node.dtype.name},
        source=node.source, name="layernorm")


def _batch_norm(rw: Rewriter, graph: Graph, node: Node) -> Node:
    """Inference batch norm alone = one per-channel affine: y = x * s + t (s, t precomputed)."""
    x, w, b, mean, var = rw.operands(node)
    c = node.shape[1]
    view = (c,) + (1,) * (node.rank - 2)
    if all(p.op == "constant" for p in (w, b, mean, var)):
        vals = [np.asarray(rw.new.constant(p).value(), np.float32) for p in (w, b, mean, var)]
        s = vals[0] / np.sqrt(vals[3] + np.float32(node.attrs["eps"]))
        t = vals[1] - vals[2] * s
        sn = rw.new.add_constant(s.reshape(view), name=f"{node.name}_scale", dt=w.dtype)
        tn = rw.new.add_constant(t.reshape(view), name=f"{node.name}_shift", dt=w.dtype)
        program = (Step("mul", ("in0", "in1"), (), node.dtype.name),
                   Step("add", ("s0", "in2"), (), node.dtype.name))
        return rw.emit("k.elementwise", [x, sn, tn], {"program": program,
                                                      "dtype": node.dtype.name},
                       source=node.source, name="batchnorm")
    params = [rw.emit("reshape", [p], {"shape": view}) for p in (w, b, mean, var)]
    dt = node.dtype.name
    program = (Step("add", ("in4", float(node.attrs["eps"])), (), dt),
               Step("rsqrt", ("s0",), (), dt), Step("mul", ("s1", "in1"), (), dt),
               Step("sub", ("in0", "in3"), (), dt), Step("mul", ("s3", "s2"), (), dt),
               Step("add", ("s4", "in2"), (), dt))
    return rw.emit("k.elementwise", [x, *params], {"program": program, "dtype": dt},
                   source=node.source, name="batchnorm")


def _matmul(rw: Rewriter, graph: Graph, node: Node) -> Node:
    raise AssertionError("matmul left for fuse_elementwise: fuse_matmul must run first")


_ONE_TO_ONE = {
    **{op: _reduce for op in REDUCE},
    "cumsum": _same("k.cumsum", "axis"),
    "topk": _same("k.topk", "k", "axis", "largest", "part"),
    "scatter": _same("k.scatter", "accumulate"),
    "concat": _same("k.concat", "axis"),
    "pad": _same("k.pad", "pads", "value"),
    "max_pool2d": _pool("max"), "avg_pool2d": _pool("avg"),
    "adaptive_avg_pool2d": _pool("adaptive_avg"),
    "embedding": _gather("embedding"), "gather": _gather("gather"), "index": _gather("index"),
    "index_select": _gather("index_select"),
    "softmax": _softmax, "log_softmax": _softmax, "layer_norm": _layer_norm,
    "batch_norm": _batch_norm, "matmul": _matmul, "conv2d": _matmul, "sdpa": _matmul,
}
