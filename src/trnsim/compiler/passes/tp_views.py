"""Tensor parallelism's rules for values that stay split (`trnsim.compiler.passes.tensor_parallel`):
attention over each rank's heads, elementwise ops, reductions and concatenations along another
axis, and views (permute, slice, expand, reshape) that keep a rank's chunk one contiguous
chunk."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from math import prod

from trnsim.compiler.ir import Node
from trnsim.compiler.passes.tp_values import Split


class ViewRules:
    """The handlers of `tensor_parallel._Sharder` for ops that keep a split."""

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
