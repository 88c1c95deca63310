"""Constant folding, algebraic identities, common-subexpression elimination and dead code.

Hugging Face models build attention masks, position ids and causal triangles from ``arange``,
``full`` and comparisons at every call; with shapes fixed at trace time these are constants, and
computing them once at compile time removes dozens of tiny kernels per model.

Folding never copies weights: a view or cast of a large constant is left to the layout pass
(views) or becomes a pending cast on the same data (`Constant.cast_to`). Results larger than
`FOLD_LIMIT_ELEMENTS` stay computed at run time (a memset is cheaper than its HBM image).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trnsim.compiler.interpret import EVAL, store
from trnsim.compiler.ir import Graph, Node, Rewriter

# Largest tensor folded into a constant; bigger ones stay operations (memory over time).
FOLD_LIMIT_ELEMENTS = 1 << 20
_LEAVES = ("constant", "scalar", "full", "arange")


def fold_constants(graph: Graph) -> Graph:
    """Evaluate every operation whose operands are all known, within the size limit."""
    rw = Rewriter(graph)
    for node in graph.nodes:
        ins = rw.operands(node)
        if node.op in _LEAVES or node.op == "input" or not ins or \
                not all(i.op in _LEAVES for i in ins):
            rw.keep(node)
            continue
        if node.op == "cast" and ins[0].op == "constant" and node.dtype.is_float and \
                ins[0].dtype.is_float:  # weights: cast later, on demand (RNE, as auto-cast does)
            data = rw.new.constants[ins[0].attrs["ref"]].cast_to(node.dtype)
            rw.replace(node, rw.new.add_data(data, name=f"{ins[0].attrs['ref']}_{node.dtype.name}",
                                             source=node.source))
            continue
        if node.numel > FOLD_LIMIT_ELEMENTS or (node.op in ("reshape", "permute", "expand",
                                                            "slice") and _weights(ins, rw.new)):
            rw.keep(node)
            continue
        value = EVAL[node.op](node, [EVAL[i.op](i, [], rw.new) for i in ins], rw.new)
        # stored as the interpreter stores a result (float -> int truncates, as .to(torch.long)
        # does); a pending cast would round to nearest
        value = store(value, node.dtype)
        rw.replace(node, rw.new.add_constant(np.ascontiguousarray(value), name=node.name,
                                             dt=node.dtype, source=node.source))
    return rw.finish()


def _weights(ins: list[Node], graph: Graph) -> bool:
    """A view of a parameter stays a view: the layout pass decides how it is read."""
    return any(i.op == "constant" and graph.constant(i).origin.startswith("parameter")
               for i in ins)


def simplify(graph: Graph) -> Graph:
    """Remove identities: x+0, x-0, x*1, x/1, casts to the same type, no-op views; a boolean
    ``x & all-true`` is ``x`` broadcast (an expand view), so a padding mask that transformers
    widens to [b, 1, sq, sk] by and-ing it with a true [sq, 1] keeps its [b, 1, 1, sk] values."""
    rw = Rewriter(graph)
    for node in graph.nodes:
        ins = rw.operands(node)
        same = _identity_operand(node, ins)
        if same is not None and same.shape == node.shape and same.dtype == node.dtype:
            rw.replace(node, same)
        elif (kept := _and_with_true(node, ins, rw.new)) is not None:
            rw.replace(node, rw.emit("expand", [kept], {"shape": node.shape}, source=node.source))
        else:
            rw.keep(node)
    return rw.finish()


def _and_with_true(node: Node, ins: list[Node], graph: Graph) -> Node | None:
    """The operand of a boolean and whose other operand is a constant of only true values (the
    result is that operand broadcast to the node's shape), else None."""
    if node.op not in ("bitwise_and", "logical_and") or not node.dtype.is_bool:
        return None
    for kept, other in ((ins[0], ins[1]), (ins[1], ins[0])):
        if kept.dtype.is_bool and other.op == "constant" and kept.shape != node.shape \
                and graph.constant(other).value().all():
            return kept
    return None


def _identity_operand(node: Node, ins: list[Node]) -> Node | None:
    if node.op in ("reshape", "expand") and ins[0].shape == node.shape:
        return ins[0]
    if node.op == "permute" and tuple(node.attrs["dims"]) == tuple(range(node.rank)):
        return ins[0]
    if node.op == "cast" and ins[0].dtype == node.dtype:
        return ins[0]
    if node.op in ("add", "sub") and _is_value(ins[1], 0):
        return ins[0]
    if node.op == "add" and _is_value(ins[0], 0):
        return ins[1]
    if node.op in ("mul", "div") and _is_value(ins[1], 1):
        return ins[0]
    if node.op == "mul" and _is_value(ins[0], 1):
        return ins[1]
    return None


def _is_value(node: Node, value: float) -> bool:
    if node.op == "scalar":
        return node.attrs["value"] == value and not isinstance(node.attrs["value"], bool)
    return node.op == "full" and node.attrs["value"] == value and node.shape == ()


def eliminate_common(graph: Graph) -> Graph:
    """Merge nodes that compute the same op on the same operands (masks built once per layer)."""
    rw = Rewriter(graph)
    seen: dict[tuple[Any, ...], Node] = {}
    for node in graph.nodes:
        if node.op in ("input", "constant"):
            rw.keep(node)
            continue
        key = (node.op, tuple(id(i) for i in rw.operands(node)), _freeze(node.attrs))
        hit = seen.get(key)
        if hit is not None:
            rw.replace(node, hit)
        else:
            seen[key] = rw.keep(node)
    return rw.finish()


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, float) and value != value:
        return "nan"
    return (type(value).__name__, value)


def fold(graph: Graph) -> Graph:
    """Constant folding to a fixed point, interleaved with identities and CSE (DCE throughout)."""
    for _ in range(4):
        before = len(graph.nodes)
        graph = fold_constants(eliminate_common(simplify(graph)))
        if len(graph.nodes) == before:
            break
    return graph
