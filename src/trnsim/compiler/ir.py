"""The graph IR: one node type, typed and shaped, in SSA form, with weights as named constants.

A `Graph` is an ordered list of `Node`s (topological order is the list order). A node is an
operator (`op`, a name from `trnsim.compiler.ops` or a kernel name from
`trnsim.compiler.fused`), its operand nodes, plain-data attributes, the output's shape and trnsim
`DType`, and the user's source line it came from. Leaves are ``input`` nodes (the model's tensor
arguments, in call order), ``constant`` nodes (weights and folded tensors, whose data lives in
`Graph.constants`) and ``scalar`` nodes (Python numbers in the model, weak in type promotion).

Weights are not copied: a `Constant` holds a numpy view of the model's parameter storage; a cast
decided at compile time (auto-cast of weights) stays pending until someone asks for `value()`.
BERT-large's 1.3 GB of fp32 weights therefore costs no extra memory to capture or compile.

Passes are ``Graph -> Graph``: they build a new graph with `Rewriter`, never mutate their input,
so a test (or ``--dump-after``) can compare before and after. `verify()` re-derives every shape
and dtype from the op's rule; `pretty()` prints one line per node.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from trnsim.compiler.errors import IRError
from trnsim.numerics import DType, cast, dtype

Shape = tuple[int, ...]


class Node:
    """One SSA value: ``name: dtype[shape] = op(inputs) {attrs}``, with its source line."""

    __slots__ = ("attrs", "dtype", "inputs", "name", "op", "shape", "source")

    def __init__(self, name: str, op: str, inputs: Sequence[Node], attrs: dict[str, Any],
                 shape: Shape, dt: DType, source: str | None = None) -> None:
        self.name = name
        self.op = op
        self.inputs = tuple(inputs)
        self.attrs = attrs
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dt
        self.source = source

    @property
    def numel(self) -> int:
        return math.prod(self.shape)  # (shape holds Python ints: exact, no numpy call)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    @property
    def rank(self) -> int:
        return len(self.shape)

    def type_str(self) -> str:
        return f"{self.dtype.name}[{','.join(map(str, self.shape))}]"

    def __repr__(self) -> str:
        return f"%{self.name}"


@dataclass(frozen=True)
class Constant:
    """A weight, buffer or folded tensor. `data` may be a view of the model's own storage.

    `pending` is a cast decided at compile time but not yet applied (auto-cast of weights): the
    node's dtype is already the target, and `value()` applies the cast (RNE) on demand.
    """

    data: np.ndarray = field(repr=False)
    dtype: DType
    origin: str = "folded"  # "parameter" | "buffer" | "folded" | the model's state-dict key
    pending: DType | None = None
    # Under tensor parallelism, how `data` is cut over the ranks (`Shard`); the node's shape is
    # the rank's. None: every rank holds all of it.
    shard: Shard | None = None

    @property
    def shape(self) -> Shape:
        shape = tuple(self.data.shape)
        if self.shard is None:
            return shape
        axis = self.shard.axis
        return (*shape[:axis], self.shard.local(shape[axis]), *shape[axis + 1:])

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def value(self, rank: int = 0) -> np.ndarray:
        """The values in this constant's dtype storage (applies a pending cast); for a sharded
        constant, rank `rank`'s chunk."""
        data = self.data
        if self.shard is not None:
            data = self.shard.chunk(np.asarray(data), rank)
        if self.pending is None:
            return data
        return cast(data, self.pending, rounding="rne")

    def cast_to(self, target: DType) -> Constant:
        """The same data declared as `target`; the conversion waits until `value()`."""
        if target == self.dtype:
            return self
        return Constant(self.data, target, self.origin, target, self.shard)

    def sharded(self, axis: int, degree: int, groups: int = 1, parts: int | None = None,
                padded: int | None = None) -> Constant:
        """The same data split over `degree` ranks along `axis` (`Shard`)."""
        if self.shard is not None:
            raise IRError(f"constant {self.origin} is sharded already ({self.shard})")
        shard = Shard(int(axis), int(degree), int(groups), int(parts or degree),
                      None if padded is None else int(padded))
        shard.check(self.data.shape[axis], f"constant {self.origin}{list(self.data.shape)}")
        return Constant(self.data, self.dtype, self.origin, self.pending, shard)


