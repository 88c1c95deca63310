"""Layout choice: TensorE's stationary operand, weights' HBM layout, and how views are read.

TensorE contracts over the partition axis: ``out[M, N] = stationary[K, M]^T @ moving[K, N]``
with M <= the core's stationary free size (128) and N <= its moving free size per instruction. For
``acc = A @ B`` either operand can be stationary; each stationary tile costs a load, then streams
the other operand's columns. `choose_stationary` picks the operand that needs fewer
load-plus-stream cycles. Constant weights are stored K-major ("kn": the contraction axis on
partitions) in HBM: the lowering lays them out once at load time, never at run time.

Every view node (reshape/permute/expand/slice) gets ``fold`` and ``access``: "alias" if it reads
its base's bytes in order (a free reshape), "dma" if one DMA access pattern (a partition axis
plus up to `DMA_FREE_DIMS` strided free axes) can read it in place, else "copy" (materialised
by a copy kernel). ``access`` is (element offset, ((stride, size), ...)) into the base buffer.
A transposing view (its innermost axis strided, another axis contiguous: a weight gradient
``mm(x^T, dy)^T``, a key's gradient) read in place by anything but TensorE would cost one DMA
descriptor per element; it is materialised instead (the copy kernel transposes 128 x 128 blocks
on TensorE), once for all its readers.
"""

from __future__ import annotations

import math

from trnsim.compiler.ir import Graph, Node, Rewriter

# ASSUMPTION (compiler heuristic, not a hardware figure): cycles to load one stationary tile,
# relative to one moving column per cycle; only the ratio matters for the choice.
STATIONARY_LOAD_CYCLES = 128
DMA_FREE_DIMS = 4  # free-axis (stride, size) pairs of an access pattern (isa.AccessPattern)
VIEWS = ("reshape", "permute", "expand", "slice")


def choose_stationary(m: int, n: int, core) -> str:
    """"a" (rows of A stationary, B streams) or "b" (columns of B stationary, A streams)."""
    columns = core.tensor.max_stationary_free  # stationary free size per matmul instruction (M)
    tiles_a = math.ceil(m / columns)
    tiles_b = math.ceil(n / columns)
    cost_a = tiles_a * (STATIONARY_LOAD_CYCLES + n)
    cost_b = tiles_b * (STATIONARY_LOAD_CYCLES + m)
    return "a" if cost_a <= cost_b else "b"


def choose_layout(graph: Graph, core) -> Graph:
    rw = Rewriter(graph)
    access: dict[int, tuple[int, tuple[tuple[int, int], ...], Node]] = {}
    users = graph.users()
    outputs = {id(n) for n in graph.outputs}
    for node in graph.nodes:
        ins = rw.operands(node)
        if node.op == "k.matmul":
            attrs = dict(node.attrs)
            attrs["stationary"] = choose_stationary(attrs["m"], attrs["n"], core)
            attrs["weight_layout"] = "kn" if ins[1].op == "constant" else None
            rw.keep(node, attrs=attrs)
        elif node.op in VIEWS:
            fold, pattern = _view_access(node, ins[0], access)
            readers = TRANSPOSING_READERS + (BROADCAST_READERS if _broadcast_rows(pattern[1])
                                             else ())
            if fold == "dma" and _transposing(pattern[1]) and (id(node) in outputs or any(
                    u.op not in readers for u in users[node])):
                fold = "copy"
            attrs = {**node.attrs, "fold": fold, "access": pattern[:2]}
            new = rw.keep(node, attrs=attrs)
            if fold != "copy":
                access[id(new)] = pattern
        else:
            rw.keep(node)
    return rw.finish()


# Kernels that read a transposing view well: TensorE takes either operand's layout (k.matmul),
# a view's own fold is judged when it is laid out (views)
TRANSPOSING_READERS = ("k.matmul", *VIEWS)


# Kernels that read a row broadcast (a [rows, 1] value repeated along the innermost axis, e.g.
# a mean's gradient) in place: their loads take the column once and spread it on chip
# (`kernels.layout.load_block`), so materialising the broadcast would only add HBM traffic
BROADCAST_READERS = ("k.elementwise",)


