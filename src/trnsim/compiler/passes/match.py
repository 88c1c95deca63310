"""Small pattern-matching helpers the rewrite passes share."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from trnsim.compiler.ir import Graph, Node


def scalar_value(node: Node, graph: Graph) -> float | int | bool | None:
    """The value of a Python-number operand, a 0-d constant or a one-value ``full``, else None."""
    if node.op == "scalar":
        return node.attrs["value"]
    if node.op == "full" and node.numel == 1:
        return node.attrs["value"]
    if node.op == "constant" and node.numel == 1 and node.rank <= 1:
        value = np.asarray(graph.constant(node).value()).reshape(-1)[0]
        return value.item() if hasattr(value, "item") else float(value)
    return None


def is_number(node: Node, graph: Graph, value: float, tol: float = 1e-6) -> bool:
    v = scalar_value(node, graph)
    return v is not None and not isinstance(v, bool) and abs(float(v) - value) <= tol * max(1.0,
                                                                                          abs(value))


def operand_pairs(node: Node) -> Iterator[tuple[Node, Node]]:
    """Both orders of a commutative binary node's operands."""
    a, b = node.inputs
    yield a, b
    if a is not b:
        yield b, a


def is_transpose_last2(node: Node) -> bool:
    """A permute that swaps the last two axes and nothing else."""
    if node.op != "permute" or node.rank < 2:
        return False
    dims = tuple(node.attrs["dims"])
    r = node.rank
    return dims == (*range(r - 2), r - 1, r - 2)


def peel_float_cast(node: Node) -> tuple[Node, str | None]:
    """(x, cast dtype) for a float -> float cast (auto-cast's), else (node, None)."""
    if node.op == "cast" and node.dtype.is_float and node.inputs[0].dtype.is_float:
        return node.inputs[0], node.dtype.name
    return node, None


def only_user(node: Node, users: dict[Node, list[Node]], outputs: set[int]) -> Node | None:
    """The single consumer of `node`, if it has exactly one and is not a graph output."""
    found = users.get(node, [])
    if len(found) != 1 or id(node) in outputs:
        return None
    return found[0]


def literal(node: Node, graph: Graph) -> float | int | bool | None:
    """A scalar operand as a program literal (fused kernels take numbers as immediates)."""
    if node.shape != () and node.numel != 1:
        return None
    if node.op not in ("scalar", "full", "constant"):
        return None
    v = scalar_value(node, graph)
    if v is None:
        return None
    if node.dtype.is_float:
        return float(v)
    if node.dtype.is_bool:
        return bool(v)
    return int(v)
