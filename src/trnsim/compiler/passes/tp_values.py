"""Tensor parallelism's values (`trnsim.compiler.passes.tensor_parallel`): how a value of the
rank-local graph is cut over the ranks (`Split`), and the sharder's bookkeeping of each old
node's rank-local value: its whole value all-gathered on demand (padding dropped), a constant's
chunk, a replicated input's chunk read by index (`select`), and the KV-cache inputs every rank
can be handed as its chunk from the start (`inputs_read_as_chunks`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from trnsim.compiler.ir import Constant, Node
from trnsim.compiler.passes.tp_padding import interleaved, interleaved_rows
from trnsim.numerics import dtype as as_dtype


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


class ShardedValues:
    """The value side of `tensor_parallel._Sharder` (its state is set up there)."""

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
