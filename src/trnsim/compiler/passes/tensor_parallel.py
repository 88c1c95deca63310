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
  (fp32); bias and epilogue are applied once, after it (so Q/K/V -> attention -> output
  projection, and up -> GELU -> down, cost one all-reduce each, as in Megatron-LM);
- views, attention over heads, elementwise ops and concatenations along another axis keep a
  sharded value sharded when the shard stays one contiguous chunk (heads split across ranks);
- anything else reads replicated values: a sharded operand is all-gathered first (``k.collective``).

Every rank runs the same program; only the weight chunks differ (`Constant.shard`). Outputs
are replicated. Collectives are timed and computed by the collectives fabric at run time.
"""

from __future__ import annotations

from trnsim.compiler.errors import IRError
from trnsim.compiler.fused import KERNEL_LEVEL_LEAVES, Step
from trnsim.compiler.ir import Graph, Node, Rewriter

# A matmul weight smaller than this is not split when its input is replicated: the all-gather
# or all-reduce it would add costs more than the HBM it saves (a classifier head, a pooler).
# A compiler heuristic (neuronx-distributed leaves the choice to the model author).
MIN_SHARD_BYTES = 1 << 20

LEAVES = KERNEL_LEVEL_LEAVES

Axis = int | None  # None: replicated; an int: sharded along that axis of the value


def tensor_parallel(graph: Graph, degree: int, *, min_shard_bytes: int | None = None) -> Graph:
    """The rank-local graph of `graph` split over `degree` ranks (the graph itself if 1)."""
    if degree == 1:
        return graph
    if degree < 1:
        raise IRError(f"tensor parallel degree {degree} must be >= 1")
    limit = MIN_SHARD_BYTES if min_shard_bytes is None else min_shard_bytes
    out = _Sharder(graph, degree, limit).run()
    out.meta["tensor_parallel"] = degree
    return out


class _Sharder:
    def __init__(self, graph: Graph, degree: int, min_shard_bytes: int) -> None:
        self.old = graph
        self.degree = degree
        self.min_shard_bytes = min_shard_bytes
        self.rw = Rewriter(graph)
        self.axis: dict[int, Axis] = {}  # old node id -> how its new value is split
        self.groups: dict[int, int] = {}  # old node id -> parts its split axis is cut into
        self.users = graph.users()
        self.outputs = {id(o) for o in graph.outputs}
        self.gathered: dict[int, Node] = {}  # old node id -> its all-gathered (replicated) value
        self.shards: dict[tuple, Node] = {}  # (old constant id, axis, groups) -> sharded constant

    def run(self) -> Graph:
        handlers = {"k.matmul": self._matmul, "k.attention": self._attention,
                    "k.reduce": self._reduce, "k.gather": self._gather,
                    "k.elementwise": self._elementwise, "k.concat": self._concat,
                    "reshape": self._reshape,
                    "permute": self._permute, "slice": self._slice, "expand": self._expand}
        for node in self.old.nodes:
            handler = handlers.get(node.op)
            if node.op in LEAVES:
                self._set(node, self.rw.keep(node), None)
            elif handler is None or not handler(node):
                self._replicated_op(node)
        for out in self.old.outputs:
            self.rw.mapping[out] = self.full(out)
        return self.rw.finish()

    # --- values -----------------------------------------------------------------------------
    def _set(self, old: Node, new: Node, axis: Axis, groups: int = 1) -> Node:
        self.rw.mapping[old] = new
        self.axis[id(old)] = axis
        self.groups[id(old)] = groups
        return new

    def split_axis(self, old: Node) -> Axis:
        """The axis `old` is split along, if it is one chunk per rank (not grouped)."""
        return self.axis.get(id(old)) if self.groups.get(id(old), 1) == 1 else None

    def local(self, old: Node) -> Node:
        return self.rw.mapping[old]

    def full(self, old: Node) -> Node:
        """`old`'s whole value on every rank (all-gathered once if it is sharded)."""
        axis = self.axis.get(id(old))
        if axis is None:
            return self.rw.mapping[old]
        found = self.gathered.get(id(old))
        if found is None:
            groups, local = self.groups.get(id(old), 1), self.local(old)
            if groups == 1:
                found = self._collective(local, "all_gather", axis, old.source)
            else:  # gather each part's chunks side by side: [.., parts, chunk] along the chunk
                shape = local.shape
                parts = self.rw.emit("reshape", [local], {"shape": (
                    *shape[:axis], groups, shape[axis] // groups, *shape[axis + 1:])})
                whole = self._collective(parts, "all_gather", axis + 1, old.source)
                found = self.rw.emit("reshape", [whole], {"shape": old.shape})
            self.gathered[id(old)] = found
        return found

    def _collective(self, x: Node, kind: str, axis: int, source: str | None) -> Node:
        return self.rw.emit("k.collective", [x], {"kind": kind, "axis": axis, "degree": self.degree,
                                                  "dtype": x.dtype.name},
                            source=source, name=kind)

    def sharded_constant(self, old: Node, axis: int, groups: int = 1) -> Node:
        key = (id(old), axis, groups)
        found = self.shards.get(key)
        if found is None:
            data = self.old.constant(old).sharded(axis, self.degree, groups)
            found = self.shards[key] = self.rw.new.add_data(data, name=f"{old.name}_tp",
                                                            source=old.source)
        return found

    def _splits(self, old: Node, axis: int) -> bool:
        return 0 <= axis < old.rank and old.shape[axis] % self.degree == 0

    def _replicated_op(self, node: Node) -> None:
        inputs = [self.full(x) for x in node.inputs]
        self._set(node, self.rw.emit(node.op, inputs, node.attrs, source=node.source,
                                     name=node.name), None)

    def _operand_along(self, old: Node, out_rank: int, out_axis: int) -> Node | None:
        """`old` as an operand of a result sharded along `out_axis` (operands broadcast from the
        right): its local chunk, itself if it is broadcast along that axis, or None."""
        axis = out_axis - (out_rank - old.rank)
        if axis < 0 or old.shape[axis] == 1:
            return self.full(old)
        if self.split_axis(old) == axis:
            return self.local(old)
        if old.op == "constant" and self._splits(old, axis):
            return self.sharded_constant(old, axis)
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
        if self.split_axis(a) == a.rank - 1 and self._splits(b, k_axis):
            return self._row_parallel(node, first, k_axis)
        if b.nbytes < self.min_shard_bytes or not self._splits(b, n_axis):
            return False
        return self._column_parallel(node, first, n_axis)

    def _column_parallel(self, node: Node, first: int, n_axis: int) -> bool:
        a, b = node.inputs[:2]
        attrs = dict(node.attrs)
        out_axis = node.rank - 1
        extras = [self._operand_along(e, node.rank, out_axis) for e in node.inputs[first:]]
        groups = self._slice_groups(node) if not extras else 1
        weight = self.sharded_constant(b, n_axis, groups)
        bias = [self.sharded_constant(node.inputs[2], node.inputs[2].rank - 1, groups)] \
            if attrs["bias"] else []
        attrs["n"] = attrs["n"] // self.degree
        if all(e is not None for e in extras):  # the epilogue runs on each rank's columns
            new = self.rw.emit("k.matmul", [self.full(a), weight, *bias, *extras], attrs,
                               source=node.source, name=node.name)
            self._set(node, new, out_axis, groups)
            return True
        # an epilogue operand that cannot be split (a replicated activation): gather, then apply
        bare = {**attrs, "epilogue": (), "dtype": "float32"}
        product = self.rw.emit("k.matmul", [self.full(a), weight, *bias], bare,
                               source=node.source, name=node.name)
        gathered = self._collective(product, "all_gather", out_axis, node.source)
        self._set(node, self._epilogue(node, gathered, None, first), None)
        return True

    def _rows_parallel(self, node: Node) -> bool:
        """a split along its rows (a batch of gathered expert weights), b replicated: each rank
        multiplies its rows, and the result stays split along its rows."""
        a, b = node.inputs[:2]
        attrs = node.attrs
        out_axis = node.rank - 2
        if attrs["transpose_a"] or self.split_axis(b) is not None or attrs["bias"]:
            return False
        extras = [self._operand_along(e, node.rank, out_axis) for e in node.inputs[2:]]
        if any(e is None for e in extras):
            return False
        new = self.rw.emit("k.matmul", [self.local(a), self.full(b), *extras],
                           {**attrs, "m": attrs["m"] // self.degree}, source=node.source,
                           name=node.name)
        self._set(node, new, out_axis)
        return True

    def _gather(self, node: Node) -> bool:
        """Rows of a large constant batch of matrices picked per token (a mixture of experts'
        weights, batched_mm): each rank gathers its slice of every matrix's rows."""
        table, *indices = node.inputs
        if node.attrs.get("kind") != "index" or tuple(node.attrs.get("dims", ())) != (0,) \
                or table.op != "constant" or table.rank != 3 \
                or table.nbytes < self.min_shard_bytes or not self._splits(table, 1) \
                or any(self.axis.get(id(i)) is not None for i in indices):
            return False
        new = self.rw.emit(node.op, [self.sharded_constant(table, 1),
                                     *(self.local(i) for i in indices)], node.attrs,
                           source=node.source, name=node.name)
        self._set(node, new, node.rank - 2)
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

    def _row_parallel(self, node: Node, first: int, k_axis: int) -> bool:
        a, b = node.inputs[:2]
        attrs = {**node.attrs, "k": node.attrs["k"] // self.degree, "bias": False,
                 "epilogue": (), "dtype": "float32"}
        weight = self.sharded_constant(b, k_axis)
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

    # --- attention and elementwise ----------------------------------------------------------------
    def _attention(self, node: Node) -> bool:
        q, k, v = node.inputs[:3]
        head = self.split_axis(q)
        if head is None or head >= q.rank - 2 or not (q.rank == k.rank == v.rank) \
                or self.split_axis(k) != head or self.split_axis(v) != head:
            return False
        mask = [self._operand_along(m, node.rank, head) for m in node.inputs[3:]]
        if any(m is None for m in mask):
            return False
        batch = list(node.attrs["batch"])
        batch[head] //= self.degree
        new = self.rw.emit("k.attention", [self.local(q), self.local(k), self.local(v), *mask],
                           {**node.attrs, "batch": tuple(batch)}, source=node.source,
                           name=node.name)
        self._set(node, new, head)
        return True

    def _elementwise(self, node: Node) -> bool:
        axes = {a + node.rank - x.rank for x in node.inputs
                if (a := self.split_axis(x)) is not None}
        if len(axes) != 1:
            return False
        (axis,) = axes
        operands = [self._operand_along(x, node.rank, axis) for x in node.inputs]
        if any(o is None for o in operands):
            return False
        self._set(node, self.rw.emit(node.op, operands, node.attrs, source=node.source,
                                     name=node.name), axis)
        return True

    def _reduce(self, node: Node) -> bool:
        """A reduction over axes other than the split one (a mixture of experts' sum over
        experts of column-parallel products) keeps the split."""
        x = node.inputs[0]
        axis, groups = self.axis.get(id(x)), self.groups.get(id(x), 1)
        reduced = tuple(node.attrs["axes"]) or tuple(range(x.rank))
        if axis is None or axis in reduced or node.attrs["op"] in ("argmax", "argmin"):
            return False
        out_axis = axis if node.attrs["keepdim"] else axis - sum(a < axis for a in reduced)
        self._set(node, self.rw.emit(node.op, [self.local(x)], node.attrs, source=node.source,
                                     name=node.name), out_axis, groups)
        return True

    def _concat(self, node: Node) -> bool:
        """Parts split along the same axis, joined along another (rotary embeddings'
        rotate_half over head_dim, with heads split): each rank joins its own chunks."""
        axes = {self.split_axis(x) for x in node.inputs}
        if len(axes) != 1 or None in axes or node.attrs["axis"] in axes:
            return False
        self._set(node, self.rw.emit(node.op, [self.local(x) for x in node.inputs], node.attrs,
                                     source=node.source, name=node.name), axes.pop())
        return True

    # --- views ----------------------------------------------------------------------------------
    def _view(self, node: Node, attrs: dict, axis: int, groups: int = 1) -> bool:
        new = self.rw.emit(node.op, [self.local(node.inputs[0])], attrs, source=node.source,
                           name=node.name)
        self._set(node, new, axis, groups)
        return True

    def _permute(self, node: Node) -> bool:
        x = node.inputs[0]
        axis = self.axis.get(id(x))
        if axis is None:
            return False
        return self._view(node, node.attrs, list(node.attrs["dims"]).index(axis),
                          self.groups[id(x)])

    def _slice(self, node: Node) -> bool:
        x = node.inputs[0]
        axis, groups = self.axis.get(id(x)), self.groups.get(id(x), 1)
        a = node.attrs
        if axis is None:
            return False
        if a["axis"] != axis:
            return self._view(node, a, axis, groups)
        part = x.shape[axis] // groups
        if groups == 1 or a["step"] != 1 or a["end"] - a["start"] != part or a["start"] % part:
            return False
        chunk = part // self.degree  # one whole part: this rank's chunk of it
        start = a["start"] // part * chunk
        return self._view(node, {**a, "start": start, "end": start + chunk}, axis)

    def _expand(self, node: Node) -> bool:
        x = node.inputs[0]
        axis = self.split_axis(x)
        if axis is None:
            return False
        out_axis = axis + node.rank - x.rank
        shape = list(node.attrs["shape"])
        shape[out_axis] //= self.degree
        return self._view(node, {**node.attrs, "shape": tuple(shape)}, out_axis)

    def _reshape(self, node: Node) -> bool:
        x = node.inputs[0]
        axis, groups = self.axis.get(id(x)), self.groups.get(id(x), 1)
        if axis is None:
            return False
        out_axis = reshape_axis(x.shape, node.shape, axis, self.degree)
        if out_axis is None or (groups > 1 and node.shape[out_axis] != x.shape[axis]):
            return False  # a grouped axis must stay whole
        shape = list(node.shape)
        shape[out_axis] //= self.degree
        return self._view(node, {**node.attrs, "shape": tuple(shape)}, out_axis, groups)


def reshape_axis(src: tuple[int, ...], dst: tuple[int, ...], axis: int, degree: int) -> int | None:
    """The axis of `dst` along which a row-major reshape keeps `src`'s chunks along `axis`
    contiguous and equal (None if the chunks straddle `dst`'s axes).

    Both shapes are cut into groups of axes with equal products; the chunk of `axis` is one
    contiguous run of its group iff `axis` is the group's outermost non-unit axis, and that run
    is a chunk of the first non-unit output axis of the group iff that axis divides by `degree`.
    """
    i = j = 0
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
        if axis in gi:
            outer = next(a for a in gi if a < len(src) and src[a] != 1)
            target = next((b for b in gj if b < len(dst) and dst[b] != 1), None)
            if outer != axis or target is None or dst[target] % degree:
                return None
            return target
    return None
