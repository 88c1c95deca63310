"""Matmul and convolution fusion: operand casts/transposes in, epilogues out.

A ``k.matmul`` absorbs, on the way in, auto-cast's casts (the kernel casts while loading) and
a transpose of either operand (TensorE contracts over the partition axis, so which operand is
stored transposed is a matter of DMA pattern and stationary choice, not a separate pass over
memory). On the way out it absorbs the bias add and a chain of single-use elementwise ops (GELU,
tanh, ReLU, residual add, scaling, casts) into its epilogue: these run while PSUM is evicted to
SBUF, instead of as separate kernels that reread the result from HBM. The chain may pass through
a reshape that only regroups the leading (row) axes, as ``addmm -> view(B, S, N)`` does.

A ``k.conv2d`` absorbs a following inference batch norm into its weights and bias (computed
here, once), then an epilogue chain the same way (ReLU, residual add).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from trnsim.compiler.fused import Step
from trnsim.compiler.ir import Graph, Node, Rewriter
from trnsim.compiler.ops import kind as op_kind
from trnsim.compiler.passes.match import (
    is_transpose_last2,
    literal,
    only_user,
    peel_float_cast,
)


def fuse_matmul(graph: Graph) -> Graph:
    users = graph.users()
    outputs = {id(o) for o in graph.outputs}
    plans: dict[Node, tuple[Node, list[Node], Node | None]] = {}
    absorbed: set[int] = set()
    for node in graph.nodes:
        if node.op in ("matmul", "conv2d") and id(node) not in absorbed:
            bn = _foldable_bn(node, graph, users, outputs) if node.op == "conv2d" else None
            start = bn if bn is not None else node
            chain = _epilogue_chain(start, users, outputs, node, absorbed)
            tail = chain[-1] if chain else start
            plans[tail] = (node, chain, bn)
            absorbed.update(id(n) for n in chain)
    rw = Rewriter(graph)
    for node in graph.nodes:
        plan = plans.get(node)
        if plan is None:
            rw.keep(node)
            continue
        core, chain, bn = plan
        emit = _emit_matmul if core.op == "matmul" else _emit_conv
        rw.replace(node, emit(rw, graph, core, chain, bn))
    return rw.finish()


# --- planning -------------------------------------------------------------------------------
def _foldable_bn(conv: Node, graph: Graph, users: dict[Node, list[Node]], outputs: set[int]
                 ) -> Node | None:
    bn = only_user(conv, users, outputs)
    if bn is None or bn.op != "batch_norm" or bn.inputs[0] is not conv:
        return None
    params = (conv.inputs[1], *bn.inputs[1:], *conv.inputs[2:])
    return bn if all(p.op == "constant" for p in params) else None


def _epilogue_chain(start: Node, users: dict[Node, list[Node]], outputs: set[int], core: Node,
                    taken: set[int]) -> list[Node]:
    """Single-use elementwise successors of `start` (through row-regrouping reshapes) that no
    other matmul's epilogue has claimed."""
    chain: list[Node] = []
    tail = start
    rows = core.shape if core.op == "matmul" else None
    while True:
        nxt = only_user(tail, users, outputs)
        if nxt is None or id(nxt) in taken:
            break
        if nxt.op == "reshape" and rows is not None and _regroups_rows(nxt, rows):
            after = only_user(nxt, users, outputs)
            if after is None or id(after) in taken or op_kind(after.op) != "elementwise" or \
                    not _extras_ok(after, nxt, rows):
                break
            chain.extend([nxt, after])
            tail = after
            continue
        if op_kind(nxt.op) != "elementwise" or nxt.shape != tail.shape or \
                not _extras_ok(nxt, tail, rows):
            break
        chain.append(nxt)
        tail = nxt
    while chain and chain[-1].op == "reshape":
        chain.pop()
    return chain


def _regroups_rows(reshape: Node, rows: tuple[int, ...]) -> bool:
    return reshape.shape[-1:] == rows[-1:] and math.prod(reshape.shape[:-1]) == math.prod(rows[:-1])


def _extras_ok(node: Node, chain_value: Node, rows: tuple[int, ...] | None) -> bool:
    """The other operands must be scalars, or tensors a (re-grouped) epilogue can read."""
    for x in node.inputs:
        if x is chain_value or x.op == "scalar" or x.shape == chain_value.shape or x.numel == 1:
            continue
        if rows is not None and x.shape[-1:] == chain_value.shape[-1:] and \
                all(s == 1 for s in x.shape[:-1]):
            continue  # a row vector (bias-like), broadcast over every row
        if rows is None and x.rank == 3 and x.shape[1:] == (1, 1):
            continue  # a per-channel vector [C, 1, 1] of a convolution
        return False
    return True