class Shard(NamedTuple):
    """How a tensor-parallel value is cut over `degree` ranks along `axis`.

    The axis is cut into `groups` equal parts (a fused Q/K/V weight: 3), each part zero-padded
    at its end to `padded` / `groups` (None: not padded; heads that do not divide the ranks,
    padded as neuronx-distributed pads them), and each padded part into `parts` equal chunks;
    rank r holds chunk ``r * parts // degree`` of every part. `parts` divides `degree`: fewer
    parts than ranks replicate each chunk on ``degree // parts`` neighbouring ranks (grouped-query
    attention's KV heads over more ranks than heads, as NxD's ``kv_size_multiplier`` does).
    """

    axis: int
    degree: int
    groups: int = 1
    parts: int = 0  # 0: degree
    padded: int | None = None

    @property
    def chunks(self) -> int:
        return self.parts or self.degree

    def length(self, size: int) -> int:
        """The axis's length once padded."""
        return size if self.padded is None else self.padded

    def local(self, size: int) -> int:
        return self.length(size) // self.chunks

    def check(self, size: int, what: str) -> None:
        total = self.length(size)
        if self.degree % self.chunks or total % (self.groups * self.chunks) or total < size \
                or size % self.groups:
            raise IRError(f"{what} axis {self.axis} (length {size}, padded {total}) does not "
                          f"split into {self.groups} x {self.chunks} equal chunks over "
                          f"{self.degree} ranks")

    def chunk(self, data: np.ndarray, rank: int) -> np.ndarray:
        """Rank `rank`'s chunk of the whole `data` (the runtime cuts a sharded input alike)."""
        from trnsim.sim.execution_plan import rank_chunk

        return rank_chunk(data, tuple(self), rank)


