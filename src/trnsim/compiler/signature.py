"""The call signature a traced model accepts: the traced shapes and dtypes, and nothing else.

Shapes are fixed at trace time, as on Neuron. `check_inputs` flattens a call the way the trace
was flattened and compares every tensor with the traced one; a mismatch raises
`InputShapeError` showing both (e.g. ``traced with int64[1, 128], called with int64[1, 64]``).
"""

from __future__ import annotations

from typing import Any

from trnsim.compiler.errors import InputShapeError
from trnsim.compiler.ir import Graph
from trnsim.errors import InvalidArgumentError


def describe_input(node_attrs: dict[str, Any]) -> str:
    dt = str(node_attrs.get("torch_dtype", node_attrs["dtype"])).replace("torch.", "")
    return f"{dt}{list(node_attrs['shape'])}"


def check_inputs(graph: Graph, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None
                 ) -> list[Any]:
    """The tensors of a call, in graph input order, after checking them against the trace."""
    structure = graph.input_structure
    flat = list(args) if structure is None else structure.flatten((tuple(args), dict(kwargs or {})))
    nodes = graph.inputs
    if len(flat) != len(nodes):
        raise InvalidArgumentError(f"{graph.name} was traced with {len(nodes)} tensor inputs, "
                                   f"called with {len(flat)}")
    for node, value in zip(nodes, flat, strict=True):
        traced = describe_input(node.attrs)
        shape = tuple(getattr(value, "shape", ()))
        if not hasattr(value, "shape"):
            raise InputShapeError(node.attrs.get("name", node.name), traced,
                                  f"a {type(value).__name__}")
        given_dt = str(getattr(value, "dtype", "?")).replace("torch.", "")
        want_dt = str(node.attrs.get("torch_dtype", node.attrs["dtype"])).replace("torch.", "")
        if shape != tuple(node.attrs["shape"]) or given_dt != want_dt:
            raise InputShapeError(node.attrs.get("name", node.name), traced,
                                  f"{given_dt}{list(shape)}")
    return flat
