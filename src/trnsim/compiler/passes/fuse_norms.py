"""Normalisation and softmax fusion: one kernel per LayerNorm, RMSNorm and softmax.

A LayerNorm kernel reads its row once, computes the statistics in fp32 and writes the scaled
result; a preceding residual ``add`` used only by the norm is read in the same pass (BERT's
``LayerNorm(hidden + input)``). RMSNorm has no ATen op: it is matched from its arithmetic,
``x * rsqrt(mean(x^2, -1, keepdim) + eps) (* weight)``. Softmax absorbs a scalar scale and an
additive mask that only it reads.
"""

from __future__ import annotations

from trnsim.compiler.ir import Graph, Node, Rewriter
from trnsim.compiler.passes.match import literal, only_user, operand_pairs, peel_float_cast


def fuse_norms(graph: Graph) -> Graph:
    users = graph.users()
    outputs = {id(o) for o in graph.outputs}
    rw = Rewriter(graph)
    for node in graph.nodes:
        if node.op == "layer_norm":
            rw.replace(node, _layer_norm(rw, node, users, outputs))
        elif node.op in ("softmax", "log_softmax"):
            rw.replace(node, _softmax(rw, graph, node, users, outputs))
        else:
            rms = _match_rms(node, graph, users, outputs)
            if rms is None:
                rw.keep(node)
            else:
                x, eps, weight = rms
                inputs = [rw.get(x)] + ([rw.get(weight)] if weight is not None else [])
                rw.replace(node, rw.emit("k.norm", inputs, {
                    "kind": "rms", "normalized": 1, "eps": eps, "residual": False,
                    "weight": weight is not None, "bias": False, "dtype": node.dtype.name},
                    source=node.source, name="rmsnorm"))
    return rw.finish()


def _layer_norm(rw: Rewriter, node: Node, users: dict[Node, list[Node]], outputs: set[int]
                ) -> Node:
    x = node.inputs[0]
    inputs = [rw.get(x)]
    residual = False
    if x.op == "add" and only_user(x, users, outputs) is node and \
            x.inputs[0].shape == x.inputs[1].shape == x.shape and \
            x.inputs[0].dtype == x.inputs[1].dtype == x.dtype:
        inputs = [rw.get(x.inputs[0]), rw.get(x.inputs[1])]
        residual = True
    inputs += [rw.get(p) for p in node.inputs[1:]]
    return rw.emit("k.norm", inputs, {
        "kind": "layer", "normalized": node.attrs["normalized"], "eps": node.attrs["eps"],
        "residual": residual, "weight": node.attrs["weight"], "bias": node.attrs["bias"],
        "dtype": node.dtype.name}, source=node.source, name="layernorm")


def _softmax(rw: Rewriter, graph: Graph, node: Node, users: dict[Node, list[Node]],
             outputs: set[int]) -> Node:
    x = node.inputs[0]
    mask = None
    scale = 1.0
    if x.op == "add" and only_user(x, users, outputs) is node:
        for s, m in operand_pairs(x):
            if s.shape == x.shape and m.dtype.is_float:
                x, mask = s, m
                break
    if x.op in ("mul", "div") and only_user(x, users, outputs) is not None:
        value = literal(x.inputs[1], graph)
        if value is not None and not isinstance(value, bool) and value != 0 and x.shape == \
                x.inputs[0].shape:
            scale = float(value) if x.op == "mul" else 1.0 / float(value)
            x = x.inputs[0]
    inputs = [rw.get(x)] + ([rw.get(mask)] if mask is not None else [])
    return rw.emit("k.softmax", inputs, {
        "axis": node.attrs["axis"], "scale": scale, "log": node.op == "log_softmax",
        "mask_kind": "bias" if mask is not None else "none", "dtype": node.dtype.name,
        **({"safe": True} if node.attrs.get("safe") else {})}, source=node.source, name="softmax")


def _match_rms(node: Node, graph: Graph, users: dict[Node, list[Node]], outputs: set[int]
               ) -> tuple[Node, float, Node | None] | None:
    """node = [w *] (x * rsqrt(mean(x*x | x^2, last, keepdim) + eps)); returns (x, eps, w)."""
    if node.op != "mul":
        return None
    weight = None
    core = node
    for a, w in operand_pairs(node):
        if a.op == "mul" and w.rank == 1 and w.shape == node.shape[-1:] and \
                only_user(a, users, outputs) is node and _rms_core(a, graph) is not None:
            core, weight = a, w
            break
    found = _rms_core(core, graph)
    if found is None:
        return None
    x, eps = found
    return x, eps, weight


def _rms_core(node: Node, graph: Graph) -> tuple[Node, float] | None:
    if node.op != "mul":
        return None
    for x, r in operand_pairs(node):
        if r.op != "rsqrt" or r.inputs[0].op != "add":
            continue
        for mean, eps_node in operand_pairs(r.inputs[0]):
            eps = literal(eps_node, graph)
            if eps is None or mean.op != "mean" or not mean.attrs["keepdim"] or \
                    tuple(mean.attrs["axes"]) != (mean.inputs[0].rank - 1,):
                continue
            sq = mean.inputs[0]
            base = peel_float_cast(x)[0]
            if (sq.op == "pow" and literal(sq.inputs[1], graph) == 2 and sq.inputs[0] in (x, base))\
                    or (sq.op == "mul" and sq.inputs[0] is sq.inputs[1] and sq.inputs[0] in (x, base)):
                return x, float(eps)
    return None