class Graph:
    """An ordered, typed dataflow graph plus the structure of the model's inputs and outputs."""

    def __init__(self, name: str = "model") -> None:
        self.name = name
        self.nodes: list[Node] = []
        self.outputs: list[Node] = []
        self.constants: dict[str, Constant] = {}
        self.input_structure: Any = None  # trnsim.compiler.structure.Structure of (args, kwargs)
        self.output_structure: Any = None  # Structure the outputs are rebuilt into
        self.meta: dict[str, Any] = {}  # e.g. the model class, the capture times, the memory plan
        self._names: set[str] = set()
        self._counter = itertools.count()

    # --- building -------------------------------------------------------------------------
    def fresh_name(self, base: str) -> str:
        base = base or "v"
        name = base
        while name in self._names:
            name = f"{base}_{next(self._counter)}"
        self._names.add(name)
        return name

    def add(self, op: str, inputs: Sequence[Node] = (), attrs: dict[str, Any] | None = None, *,
            source: str | None = None, name: str | None = None) -> Node:
        """Append a node; its shape and dtype come from the op's rule (`ops.infer`)."""
        from trnsim.compiler.ops import infer

        attrs = dict(attrs or {})
        shape, dt = infer(op, list(inputs), attrs, self)
        return self._append(op, inputs, attrs, shape, dt, source, name)

    def _append(self, op: str, inputs: Sequence[Node], attrs: dict[str, Any], shape: Shape,
                dt: DType, source: str | None, name: str | None) -> Node:
        node = Node(self.fresh_name(name or op.replace(".", "_")), op, inputs, attrs, shape, dt,
                    source)
        self.nodes.append(node)
        return node

    def add_constant(self, array: np.ndarray, *, name: str | None = None, dt: Any = None,
                     origin: str = "folded", source: str | None = None) -> Node:
        """Register `array` (kept as is, no copy) and append the constant node reading it.

        A `dt` other than the array's own makes the conversion pending (see `Constant`)."""
        array = np.asarray(array)
        declared = dtype(dt if dt is not None else array.dtype)
        pending = declared if dtype(array.dtype) != declared else None
        return self.add_data(Constant(array, declared, origin, pending), name=name or "const",
                             source=source)

    def add_data(self, data: Constant, *, name: str, source: str | None = None) -> Node:
        """Register `data` under a fresh ref and append the constant node (named as the ref)."""
        key = self.fresh_name(name)
        self.constants[key] = data
        self._names.discard(key)  # the node takes the same name
        return self.add("constant", (), {"ref": key}, source=source, name=key)

    def add_scalar(self, value: float | int | bool, dt: Any) -> Node:
        return self.add("scalar", (), {"value": value, "dtype": dtype(dt).name}, name="scalar")

    # --- reading ---------------------------------------------------------------------------
    @property
    def inputs(self) -> list[Node]:
        return sorted((n for n in self.nodes if n.op == "input"), key=lambda n: n.attrs["index"])

    def constant(self, node: Node) -> Constant:
        return self.constants[node.attrs["ref"]]

    def users(self) -> dict[Node, list[Node]]:
        """Every node's consumers, in graph order (graph outputs are not listed here)."""
        table: dict[Node, list[Node]] = {n: [] for n in self.nodes}
        for n in self.nodes:
            for i in n.inputs:
                if n not in table[i]:
                    table[i].append(n)
        return table

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op] = counts.get(n.op, 0) + 1
        return counts

    def weight_bytes(self) -> int:
        used = {n.attrs["ref"] for n in self.nodes if n.op == "constant"}
        return sum(self.constants[k].nbytes for k in used)

    # --- checking and printing -----------------------------------------------------------
    def verify(self) -> Graph:
        """Raise `IRError` unless the graph is SSA, topologically ordered, closed and well typed."""
        from trnsim.compiler.ops import infer

        seen: set[int] = set()
        names: set[str] = set()
        for node in self.nodes:
            where = f"{node!r} = {node.op}"
            if node.name in names:
                raise IRError(f"{where}: name defined twice")
            names.add(node.name)
            for operand in node.inputs:
                if id(operand) not in seen:
                    raise IRError(f"{where}: operand {operand!r} is not defined before its use")
            if node.op == "constant":
                self._verify_constant(node)
            try:
                shape, dt = infer(node.op, list(node.inputs), dict(node.attrs), self)
            except IRError as exc:
                raise IRError(f"{where}: {exc}") from None
            if shape != node.shape or dt != node.dtype:
                raise IRError(f"{where}: recorded {node.type_str()} but the {node.op} rule gives "
                              f"{dt.name}[{','.join(map(str, shape))}]")
            seen.add(id(node))
        for out in self.outputs:
            if id(out) not in seen:
                raise IRError(f"output {out!r} is not a node of the graph")
        indices = [n.attrs["index"] for n in self.inputs]
        if indices != list(range(len(indices))):
            raise IRError(f"input indices {indices} are not 0..{len(indices) - 1}")
        return self

    def _verify_constant(self, node: Node) -> None:
        ref = node.attrs.get("ref")
        if ref not in self.constants:
            raise IRError(f"{node!r}: constant {ref!r} has no data")
        data = self.constants[ref]
        if data.shape != node.shape or data.dtype != node.dtype:
            raise IRError(f"{node!r}: constant {ref!r} holds {data.dtype.name}{list(data.shape)}, "
                          f"node says {node.type_str()}")

    def pretty(self, *, constants: bool = True, sources: bool = True) -> str:
        """One line per node: ``%name: dtype[shape] = op(%a, %b) {attrs}  # file:line``."""
        ncon = sum(1 for n in self.nodes if n.op == "constant")
        lines = [f"graph {self.name}: {len(self.inputs)} inputs, {ncon} constants "
                 f"({self.weight_bytes() / 2**20:.1f} MiB), "
                 f"{len(self.nodes) - ncon - len(self.inputs)} ops"]
        for node in self.nodes:
            if node.op == "constant" and not constants:
                continue
            lines.append("  " + format_node(node, self, sources=sources))
        outs = ", ".join(repr(o) for o in self.outputs)
        lines.append(f"  return ({outs})")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Graph {self.name}: {len(self.nodes)} nodes>"


