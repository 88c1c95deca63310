"""A cut graph: the pending nodes its roots depend on, in order, and the key it compiles under.

The key is the graph's structure (each op, its non-tensor arguments, every shape and dtype, how
values flow), as torch-xla hashes its IR: two steps with the same structure share one
compilation. Python floats are left out, because torch-xla hands them to the device as data
(a learning rate that changes every step does not recompile); integers stay (sizes, dims).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map

from trnsim.runtime.xla.lazy import IrNode, IrValue


@dataclass(eq=False)
class StepGraph:
    nodes: list[IrNode]
    inputs: list[IrValue]  # device data read by the graph, in first-use order
    roots: list[IrValue]  # the values the graph hands back
    why: str  # "mark_step", ".item()", ...
    source: str | None  # the user's line that cut the graph
    key: str = ""
    signature: list = field(default_factory=list)  # per node: (op, args, out shapes) for diffs
    compiled: Any = None  # the executor's CompiledStep
    cache: str = ""  # "memory", "disk" or "compiled"
    collectives: list = field(default_factory=list)  # (op, bytes, ranks) issued in this graph
    collective_inputs: list = field(default_factory=list)  # per collective: uids it reads
    collective_ns: float = 0.0  # their simulated time on the instance's fabric, end to end
    exposed_collective_ns: float = 0.0  # what the step waits for them beyond its compute
    collective_spans: list = field(default_factory=list)  # (start, end) ns per collective
    hbm: Any = None  # memory.HbmUse of the step (mark_step graphs)

    def describe_input(self, i: int) -> str:
        value = self.inputs[i]
        where = f" (from {value.source})" if value.source else ""
        return f"input {i}{where}: {_type(value)}"


def _type(value: IrValue) -> str:
    return f"{str(value.dtype).replace('torch.', '')}[{', '.join(map(str, value.shape))}]"


def build_graph(roots: list[IrValue], why: str, source: str | None) -> StepGraph:
    order: list[IrNode] = []
    seen: set[int] = set()
    inputs: list[IrValue] = []
    input_ids: dict[int, int] = {}

    def values_of(node: IrNode) -> list[IrValue]:
        leaves = tree_flatten((node.args, node.kwargs))[0]
        return [v for v in leaves if isinstance(v, IrValue)]

    # iterative depth-first post-order (graphs have tens of thousands of nodes: no recursion)
    stack: list[tuple[IrNode, bool]] = [(r.node, False) for r in reversed(roots)]
    while stack:
        node, expanded = stack.pop()
        if id(node) in seen and not expanded:
            continue
        if expanded:
            order.append(node)
            continue
        seen.add(id(node))
        stack.append((node, True))
        for value in reversed(values_of(node)):
            if value.node is not None and id(value.node) not in seen:
                stack.append((value.node, False))
    position = {id(n): i for i, n in enumerate(order)}
    signature = []
    for node in order:
        for value in values_of(node):
            if value.node is None and value.uid not in input_ids:
                input_ids[value.uid] = len(inputs)
                inputs.append(value)

        def ref(x: Any) -> Any:
            if isinstance(x, IrValue):
                if x.node is None:
                    return ("in", input_ids[x.uid], x.shape, str(x.dtype))
                return ("v", position[id(x.node)], x.index)
            if isinstance(x, float):
                return "f"
            if isinstance(x, torch.Tensor):  # a host tensor operand (a constant of the graph)
                return ("host", tuple(x.shape), str(x.dtype))
            if isinstance(x, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
                return str(x)
            return x

        args = tree_map(ref, (node.args, node.kwargs))
        outs = tuple((v.shape, str(v.dtype)) for v in node.outputs)
        signature.append((str(node.op), repr(args), outs))
    root_refs = [(position[id(r.node)], r.index) for r in roots]
    text = repr((signature, root_refs))
    key = hashlib.sha256(text.encode()).hexdigest()[:24]
    return StepGraph(order, inputs, roots, why, source, key, signature)


def recompile_reason(new: StepGraph, old: StepGraph) -> str:
    """Why `new` does not reuse `old`'s compilation (the first difference, with its line)."""
    if len(new.inputs) != len(old.inputs):
        known = {(v.source, v.shape) for v in old.inputs}
        fresh = next((v for v in new.inputs if (v.source, v.shape) not in known), None)
        what = f"; first new one: {_type(fresh)} from {fresh.source}" if fresh is not None else ""
        return f"graph reads {len(new.inputs)} device tensors, was {len(old.inputs)}{what}"
    for i, (a, b) in enumerate(zip(new.inputs, old.inputs, strict=False)):
        if a.shape != b.shape or a.dtype != b.dtype:
            where = f" (created at {a.source})" if a.source else ""
            return f"input {i}{where} changed from {_type(b)} to {_type(a)}"
    for node, sig, old_sig in zip(new.nodes, new.signature, old.signature, strict=False):
        if sig[0] != old_sig[0]:
            return f"op {old_sig[0]} became {sig[0]} at {node.source}"
        if sig[2] != old_sig[2]:
            shapes = lambda s: ", ".join(f"{d.replace('torch.', '')}{list(sh)}" for sh, d in s)  # noqa: E731
            return f"{sig[0]} output changed from {shapes(old_sig[2])} to {shapes(sig[2])} " \
                   f"at {node.source}"
        if sig[1] != old_sig[1]:
            return f"arguments of {sig[0]} changed at {node.source}"
    if len(new.nodes) != len(old.nodes):
        extra = new.nodes[len(old.nodes)] if len(new.nodes) > len(old.nodes) else None
        where = f" (first new op {extra.op} at {extra.source})" if extra is not None else ""
        return f"graph has {len(new.nodes)} ops, was {len(old.nodes)}{where}"
    return "the graph returns different tensors"
