"""Tensor parallelism's matmul rules (`trnsim.compiler.passes.tensor_parallel`): column- and
row-parallel linears (padded heads and widths, grouped key/value heads, experts' weights), the
all-reduce of row-parallel partial products in the product's dtype, and the epilogue applied
once after it."""

from __future__ import annotations

from dataclasses import replace

from trnsim.compiler.fused import Step
from trnsim.compiler.ir import Node
from trnsim.compiler.passes.tp_padding import projection_of
from trnsim.compiler.passes.tp_values import Split

# Elementwise ops that keep finite values finite: only these may read a zero-padded split (a
# padded element must not become inf or NaN, which the next weight's zero rows would not cancel).
FINITE_OPS = frozenset(("add", "sub", "mul", "neg", "abs", "relu", "silu", "gelu", "tanh",
                        "sigmoid", "erf", "sin", "cos", "cast", "maximum", "minimum", "clamp",
                        "where"))


class LinearRules:
    """The matmul handlers of `tensor_parallel._Sharder`."""

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


def _product_dtype(node: Node) -> str:
    """The dtype of a fused matmul's product as the model computes it, before its epilogue (the
    module docstring: row-parallel sums are all-reduced in it): the dtype of the first epilogue
    step (the op that read the product; auto-cast leaves an fp32 model's products fp32, a bf16
    model's are bf16), else the node's."""
    program = tuple(node.attrs.get("epilogue") or ())
    return program[0].dtype if program else node.dtype.name