def format_node(node: Node, graph: Graph | None = None, *, sources: bool = True) -> str:
    args = ", ".join(repr(i) for i in node.inputs)
    attrs = {k: v for k, v in node.attrs.items() if not (node.op == "constant" and k == "ref")}
    text = f"{node!r}: {node.type_str()} = {node.op}({args})"
    if node.op == "constant" and graph is not None:
        c = graph.constants.get(node.attrs["ref"])
        if c is not None:
            pending = f", cast pending from {c.data.dtype}" if c.pending is not None else ""
            shard = ""
            if c.shard is not None:
                axis, degree, groups = c.shard[:3]
                parts = f" of each of {groups} parts" if groups > 1 else ""
                if c.shard.padded is not None:
                    parts += f" padded to {c.shard.padded}"
                if c.shard.chunks != degree:
                    parts += f" (1/{c.shard.chunks}, on {degree // c.shard.chunks} ranks each)"
                shard = f", rank's 1/{degree} along axis {axis}{parts}"
            text += f" <{c.origin}{pending}{shard}>"
    if attrs:
        text += " {" + ", ".join(f"{k}={_fmt(v)}" for k, v in attrs.items()) + "}"
    if sources and node.source:
        text += f"  # {node.source}"
    return text


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, tuple) and value and hasattr(value[0], "pretty"):
        return "[" + "; ".join(v.pretty() for v in value) + "]"
    if hasattr(value, "pretty"):
        return value.pretty()
    return repr(value)


class Rewriter:
    """Builds a pass's output graph while walking the input graph in order.

    `keep(node)` copies a node (operands redirected to their replacements); `emit(...)` adds a
    new node; `replace(old, new)` makes every later use of `old` read `new`. `finish()` redirects
    the outputs and drops nodes nothing uses any more.
    """

    def __init__(self, graph: Graph) -> None:
        self.old = graph
        self.new = Graph(graph.name)
        self.new.constants = dict(graph.constants)
        self.new.input_structure = graph.input_structure
        self.new.output_structure = graph.output_structure
        self.new.meta = dict(graph.meta)
        self.mapping: dict[Node, Node] = {}

    def get(self, node: Node) -> Node:
        return self.mapping[node]

    def operands(self, node: Node) -> list[Node]:
        return [self.mapping[i] for i in node.inputs]

    def keep(self, node: Node, *, attrs: dict[str, Any] | None = None) -> Node:
        operands = self.operands(node)
        if attrs is None and _alike(node.inputs, operands):
            # the op's rule would give the node's own type: it reads its operands' op, shape
            # and dtype (`ops.infer`) and these are the same (verify re-derives every type)
            new = self.new._append(node.op, operands, dict(node.attrs), node.shape, node.dtype,
                                   node.source, node.name)
        else:
            new = self.new.add(node.op, operands, node.attrs if attrs is None else attrs,
                               source=node.source, name=node.name)
        self.mapping[node] = new
        return new

    def emit(self, op: str, inputs: Sequence[Node], attrs: dict[str, Any] | None = None, *,
             source: str | None = None, name: str | None = None) -> Node:
        return self.new.add(op, inputs, attrs, source=source, name=name)

    def replace(self, old: Node, new: Node) -> Node:
        self.mapping[old] = new
        return new

    def finish(self, *, dce: bool = True) -> Graph:
        self.new.outputs = [self.mapping[o] for o in self.old.outputs]
        return eliminate_dead(self.new) if dce else self.new


def _alike(old: Sequence[Node], new: Sequence[Node]) -> bool:
    """Operands `new` stand where `old` stood with the same op, shape and dtype (and there is at
    least one: a leaf's rule may read the graph, e.g. a constant's data)."""
    return bool(old) and all(a.op == b.op and a.shape == b.shape and a.dtype == b.dtype
                             for a, b in zip(old, new, strict=True))


def eliminate_dead(graph: Graph) -> Graph:
    """Drop nodes no output depends on (inputs always stay: they are the call signature).

    Works in place on a graph a pass has just built; constants no node reads are forgotten.
    """
    live: set[int] = {id(o) for o in graph.outputs}
    for node in reversed(graph.nodes):
        if id(node) in live or node.op == "input":
            live.add(id(node))
            live.update(id(i) for i in node.inputs)
    graph.nodes = [n for n in graph.nodes if id(n) in live]
    refs = {n.attrs["ref"] for n in graph.nodes if n.op == "constant"}
    graph.constants = {k: v for k, v in graph.constants.items() if k in refs}
    return graph