# --- emission -------------------------------------------------------------------------------
def _emit_matmul(rw: Rewriter, graph: Graph, core: Node, chain: list[Node], bn: None) -> Node:
    a, b = (rw.get(x) for x in core.inputs)
    (a, ca), (b, cb) = peel_float_cast(a), peel_float_cast(b)
    compute = ca or cb or (a.dtype.name if a.dtype == b.dtype else "float32")
    ta = tb = False
    if is_transpose_last2(a):
        a, ta = a.inputs[0], True
    if is_transpose_last2(b):
        b, tb = b.inputs[0], True
    m, n = core.shape[-2:]
    k = core.inputs[0].shape[-1]
    inputs = [a, b]
    bias = False
    steps: list[Step] = []
    rest = list(chain)
    if rest and rest[0].op == "add" and _is_row_vector(rest[0], core):
        other = next(x for x in rest[0].inputs if x is not core)
        vec = rw.get(other)
        if vec.shape != (n,):
            vec = rw.emit("reshape", [vec], {"shape": (n,)}, source=core.source)
        inputs.append(vec)
        bias = True
        prev_value = rest.pop(0)
    else:
        prev_value = core
    steps = _program(rw, graph, rest, prev_value, inputs, core.shape)
    tail = chain[-1] if chain else core
    attrs = {"m": m, "k": k, "n": n, "batch": core.shape[:-2], "transpose_a": ta,
             "transpose_b": tb, "bias": bias, "stationary": "a", "weight_layout": None,
             "compute_dtype": compute, "accumulate_dtype": "float32", "epilogue": tuple(steps),
             "dtype": tail.dtype.name}
    out = rw.emit("k.matmul", inputs, attrs, source=core.source, name="matmul")
    if out.shape != tail.shape:
        out = rw.emit("reshape", [out], {"shape": tail.shape}, source=tail.source)
    return out


def _is_row_vector(add: Node, core: Node) -> bool:
    other = [x for x in add.inputs if x is not core]
    if len(other) != 1 or add.shape != core.shape or not other[0].dtype.is_float:
        return False
    x = other[0]
    return x.shape[-1:] == core.shape[-1:] and all(s == 1 for s in x.shape[:-1])


def _program(rw: Rewriter, graph: Graph, chain: list[Node], start: Node, inputs: list[Node],
             rows: tuple[int, ...]) -> list[Step]:
    """Epilogue steps for `chain`; extra operands are appended to `inputs` (regrouped to rows)."""
    steps: list[Step] = []
    current = start
    for node in chain:
        if node.op == "reshape":
            current = node
            continue
        args: list[Any] = []
        for x in node.inputs:
            if x is current:
                args.append("acc" if not steps else f"s{len(steps) - 1}")
                continue
            lit = literal(x, graph)
            if lit is not None:
                args.append(lit)
                continue
            operand = rw.get(x)
            if operand.shape == current.shape and current.shape != rows:
                operand = rw.emit("reshape", [operand], {"shape": rows}, source=node.source)
            elif operand.shape != rows and operand.numel == rows[-1]:
                operand = rw.emit("reshape", [operand], {"shape": (rows[-1],)}, source=node.source)
            args.append(f"in{len(inputs)}")
            inputs.append(operand)
        steps.append(Step(node.op, tuple(args), tuple(sorted(node.attrs.items())),
                          node.dtype.name))
        current = node
    return steps


def _emit_conv(rw: Rewriter, graph: Graph, core: Node, chain: list[Node], bn: Node | None
               ) -> Node:
    x, w = rw.get(core.inputs[0]), rw.get(core.inputs[1])
    (x, cx), compute_w = peel_float_cast(x), w.dtype.name
    compute = cx or compute_w
    bias_node = rw.get(core.inputs[2]) if len(core.inputs) == 3 else None
    if bn is not None:
        w, bias_node = _fold_bn(rw, graph, core, bn)
    inputs = [x, w] + ([bias_node] if bias_node is not None else [])
    start = bn if bn is not None else core
    steps = _program(rw, graph, chain, start, inputs, core.shape)
    tail = chain[-1] if chain else start
    attrs = {**{k: core.attrs[k] for k in ("stride", "padding", "dilation", "groups")},
             "bias": bias_node is not None, "folded_bn": bn is not None,
             "compute_dtype": compute, "accumulate_dtype": "float32", "epilogue": tuple(steps),
             "dtype": tail.dtype.name}
    return rw.emit("k.conv2d", inputs, attrs, source=core.source, name="conv")


def _f32(graph: Graph, node: Node) -> np.ndarray:
    c = graph.constant(node)
    return np.asarray(c.data if c.pending is not None else c.value(), dtype=np.float32)


def _fold_bn(rw: Rewriter, graph: Graph, conv: Node, bn: Node) -> tuple[Node, Node]:
    """w' = w * g / sqrt(var + eps); b' = (b - mean) * g / sqrt(var + eps) + beta (fp32)."""
    gamma, beta, mean, var = (_f32(graph, p) for p in bn.inputs[1:])
    scale = gamma / np.sqrt(var + np.float32(bn.attrs["eps"]))
    w_node = conv.inputs[1]
    w = _f32(graph, w_node) * scale[:, None, None, None]
    b = _f32(graph, conv.inputs[2]) if len(conv.inputs) == 3 else np.zeros_like(scale)
    bias = (b - mean) * scale + beta
    wn = rw.new.add_constant(w.astype(np.float32), name=f"{w_node.name}_bn", dt=w_node.dtype,
                             source=conv.source)
    bn_node = rw.new.add_constant(bias.astype(np.float32), name=f"{w_node.name}_bn_bias",
                                  source=conv.source)
    return wn, bn_node