def _broadcast_rows(dims: tuple[tuple[int, int], ...]) -> bool:
    """The innermost axis of size > 1 repeats one element (stride 0)."""
    moving = [(stride, size) for stride, size in dims if size > 1]
    return bool(moving) and moving[-1][0] == 0


def _transposing(dims: tuple[tuple[int, int], ...]) -> bool:
    """The innermost axis of size > 1 is strided while another axis is contiguous."""
    moving = [(stride, size) for stride, size in dims if size > 1]
    return bool(moving) and moving[-1][0] != 1 and any(st == 1 for st, _ in moving)


def _contiguous(shape: tuple[int, ...]) -> list[int]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return strides[::-1]


def _view_access(node: Node, src: Node, known: dict[int, tuple[int, tuple[tuple[int, int], ...],
                                                                  Node]]
                 ) -> tuple[str, tuple[int, tuple[tuple[int, int], ...], Node]]:
    if id(src) in known:
        offset, dims, base = known[id(src)]
        strides = [st for st, _ in dims]
        shape = [sz for _, sz in dims]
    else:
        offset, base = 0, src
        shape, strides = list(src.shape), _contiguous(src.shape)
    a = node.attrs
    if node.op == "permute":
        shape = [shape[d] for d in a["dims"]]
        strides = [strides[d] for d in a["dims"]]
    elif node.op == "expand":
        lead = len(node.shape) - len(shape)
        strides = [0] * lead + [0 if s == 1 and t != 1 else st for s, t, st in
                                zip(shape, node.shape[lead:], strides, strict=True)]
        shape = list(node.shape)
    elif node.op == "slice":
        offset += a["start"] * strides[a["axis"]]
        strides[a["axis"]] *= a["step"]
        shape = list(node.shape)
    else:
        found = reshape_strides(shape, strides, list(node.shape))
        if found is None:
            return "copy", (0, tuple(zip(_contiguous(node.shape), node.shape, strict=True)), node)
        shape, strides = list(node.shape), found
    pattern = (offset, tuple(zip(strides, shape, strict=True)), base)
    merged = merge_dims(strides, shape)
    if offset == 0 and len(merged) <= 1 and (not merged or merged[0][0] == 1) and \
            math.prod(shape) == base.numel:
        return "alias", pattern
    if len(merged) <= 1 + DMA_FREE_DIMS:
        return "dma", pattern
    return "copy", pattern


def merge_dims(strides: list[int], shape: list[int]) -> list[tuple[int, int]]:
    """Drop size-1 axes and merge neighbours that are contiguous with each other."""
    dims = [(st, sz) for st, sz in zip(strides, shape, strict=True) if sz != 1]
    merged: list[tuple[int, int]] = []
    for st, sz in dims:
        if merged and merged[-1][0] == st * sz:
            merged[-1] = (st, merged[-1][1] * sz)
        else:
            merged.append((st, sz))
    return merged


def reshape_strides(shape: list[int], strides: list[int], new: list[int]) -> list[int] | None:
    """Strides for viewing (shape, strides) as `new` without a copy, or None (numpy's rule)."""
    old = [(sz, st) for sz, st in zip(shape, strides, strict=True) if sz != 1]
    out: list[int] = []
    i = 0
    new_nz = [s for s in new if s != 1]
    j = 0
    result_nz: list[int] = []
    while i < len(old) and j < len(new_nz):
        size_old, size_new = old[i][0], new_nz[j]
        i2, j2 = i, j
        while size_old != size_new:
            if size_old < size_new:
                i2 += 1
                size_old *= old[i2][0]
            else:
                j2 += 1
                size_new *= new_nz[j2]
        for k in range(i, i2):  # the old axes must be contiguous with each other
            if old[k][1] != old[k + 1][1] * old[k + 1][0]:
                return None
        stride = old[i2][1]
        chunk = []
        for k in range(j2, j - 1, -1):
            chunk.append(stride)
            stride *= new_nz[k]
        result_nz.extend(reversed(chunk))
        i, j = i2 + 1, j2 + 1
    it = iter(result_nz)
    for s in new:
        out.append(next(it) if s != 1 else 0)
    return out
