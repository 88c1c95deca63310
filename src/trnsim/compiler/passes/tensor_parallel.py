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

This module is the pass's entry and its walk (`_Sharder`); the rules are beside it by kind:
`tp_values` (`Split` and each value's chunk or whole), `tp_linear` (column- and row-parallel
matmuls), `tp_views` (attention, elementwise, reductions, concatenations and views that keep a
split), `tp_padding` (per-group padding of query heads).
"""

from __future__ import annotations

from trnsim.compiler.errors import IRError
from trnsim.compiler.fused import KERNEL_LEVEL_LEAVES
from trnsim.compiler.ir import Graph, Node, Rewriter
from trnsim.compiler.passes.tp_linear import LinearRules
from trnsim.compiler.passes.tp_values import ShardedValues, Split
from trnsim.compiler.passes.tp_views import ViewRules, reshape_axis

__all__ = ["MIN_SHARD_BYTES", "Split", "reshape_axis", "tensor_parallel"]

# A matmul weight smaller than this is not split when its input is replicated: the all-gather
# or all-reduce it would add costs more than the HBM it saves (a classifier head, a pooler).
# A compiler heuristic (neuronx-distributed leaves the choice to the model author).
MIN_SHARD_BYTES = 1 << 20

LEAVES = KERNEL_LEVEL_LEAVES


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


class _Sharder(LinearRules, ViewRules, ShardedValues):
    """One walk of the graph: the rules live in `tp_linear`, `tp_views` and `tp_values`."""

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
