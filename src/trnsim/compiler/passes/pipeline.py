"""neuron-cc's NeuronCore Pipeline (Inferentia): a model cut into stages, one per NeuronCore.

``--neuroncore-pipeline-cores N`` shards the compute graph over N NeuronCores; each caches its
stage's parameters in on-chip memory and inference requests stream through the stages
(about-neuron/arch/neuron-features/neuroncore-pipeline.rst). Here the kernel-level graph is cut
at kernel boundaries into N contiguous stages of about equal weight bytes (what a core must
cache). Each stage becomes a graph of its own: its inputs are the values it reads that earlier
stages (or the caller) produce, its outputs the values later stages read; the last stage returns
the model's outputs. Constants and views are copied into every stage that reads them.
"""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.compiler.fused import KERNEL_LEVEL_LEAVES, KERNEL_LEVEL_VIEWS
from trnsim.compiler.ir import Graph, Node
from trnsim.errors import InvalidArgumentError

LEAVES = tuple(op for op in KERNEL_LEVEL_LEAVES if op != "input")  # copied into each stage
VIEWS = KERNEL_LEVEL_VIEWS


@dataclass
class Stage:
    """One stage: its graph, and for each of its inputs and outputs the model value it carries
    (a node name of the unsplit graph, so stages hand values over by name)."""

    graph: Graph
    inputs: list[str]
    outputs: list[str]


def split_stages(graph: Graph, stages: int) -> list[Stage]:
    """Cut `graph` (kernel level) into `stages` stages balanced by weight bytes."""
    kernels = [n for n in graph.nodes if n.op.startswith("k.")]
    if not 1 <= stages <= max(1, len(kernels)):
        raise InvalidArgumentError(f"{stages} pipeline stages for a model of {len(kernels)} "
                                   f"kernels: expected 1 to {len(kernels)}")
    weights = [sum(c.nbytes for c in _constants(k)) for k in kernels]
    stage_of = _balanced(weights, stages)
    owner = {id(k): s for k, s in zip(kernels, stage_of, strict=True)}
    readers: dict[int, set[int]] = {}  # kernel id -> stages that read it (through views)
    for k, s in zip(kernels, stage_of, strict=True):
        for source in _sources(k):
            readers.setdefault(id(source), set()).add(s)
    for out in graph.outputs:  # the last stage returns the model's outputs
        for source in ([out] if out.op.startswith("k.") else _sources(out)):
            readers.setdefault(id(source), set()).add(stages - 1)
    built = [_Builder(graph, i) for i in range(stages)]
    for k, s in zip(kernels, stage_of, strict=True):
        built[s].kernel(k, owner)
    last = built[-1]
    last.graph.outputs = [last.value(o, owner) for o in graph.outputs]
    for s, builder in enumerate(built[:-1]):
        handed = [k for k in kernels if owner[id(k)] == s
                  and any(r > s for r in readers.get(id(k), ()))]
        builder.graph.outputs = [builder.mapping[id(k)] for k in handed]
        builder.output_names = [k.name for k in handed]
    return [Stage(b.graph, b.input_names, b.output_names if i < stages - 1
                  else [o.name for o in graph.outputs])
            for i, b in enumerate(built)]


def _balanced(weights: list[int], stages: int) -> list[int]:
    """A stage index per kernel, in order: stage s ends once the running weight total passes
    (s + 1) / stages of the whole, with at least one kernel per stage."""
    total = sum(weights) or 1
    out, running, stage, count = [], 0, 0, len(weights)
    for i, w in enumerate(weights):
        remaining_kernels = count - i
        if stage < stages - 1 and out and (running >= total * (stage + 1) / stages
                                           or remaining_kernels <= stages - 1 - stage):
            stage += 1
        out.append(stage)
        running += w
    return out


def _constants(node: Node) -> list[Node]:
    found, stack = [], list(node.inputs)
    while stack:
        x = stack.pop()
        if x.op == "constant":
            found.append(x)
        elif x.op in VIEWS:
            stack.extend(x.inputs)
    return found


def _sources(node: Node) -> list[Node]:
    """The kernels and inputs `node` reads, looking through views."""
    found, stack = [], list(node.inputs)
    while stack:
        x = stack.pop()
        if x.op in VIEWS:
            stack.extend(x.inputs)
        elif x.op not in LEAVES:
            found.append(x)
    return found


class _Builder:
    def __init__(self, graph: Graph, index: int) -> None:
        self.old = graph
        self.index = index
        self.graph = Graph(f"{graph.name}_stage{index}")
        self.graph.constants = dict(graph.constants)
        self.graph.meta = {k: v for k, v in graph.meta.items() if k == "tensor_parallel"}
        self.mapping: dict[int, Node] = {}
        self.input_names: list[str] = []
        self.output_names: list[str] = []

    def kernel(self, node: Node, owner: dict[int, int]) -> None:
        inputs = [self.value(x, owner) for x in node.inputs]
        self.mapping[id(node)] = self.graph.add(node.op, inputs, node.attrs, source=node.source,
                                                name=node.name)

    def value(self, node: Node, owner: dict[int, int]) -> Node:
        found = self.mapping.get(id(node))
        if found is not None:
            return found
        if node.op in LEAVES:
            new = self.graph.add(node.op, [], node.attrs, source=node.source, name=node.name)
        elif node.op in VIEWS:
            new = self.graph.add(node.op, [self.value(node.inputs[0], owner)], node.attrs,
                                 source=node.source, name=node.name)
        elif node.op == "input" or owner.get(id(node), self.index) < self.index:
            attrs = {"index": len(self.input_names), "name": node.name, "shape": node.shape,
                     "dtype": node.dtype.name}
            if node.op == "input":
                attrs = {**node.attrs, "index": len(self.input_names)}
            new = self.graph.add("input", [], attrs, source=node.source, name=node.name)
            self.input_names.append(node.name)
        else:
            raise InvalidArgumentError(f"{node!r} is read before its stage computes it")
        self.mapping[id(node)] = new
        return new
