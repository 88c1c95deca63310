"""Tensor parallelism: split a model's matmul weights over `degree` NeuronCores (Megatron style).

A model too large for one core's share of HBM runs on several cores at once, each holding a
slice of every large weight (neuronx-distributed's column/row-parallel linears, decided here by
the compiler instead of by rewriting the model). Every value of the rank-local graph is either
replicated (each rank holds all of it) or sharded along one axis (rank r holds the r-th of
`degree` equal chunks). The pass walks the graph once and, per node:

- a matmul whose constant weight is large and whose input is replicated becomes column-parallel:
  each rank multiplies by its columns of the weight (and bias) and its result is sharded along
  the last axis;
- a matmul whose input is sharded along the contraction axis becomes row-parallel: each rank
  multiplies its chunk by its rows of the weight and an all-reduce sums the partial products
  in the dtype of the product as the model computes it (bf16 for a model loaded in bf16, fp32
  for an fp32 model, auto-cast or not):
  the documented default of transformers-neuronx (``all_reduce_dtype=None``: the tensor's
  dtype) and NxD Inference (``rpl_reduce_dtype=None``: "does the reduction in the input
  tensors dtype", api-guide.rst); bias and epilogue are applied once, after it (so Q/K/V ->
  attention -> output projection, and up -> GELU -> down, cost one all-reduce each, as in
  Megatron-LM);
- views, attention over heads, elementwise ops and concatenations along another axis keep a
  sharded value sharded when the shard stays one contiguous chunk (heads split across ranks);
- anything else reads replicated values: a sharded operand is all-gathered first (``k.collective``).

Sizes that do not divide the ranks are split as neuronx-distributed and transformers-neuronx
split them: heads (and an MLP's intermediate width, a vocabulary) that do not divide are
zero-padded up to the next multiple of the degree (`Split.padded`; the padding's rows of the
next row-parallel weight are zero, so the sums are unchanged and the padding is dropped when a
value is gathered); fewer key/value heads than ranks are replicated, each rank holding the one
its query head reads (`Split.parts` < degree, NxD's ``kv_size_multiplier``), and the query heads
of one key/value head are then cut over that head's ranks (`Split.inner`); query heads that must
also be padded are padded per key/value group (`Split.interleave`, `tp_padding`). Attention that reads a
replicated KV cache (a decode step's cache input) reads only its ranks' heads of it (a gather of
its chunk).

Every rank runs the same program; only the weight chunks differ (`Constant.shard`). Outputs
are replicated. Collectives are timed and computed by the collectives fabric at run time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from math import prod

import numpy as np

from trnsim.compiler.errors import IRError
from trnsim.compiler.fused import KERNEL_LEVEL_LEAVES, Step
from trnsim.compiler.ir import Constant, Graph, Node, Rewriter
from trnsim.compiler.passes.tp_padding import interleaved, interleaved_rows, projection_of
from trnsim.numerics import dtype as as_dtype

# A matmul weight smaller than this is not split when its input is replicated: the all-gather
# or all-reduce it would add costs more than the HBM it saves (a classifier head, a pooler).
# A compiler heuristic (neuronx-distributed leaves the choice to the model author).
MIN_SHARD_BYTES = 1 << 20

LEAVES = KERNEL_LEVEL_LEAVES

# Elementwise ops that keep finite values finite: only these may read a zero-padded split (a
# padded element must not become inf or NaN, which the next weight's zero rows would not cancel).
FINITE_OPS = frozenset(("add", "sub", "mul", "neg", "abs", "relu", "silu", "gelu", "tanh",
                        "sigmoid", "erf", "sin", "cos", "cast", "maximum", "minimum", "clamp",
                        "where"))


@dataclass(frozen=True)
class Split:
    """How a value of the rank-local graph is cut over the ranks (`trnsim.compiler.ir.Shard`
    for its fields): along `axis` into `groups` parts, each padded to ``padded // groups`` and
    cut into `parts` chunks, rank r holding chunk ``r * parts // degree``; with `inner`, the
    ``degree // parts`` ranks that share a chunk each hold their own chunk of axis `inner`
    (`inner_padded`: that axis padded to this length first, its padding copies of real rows).
    `interleave`: the axis is `interleave` equal parts each padded at its end (together
    `padded` long), then cut plainly, query heads padded per key/value group (`tp_padding`)."""

    axis: int
    parts: int
    groups: int = 1
    padded: int | None = None
    inner: int | None = None
    inner_padded: int | None = None
    interleave: int | None = None

    def shifted(self, by: int) -> Split:
        return replace(self, axis=self.axis + by,
                       inner=None if self.inner is None else self.inner + by)


def tensor_parallel(graph: Graph, degree: int, *, min_shard_bytes: int | None = None) -> Graph:
    """The rank-local graph of `graph` split over `degree` ranks (the graph itself if 1)."""
    if degree == 1:
        return graph
    if degree < 1:
        raise IRError(f"tensor parallel degree {degree} must be >= 1")
    limit = MIN_SHARD_BYTES if min_shard_bytes is None else min_shard_bytes
    sharder = _Sharder(graph, degree, limit)
    out = sharder.run()
    held = sharder.inputs_read_as_chunks()
    if held:  # again, with those inputs held as chunks by the ranks from the start
        out = _Sharder(graph, degree, limit, held).run()
    out.meta["tensor_parallel"] = degree
    return out


class _Sharder:
    def __init__(self, graph: Graph, degree: int, min_shard_bytes: int,
                 held: dict[int, Split] | None = None) -> None:
        self.old = graph
        self.held = held or {}  # old input id -> the chunk each rank is given of it
        self.degree = degree
        self.min_shard_bytes = min_shard_bytes
        self.rw = Rewriter(graph)
        self.splits: dict[int, Split | None] = {}  # old node id -> how its new value is split
        self.users = graph.users()
        self.outputs = {id(o) for o in graph.outputs}
        self.gathered: dict[int, Node] = {}  # old node id -> its all-gathered (replicated) value
        self.shards: dict[tuple, Node] = {}  # (old constant id, shard) -> sharded constant
        self.selected: dict[tuple, Node] = {}  # (old node id, split) -> its rank's chunk
        self._by_id = {id(n): n for n in graph.nodes}
        self.query_groups = self._query_groups()  # query projection id -> its KV heads

    def run(self) -> Graph:
        handlers = {"k.matmul": self._matmul, "k.attention": self._attention,
                    "k.reduce": self._reduce, "k.gather": self._gather,
                    "k.elementwise": self._elementwise, "k.concat": self._concat,
                    "reshape": self._reshape,
                    "permute": self._permute, "slice": self._slice, "expand": self._expand}
        for node in self.old.nodes:
            handler = handlers.get(node.op)
            if id(node) in self.held:
                self._held_input(node, self.held[id(node)])
            elif node.op in LEAVES:
                self._set(node, self.rw.keep(node), None)
            elif handler is None or not handler(node):
                self._replicated_op(node)
        for out in self.old.outputs:
            self.rw.mapping[out] = self.full(out)
        return self.rw.finish()

    # --- values -----------------------------------------------------------------------------
    def _set(self, old: Node, new: Node, split: Split | None) -> Node:
        self.rw.mapping[old] = new
        self.splits[id(old)] = split
        return new

    def split(self, old: Node) -> Split | None:
        return self.splits.get(id(old))

    def plain(self, axis: int) -> Split:
        return Split(axis, self.degree)

    def split_axis(self, old: Node) -> int | None:
        """The axis `old` is split along, if it is one unpadded chunk per rank (not grouped)."""
        s = self.split(old)
        return s.axis if s is not None and s == self.plain(s.axis) else None

    def local(self, old: Node) -> Node:
        return self.rw.mapping[old]

    def full(self, old: Node) -> Node:
        """`old`'s whole value on every rank (all-gathered once if it is sharded)."""
        s = self.split(old)
        if s is None:
            return self.rw.mapping[old]
        found = self.gathered.get(id(old))
        if found is None:
            found = self.gathered[id(old)] = self._gather_whole(old, s)
        return found

    def _gather_whole(self, old: Node, s: Split) -> Node:
        local, axis, reps = self.local(old), s.axis, self.degree // s.parts
        shape = local.shape
        if s.groups > 1:  # gather each part's chunks side by side: [.., parts, chunk] along it
            parts = self._view("reshape", local, (*shape[:axis], s.groups,
                                                  shape[axis] // s.groups, *shape[axis + 1:]))
            whole = self._collective(parts, "all_gather", axis + 1, old.source)
            return self._view("reshape", whole, old.shape)
        gathered = self._collective(local, "all_gather", axis, old.source)
        if reps == 1 and s.inner is None:
            return self._unpadded(gathered, old, axis, s)
        # along `axis`: degree chunks in rank order, rank r = (chunk, sharer) = divmod(r, reps)
        g = gathered.shape
        split = self._view("reshape", gathered, (*g[:axis], s.parts, reps, g[axis] // self.degree,
                                                 *g[axis + 1:]))
        if s.inner is None:  # the sharers hold the same chunk: keep the first's
            split = self._view("slice", split, axis=axis + 1, start=0, end=1)
            merged = (*g[:axis], s.parts * shape[axis], *g[axis + 1:])
        else:  # the sharers' chunks of `inner` go side by side along it
            inner = s.inner + 2 if s.inner > axis else s.inner
            dims = [d for d in range(split.rank) if d != axis + 1]
            dims.insert(dims.index(inner), axis + 1)
            split = self.rw.emit("permute", [split], {"dims": tuple(dims)})
            merged = list(old.shape)
            merged[axis] = s.parts * shape[axis]
            if s.inner_padded:
                merged[s.inner] = s.inner_padded
                whole = self._view("reshape", split, tuple(merged))
                split = self._view("slice", whole, axis=s.inner, start=0, end=old.shape[s.inner])
                merged[s.inner] = old.shape[s.inner]
        return self._unpadded(self._view("reshape", split, tuple(merged)), old, axis, s)

    def _unpadded(self, whole: Node, old: Node, axis: int, s: Split) -> Node:
        if whole.shape[axis] == old.shape[axis]:
            return whole
        if not s.interleave:
            return self._view("slice", whole, axis=axis, start=0, end=old.shape[axis])
        shape, g = whole.shape, s.interleave  # each group's padding sits at the group's end
        parts = self._view("reshape", whole, (*shape[:axis], g, shape[axis] // g,
                                              *shape[axis + 1:]))
        kept = self._view("slice", parts, axis=axis + 1, start=0, end=old.shape[axis] // g)
        return self._view("reshape", kept, old.shape)

    def _view(self, op: str, x: Node, shape: tuple | None = None, **attrs) -> Node:
        if op == "reshape":
            return self.rw.emit("reshape", [x], {"shape": tuple(shape)})
        return self.rw.emit("slice", [x], {**attrs, "step": 1})

    def _collective(self, x: Node, kind: str, axis: int, source: str | None) -> Node:
        return self.rw.emit("k.collective", [x], {"kind": kind, "axis": axis, "degree": self.degree,
                                                  "dtype": x.dtype.name},
                            source=source, name=kind)

    def sharded_constant(self, old: Node, s: Split) -> Node:
        key = (id(old), s)
        found = self.shards.get(key)
        if found is None and s.interleave:  # padded here, then cut plainly
            c = self.old.constant(old)
            data = Constant(interleaved(np.asarray(c.data), s.axis, s.interleave, s.padded),
                            c.dtype, c.origin, c.pending).sharded(s.axis, self.degree, 1, s.parts)
            found = self.shards[key] = self.rw.new.add_data(data, name=f"{old.name}_tp",
                                                            source=old.source)
        if found is None:
            data = self.old.constant(old).sharded(s.axis, self.degree, s.groups, s.parts,
                                                  s.padded)
            found = self.shards[key] = self.rw.new.add_data(data, name=f"{old.name}_tp",
                                                            source=old.source)
        return found

    def select(self, old: Node, s: Split) -> Node:
        """The rank's chunk of a replicated value (a KV cache the caller hands every rank):
        an index_select of its rows along the split axis, which reads only those rows. Padding
        rows read the last real row: finite, and the zero weight rows after them cancel it."""
        key = (id(old), s)
        found = self.selected.get(key)
        if found is None:
            size = old.shape[s.axis]
            index = interleaved_rows(size, s.interleave, s.padded) if s.interleave else \
                np.minimum(np.arange(s.padded or size, dtype=np.int32), size - 1)
            data = Constant(index, as_dtype("int32"), "tensor_parallel").sharded(
                0, self.degree, 1, s.parts)
            rows = self.rw.new.add_data(data, name=f"{old.name}_rows", source=old.source)
            found = self.selected[key] = self.rw.emit(
                "k.gather", [self.full(old), rows],
                {"kind": "index_select", "axis": s.axis, "dtype": old.dtype.name},
                source=old.source, name=f"{old.name}_local")
        return found

    def inputs_read_as_chunks(self) -> dict[int, Split]:
        """Inputs every rank reads only its chunk of (a decode step's KV cache: its cached
        positions sliced, then read as the rank's heads): given to each rank as that chunk,
        the cache lives split over the ranks, as transformers-neuronx keeps it, and is updated
        in place where it is read."""
        chunks: dict[int, set] = {}
        for old_id, split in self.selected:
            node = self._by_id[old_id]
            while node.op == "slice" and node.attrs["axis"] != split.axis:
                node = node.inputs[0]
            if node.op == "input":
                chunks.setdefault(id(node), set()).add((old_id, split))
        held = {}
        for node in self.old.inputs:
            reads = chunks.get(id(node), set())
            if not reads or id(node) in self.outputs or len({s for _, s in reads}) != 1 \
                    or any(s.interleave for _, s in reads):
                continue
            selected = {old_id for old_id, _ in reads}
            if all(self._only_read_through(user, selected) for user in self.users[node]):
                held[id(node)] = next(iter(reads))[1]
        return held

    def _only_read_through(self, node: Node, selected: set[int]) -> bool:
        if id(node) in selected:
            return True
        return node.op == "slice" and id(node) not in self.outputs and bool(self.users[node]) \
            and all(self._only_read_through(u, selected) for u in self.users[node])

    def _held_input(self, node: Node, s: Split) -> None:
        shape = list(node.shape)
        shape[s.axis] = (s.padded or shape[s.axis]) // s.parts
        new = self.rw.keep(node, attrs={**node.attrs, "shape": tuple(shape),
                                        "whole_shape": tuple(node.shape),
                                        "tp_shard": (s.axis, self.degree, 1, s.parts, s.padded)})
        self._set(node, new, s)

    def _splits(self, old: Node, axis: int, s: Split | None = None) -> bool:
        """Whether constant `old` can be cut along `axis` as `s` cuts a value (plain if None)."""
        s = s or self.plain(axis)
        if not 0 <= axis < old.rank or s.inner is not None:
            return False
        return (s.padded or old.shape[axis]) % (s.groups * s.parts) == 0 \
            and old.shape[axis] % (s.groups * (s.interleave or 1)) == 0

    def _replicated_op(self, node: Node) -> None:
        inputs = [self.full(x) for x in node.inputs]
        self._set(node, self.rw.emit(node.op, inputs, node.attrs, source=node.source,
                                     name=node.name), None)

    def _operand_along(self, old: Node, out_rank: int, s: Split) -> Node | None:
        """`old` as an operand of a result split as `s` (operands broadcast from the right): its
        local chunk, itself if it is broadcast along the split axes, or None."""
        shift = old.rank - out_rank
        axes = [a + shift for a in (s.axis, s.inner) if a is not None]
        if all(a < 0 or old.shape[a] == 1 for a in axes):
            return self.full(old)
        if self.split(old) == s.shifted(shift):
            return self.local(old)
        if old.op == "constant" and s.inner is None and self._splits(old, s.axis + shift, s):
            return self.sharded_constant(old, s.shifted(shift))
        return None

    # --- matmul -------------------------------------------------------------------------------
    def _matmul(self, node: Node) -> bool:
        """A constant weight [K, N] ([N, K] transposed), or a batch of them [E, K, N] (a
        mixture of experts' weights, one per expert): column- or row-parallel per matrix."""
        a, b = node.inputs[:2]
        attrs = node.attrs
        if b.op != "constant" and self.split_axis(a) == a.rank - 2 and a.rank >= 2:
            return self._rows_parallel(node)
        if b.op != "constant" or b.rank not in (2, 3) or attrs["transpose_a"]:
            return False
        first = 3 if attrs["bias"] else 2
        k_axis, n_axis = (b.rank - 1, b.rank - 2) if attrs["transpose_b"] else \
            (b.rank - 2, b.rank - 1)
        sa = self.split(a)
        if sa is not None and sa.axis == a.rank - 1 and sa.parts == self.degree \
                and sa.groups == 1 and sa.inner is None \
                and self._splits(b, k_axis, replace(sa, axis=k_axis)):
            return self._row_parallel(node, first, k_axis, replace(sa, axis=k_axis))
        if b.nbytes < self.min_shard_bytes:
            return False
        split = self._column_split(node, b.shape[n_axis])
        if split is None:
            return False
        return self._column_parallel(node, first, n_axis, split)

    def _column_split(self, node: Node, n: int) -> Split | None:
        """How a column-parallel product's N columns are cut: per part of a fused Q/K/V; whole
        heads per rank (padded up to a multiple of the ranks if they do not divide, or, if
        fewer heads than ranks, each head on ``degree // heads`` ranks); columns, padded."""
        out_axis = node.rank - 1
        groups = self._slice_groups(node) if len(node.inputs) == (3 if node.attrs["bias"]
                                                                 else 2) else 1
        if groups > 1:
            return Split(out_axis, self.degree, groups)
        width = self._head_width(node)
        heads = n // width
        if id(node) in self.query_groups:  # padded per KV group (tp_padding)
            padded = -(-heads // self.degree) * self.degree * width
            return Split(out_axis, self.degree, padded=padded,
                         interleave=self.query_groups[id(node)])
        if heads % self.degree == 0:
            return self.plain(out_axis)
        if width > 1 and self.degree % heads == 0:
            return Split(out_axis, heads)
        padded = -(-heads // self.degree) * self.degree * width
        return Split(out_axis, self.degree, padded=padded)

    def _query_groups(self) -> dict[int, int]:
        """Query projections whose heads must be padded per key/value group (`tp_padding`):
        query heads that do not divide the ranks read key/value heads replicated over them
        (fewer KV heads than ranks, dividing them, and a group's query heads not dividing the
        ranks that share its KV head). Maps the projection's id to the KV head count."""
        found = {}
        for node in self.old.nodes:
            if node.op != "k.attention":
                continue
            q, k = (projection_of(x) for x in node.inputs[:2])
            if q is None or k is None or q is k:
                continue
            width = self._head_width(q)
            if width <= 1 or self._head_width(k) != width:
                continue
            heads, kv = q.shape[-1] // width, k.shape[-1] // width
            if heads % self.degree and kv < self.degree and self.degree % kv == 0 \
                    and heads % kv == 0 and (heads // kv) % (self.degree // kv):
                found[id(q)] = kv
        return found

    def _head_width(self, node: Node) -> int:
        """The head size if the product's readers cut its last axis into [heads, head size]
        (through reshapes that keep the last axis), else 1."""
        n = node.shape[-1]
        frontier, widths = [node], set()
        while frontier:
            x = frontier.pop()
            for user in self.users[x]:
                if user.op == "reshape" and user.shape[-1:] == x.shape[-1:]:
                    frontier.append(user)
                elif user.op == "reshape" and user.rank >= 2 \
                        and user.shape[-1] * user.shape[-2] == n and user.shape[-1] < n:
                    widths.add(user.shape[-1])
        return widths.pop() if len(widths) == 1 else 1

    def _column_parallel(self, node: Node, first: int, n_axis: int, split: Split) -> bool:
        a, b = node.inputs[:2]
        attrs = dict(node.attrs)
        extras = [self._operand_along(e, node.rank, split) for e in node.inputs[first:]]
        weight = self.sharded_constant(b, replace(split, axis=n_axis))
        bias = [self.sharded_constant(node.inputs[2], replace(split, axis=node.inputs[2].rank - 1))
                ] if attrs["bias"] else []
        attrs["n"] = weight.shape[n_axis]
        if all(e is not None for e in extras) and (split.padded is None or self._finite(node)):
            new = self.rw.emit("k.matmul", [self.full(a), weight, *bias, *extras], attrs,
                               source=node.source, name=node.name)
            self._set(node, new, split)
            return True
        # an epilogue operand that cannot be split (a replicated activation): gather, then apply
        bare = {**attrs, "epilogue": (), "dtype": "float32"}
        product = self.rw.emit("k.matmul", [self.full(a), weight, *bias], bare,
                               source=node.source, name=node.name)
        self._set(node, product, split)
        gathered = self.full(node)
        self.gathered.pop(id(node))
        self._set(node, self._epilogue(node, gathered, None, first), None)
        return True

    def _rows_parallel(self, node: Node) -> bool:
        """a split along its rows (a batch of gathered expert weights), b replicated: each rank
        multiplies its rows, and the result stays split along its rows."""
        a, b = node.inputs[:2]
        attrs = node.attrs
        out_axis = node.rank - 2
        if attrs["transpose_a"] or self.split(b) is not None or attrs["bias"]:
            return False
        extras = [self._operand_along(e, node.rank, self.plain(out_axis))
                  for e in node.inputs[2:]]
        if any(e is None for e in extras):
            return False
        new = self.rw.emit("k.matmul", [self.local(a), self.full(b), *extras],
                           {**attrs, "m": attrs["m"] // self.degree}, source=node.source,
                           name=node.name)
        self._set(node, new, self.plain(out_axis))
        return True

    def _gather(self, node: Node) -> bool:
        """Rows of a large constant batch of matrices picked per token (a mixture of experts'
        weights, batched_mm): each rank gathers its slice of every matrix's rows."""
        table, *indices = node.inputs
        if node.attrs.get("kind") != "index" or tuple(node.attrs.get("dims", ())) != (0,) \
                or table.op != "constant" or table.rank != 3 \
                or table.nbytes < self.min_shard_bytes or not self._splits(table, 1) \
                or any(self.split(i) is not None for i in indices):
            return False
        new = self.rw.emit(node.op, [self.sharded_constant(table, self.plain(1)),
                                     *(self.local(i) for i in indices)], node.attrs,
                           source=node.source, name=node.name)
        self._set(node, new, self.plain(node.rank - 2))
        return True

    def _slice_groups(self, node: Node) -> int:
        """Parts a column-parallel result is cut into by its readers: a fused Q/K/V projection
        is sliced into three; splitting each third over the ranks keeps every head's columns
        on one rank (Megatron's fused-QKV layout). 1 if the readers do anything else."""
        if id(node) in self.outputs:
            return 1
        frontier, slices = [node], []
        while frontier:
            x = frontier.pop()
            for user in self.users[x]:
                if id(user) in self.outputs:
                    return 1
                if (user.op == "reshape" and user.shape[-1:] == x.shape[-1:]) or \
                        (user.op == "k.reduce" and x.rank - 1 not in user.attrs["axes"]):
                    frontier.append(user)  # the last axis carried through
                elif user.op == "slice" and user.attrs["axis"] == user.rank - 1 \
                        and user.attrs["step"] == 1:
                    slices.append(user.attrs)
                else:
                    return 1
        n = node.shape[-1]
        widths = {a["end"] - a["start"] for a in slices}
        if len(widths) != 1:
            return 1
        width = widths.pop()
        if n % width or width % self.degree or any(a["start"] % width for a in slices):
            return 1
        return n // width

    def _row_parallel(self, node: Node, first: int, k_axis: int, split: Split) -> bool:
        a, b = node.inputs[:2]
        weight = self.sharded_constant(b, split)
        attrs = {**node.attrs, "k": weight.shape[k_axis], "bias": False,
                 "epilogue": (), "dtype": _product_dtype(node)}
        partial = self.rw.emit("k.matmul", [self.local(a), weight], attrs, source=node.source,
                               name=node.name)
        total = self._collective(partial, "all_reduce", 0, node.source)
        bias = self.full(node.inputs[2]) if node.attrs["bias"] else None
        self._set(node, self._epilogue(node, total, bias, first), None)
        return True

    def _epilogue(self, node: Node, acc: Node, bias: Node | None, first: int) -> Node:
        """The matmul's bias and epilogue as an elementwise kernel on the finished product."""
        program = tuple(node.attrs.get("epilogue") or ())
        if bias is None and not program and node.dtype == acc.dtype:
            return acc
        steps: list[Step] = []
        operands = [acc]
        if bias is not None:
            operands.append(bias)
            steps.append(Step("add", ("in0", "in1"), (), "float32"))
        acc_ref = "s0" if bias is not None else "in0"
        base, shift = len(operands), len(steps)
        operands += [self.full(e) for e in node.inputs[first:]]

        def rename(arg):
            if not isinstance(arg, str):
                return arg
            if arg == "acc":
                return acc_ref
            if arg.startswith("in"):
                return f"in{int(arg[2:]) - first + base}"
            return f"s{int(arg[1:]) + shift}"

        steps += [Step(s.op, tuple(rename(x) for x in s.args), s.attrs, s.dtype) for s in program]
        if not steps or steps[-1].dtype != node.dtype.name:
            last = f"s{len(steps) - 1}" if steps else "in0"
            steps.append(Step("cast", (last,), (("dtype", node.dtype.name),), node.dtype.name))
        return self.rw.emit("k.elementwise", operands, {"program": tuple(steps),
                                                        "dtype": node.dtype.name},
                            source=node.source, name=f"{node.name}_epilogue")

    @staticmethod
    def _finite(node: Node) -> bool:
        """Whether `node`'s elementwise program (or epilogue) keeps finite values finite."""
        program = node.attrs.get("program") or node.attrs.get("epilogue") or ()
        return all(step.op in FINITE_OPS for step in program)

    # --- attention and elementwise ----------------------------------------------------------------
    def _attention(self, node: Node) -> bool:
        """Heads split: each rank attends over its heads. A key/value head shared by several
        query heads (grouped-query attention) is on each rank whose query heads read it; a
        replicated key or value (a KV cache input) is read as the rank's chunk of it."""
        q, k, v = node.inputs[:3]
        sq = self.split(q)
        if sq is None or sq.groups > 1 or sq.axis >= q.rank - 2 \
                or not (q.rank == k.rank == v.rank):
            return False
        on_rows = sq.inner == q.rank - 2  # a group's query heads folded into the query rows
        if sq.inner is not None and sq.inner > q.rank - 2:
            return False
        if on_rows and (node.attrs["mask_kind"] != "none" or len(node.inputs) > 3):
            return False
        want = replace(sq, inner=None, inner_padded=None) if on_rows else sq
        operands = []
        for x in (k, v):
            if self.split(x) == want:
                operands.append(self.local(x))
            elif self.split(x) is None and want.inner is None \
                    and (want.padded or x.shape[want.axis]) == (want.padded or q.shape[sq.axis]):
                operands.append(self.select(x, want))
            else:
                return False
        mask = [self._operand_along(m, node.rank, sq) for m in node.inputs[3:]]
        if any(m is None for m in mask):
            return False
        local_q = self.local(q)
        new = self.rw.emit("k.attention", [local_q, *operands, *mask],
                           {**node.attrs, "batch": tuple(local_q.shape[:-2]),
                            "sq": local_q.shape[-2]}, source=node.source, name=node.name)
        self._set(node, new, sq)
        return True

    def _elementwise(self, node: Node) -> bool:
        shifted = {s.shifted(node.rank - x.rank) for x in node.inputs
                   if (s := self.split(x)) is not None}
        if len(shifted) != 1:
            return False
        (split,) = shifted
        if split.groups > 1 or (split.padded is not None and not self._finite(node)):
            return False
        operands = [self._operand_along(x, node.rank, split) for x in node.inputs]
        if any(o is None for o in operands):
            return False
        self._set(node, self.rw.emit(node.op, operands, node.attrs, source=node.source,
                                     name=node.name), split)
        return True

    def _reduce(self, node: Node) -> bool:
        """A reduction over axes other than the split one (a mixture of experts' sum over
        experts of column-parallel products) keeps the split."""
        x = node.inputs[0]
        s = self.split(x)
        reduced = tuple(node.attrs["axes"]) or tuple(range(x.rank))
        if s is None or s.inner is not None or s.axis in reduced \
                or node.attrs["op"] in ("argmax", "argmin"):
            return False
        out_axis = s.axis if node.attrs["keepdim"] else s.axis - sum(a < s.axis for a in reduced)
        self._set(node, self.rw.emit(node.op, [self.local(x)], node.attrs, source=node.source,
                                     name=node.name), replace(s, axis=out_axis))
        return True

    def _concat(self, node: Node) -> bool:
        """Parts split alike, joined along another axis (rotary embeddings' rotate_half over
        head_dim, with heads split): each rank joins its own chunks. Replicated parts (a KV
        cache input's cached positions, joined with the new token's split keys) join as the
        rank's chunk of them, so the cache is updated where its heads are read."""
        splits = {self.split(x) for x in node.inputs} - {None}
        if len(splits) != 1:
            return False
        split = splits.pop()
        if node.attrs["axis"] in (split.axis, split.inner) or split.groups > 1:
            return False
        operands = []
        for x in node.inputs:
            if self.split(x) is not None:
                operands.append(self.local(x))
            elif split.inner is None and x.shape[split.axis] == node.shape[split.axis]:
                operands.append(self.select(x, split))
            else:
                return False
        self._set(node, self.rw.emit(node.op, operands, node.attrs, source=node.source,
                                     name=node.name), split)
        return True

    # --- views ----------------------------------------------------------------------------------
    def _keep_view(self, node: Node, attrs: dict, split: Split) -> bool:
        new = self.rw.emit(node.op, [self.local(node.inputs[0])], attrs, source=node.source,
                           name=node.name)
        self._set(node, new, split)
        return True

    def _permute(self, node: Node) -> bool:
        s = self.split(node.inputs[0])
        if s is None:
            return False
        dims = list(node.attrs["dims"])
        return self._keep_view(node, node.attrs, replace(
            s, axis=dims.index(s.axis), inner=None if s.inner is None else dims.index(s.inner)))

    def _slice(self, node: Node) -> bool:
        x = node.inputs[0]
        s = self.split(x)
        a = node.attrs
        if s is None or a["axis"] == s.inner:
            return False
        if a["axis"] != s.axis:
            return self._keep_view(node, a, s)
        part = x.shape[s.axis] // s.groups
        if s.groups == 1 or a["step"] != 1 or a["end"] - a["start"] != part or a["start"] % part:
            return False
        chunk = part // self.degree  # one whole part: this rank's chunk of it
        start = a["start"] // part * chunk
        return self._keep_view(node, {**a, "start": start, "end": start + chunk},
                               self.plain(s.axis))

    def _expand(self, node: Node) -> bool:
        """Broadcasts keep a split; broadcasting a key/value head held by several ranks over
        its query heads (grouped-query attention) gives each rank its own query heads' copies."""
        x = node.inputs[0]
        s = self.split(x)
        if s is None:
            return False
        shift = node.rank - x.rank
        split = s.shifted(shift)
        shape = list(node.attrs["shape"])
        local = self.local(x).shape
        for d in range(x.rank):
            if x.shape[d] == node.shape[d + shift]:
                shape[d + shift] = local[d]
        grown = [d + shift for d in range(x.rank)
                 if x.shape[d] == 1 and node.shape[d + shift] > 1]
        reps = self.degree // s.parts
        if reps > 1 and s.inner is None and s.padded is None and len(grown) == 1 \
                and node.shape[grown[0]] % reps == 0:
            shape[grown[0]] //= reps
            split = replace(split, inner=grown[0])
        elif reps > 1 and s.inner is None and s.padded is None and len(grown) == 1 \
                and self.query_groups:  # copies for query heads padded per group (tp_padding)
            shape[grown[0]] = -(-node.shape[grown[0]] // reps)
            split = replace(split, inner=grown[0], inner_padded=shape[grown[0]] * reps)
        return self._keep_view(node, {**node.attrs, "shape": tuple(shape)}, split)

    def _reshape(self, node: Node) -> bool:
        x = node.inputs[0]
        s = self.split(x)
        if s is None:
            return False
        if s.inner is not None:
            split = self._reshape_inner(x.shape, node.shape, s)
        elif s.groups > 1:
            out_axis = reshape_axis(x.shape, node.shape, s.axis, self.degree)
            if out_axis is None or node.shape[out_axis] != x.shape[s.axis]:
                return False  # a grouped axis must stay whole
            split = replace(s, axis=out_axis)
        else:
            split = self._reshape_chunks(x.shape, node.shape, s)
        if split is None:
            return False
        shape = list(node.shape)
        local = self.local(x).shape
        for axis in (split.axis, split.inner):
            if axis is not None:
                shape[axis] = _local_length(node.shape[axis], split, axis, self.degree)
        if prod(shape) != prod(local):
            return False
        return self._keep_view(node, {**node.attrs, "shape": tuple(shape)}, split)

    def _reshape_chunks(self, src: tuple, dst: tuple, s: Split) -> Split | None:
        """An ungrouped split through a reshape: its chunks stay contiguous chunks of one output
        axis (padding scaled with it), or a head axis cut into [KV heads, query heads per KV
        head] spreads one rank's heads over both (`Split.inner`)."""
        target = reshape_axis(src, dst, s.axis, 1)
        if target is not None:
            scale = Fraction(dst[target], src[s.axis])
            padded = None if s.padded is None else s.padded * scale
            length = padded if padded is not None else dst[target]
            if (padded is None or padded.denominator == 1) and length % s.parts == 0 \
                    and (Fraction(src[s.axis] if s.padded is None else s.padded, s.parts)
                         * scale).denominator == 1:
                return replace(s, axis=target, padded=None if padded is None else int(padded))
        if s.interleave and s.parts == self.degree:  # heads padded per group -> [groups, heads]
            for group_src, group_dst in _axis_groups(src, dst):
                outer = [a for a in group_src if src[a] != 1]
                wide = [b for b in group_dst if dst[b] != 1]
                if outer == [s.axis] and len(wide) == 2 and dst[wide[0]] == s.interleave:
                    return Split(wide[0], s.interleave, inner=wide[1],
                                 inner_padded=s.padded // s.interleave)
            return None
        if s.parts != self.degree or s.padded is not None:
            return None
        for group_src, group_dst in _axis_groups(src, dst):
            if s.axis not in group_src:
                continue
            outer = [a for a in group_src if src[a] != 1]
            wide = [b for b in group_dst if dst[b] != 1]
            if outer != [s.axis] or len(wide) != 2:
                return None
            heads, per_head = wide
            if self.degree % dst[heads] or dst[per_head] % (self.degree // dst[heads]):
                return None
            return Split(heads, dst[heads], inner=per_head)
        return None

    def _reshape_inner(self, src: tuple, dst: tuple, s: Split) -> Split | None:
        """A split with `inner` through a reshape: both axes kept, or merged back into one
        axis cut one chunk per rank (each rank's chunk of `axis` is one element)."""
        mapped: dict[int, int] = {}
        for group_src, group_dst in _axis_groups(src, dst):
            wide_src = [a for a in group_src if src[a] != 1]
            wide_dst = [b for b in group_dst if dst[b] != 1]
            if wide_src == [s.axis, s.inner] and len(wide_dst) == 1 \
                    and src[s.axis] == s.parts:
                if s.inner_padded:  # KV copies for query heads padded per group
                    return Split(wide_dst[0], self.degree, padded=s.parts * s.inner_padded,
                                 interleave=s.parts if s.parts > 1 else None)
                return self.plain(wide_dst[0])
            for a in (s.axis, s.inner):
                if a in group_src:
                    if wide_src != [a] or len(wide_dst) != 1:
                        return None
                    mapped[a] = wide_dst[0]
        if len(mapped) != 2:
            return None
        return replace(s, axis=mapped[s.axis], inner=mapped[s.inner])


def _product_dtype(node: Node) -> str:
    """The dtype of a fused matmul's product as the model computes it, before its epilogue (the
    module docstring: row-parallel sums are all-reduced in it): the dtype of the first epilogue
    step (the op that read the product; auto-cast leaves an fp32 model's products fp32, a bf16
    model's are bf16), else the node's."""
    program = tuple(node.attrs.get("epilogue") or ())
    return program[0].dtype if program else node.dtype.name


def _local_length(size: int, s: Split, axis: int, degree: int) -> int:
    if axis == s.inner:
        return (s.inner_padded or size) // (degree // s.parts)
    return (s.padded or size) // s.parts


def _axis_groups(src: tuple[int, ...], dst: tuple[int, ...]) -> list[tuple[list[int], list[int]]]:
    """The axes of a row-major reshape's input and output cut into groups of equal products."""
    groups, i, j = [], 0, 0
    while i < len(src) or j < len(dst):
        gi, gj = [i], [j]
        ps = src[i] if i < len(src) else 1
        pd = dst[j] if j < len(dst) else 1
        i, j = i + 1, j + 1
        while ps != pd:
            if ps < pd:
                ps *= src[i]
                gi.append(i)
                i += 1
            else:
                pd *= dst[j]
                gj.append(j)
                j += 1
        groups.append(([a for a in gi if a < len(src)], [b for b in gj if b < len(dst)]))
    return groups


def reshape_axis(src: tuple[int, ...], dst: tuple[int, ...], axis: int, degree: int) -> int | None:
    """The axis of `dst` along which a row-major reshape keeps `src`'s chunks along `axis`
    contiguous and equal (None if the chunks straddle `dst`'s axes).

    Both shapes are cut into groups of axes with equal products; the chunk of `axis` is one
    contiguous run of its group iff `axis` is the group's outermost non-unit axis, and that run
    is a chunk of the first non-unit output axis of the group iff that axis divides by `degree`.
    """
    for gi, gj in _axis_groups(src, dst):
        if axis in gi:
            outer = next(a for a in gi if src[a] != 1)
            target = next((b for b in gj if dst[b] != 1), None)
            if outer != axis or target is None or dst[target] % degree:
                return None
            return target
    return None
