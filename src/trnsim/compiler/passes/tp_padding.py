"""Query heads padded per key/value group, as NxD Inference lays them out when it both pads query
heads to a multiple of the ranks and replicates key/value heads over them.

Llama-3-8B on 24 ranks: 32 query heads do not divide 24 ranks, and 8 key/value heads are fewer
than the ranks, so each KV head is replicated on 3 ranks (``GQA.REPLICATE_TO_TP_DEGREE``) and
the query heads are padded to 48, two a rank. The padding cannot go at the end: a rank's query
heads must be those of the KV head it holds. NxD pads each KV head's group of query heads at the
group's end instead (``maybe_pad_interleaved``: 4 query heads + 2 zero heads per group), so rank r
holds group r // 3's query slots 2 (r % 3) and 2 (r % 3) + 1. The helpers here build that layout
for a weight (zero rows or columns, which change no sum) and for a replicated value read by
index; `tensor_parallel.Split.interleave` names it.
"""

from __future__ import annotations

import numpy as np


def interleaved(data: np.ndarray, axis: int, groups: int, padded: int) -> np.ndarray:
    """`data` with each of `groups` equal parts of `axis` zero-padded at its end, the axis then
    `padded` long. A weight without values (a zero-stride view) stays a zero-stride view."""
    size = data.shape[axis]
    shape = list(data.shape)
    shape[axis] = padded
    if data.size and not any(data.strides):
        return np.broadcast_to(np.zeros((), data.dtype), tuple(shape))
    parts = data.reshape(*data.shape[:axis], groups, size // groups, *data.shape[axis + 1:])
    width = [(0, 0)] * parts.ndim
    width[axis + 1] = (0, padded // groups - size // groups)
    return np.pad(parts, width).reshape(shape)


def interleaved_rows(size: int, groups: int, padded: int) -> np.ndarray:
    """For each position of the padded axis, the row of the unpadded axis it stands for; a
    padding position reads its group's last row (finite; the zero weights after it cancel it)."""
    per, padded_per = size // groups, padded // groups
    group, slot = np.divmod(np.arange(padded), padded_per)
    return (group * per + np.minimum(slot, per - 1)).astype(np.int32)


def projection_of(node):
    """The k.matmul with a constant weight that produces `node` through views, elementwise ops
    and concatenations (rotary embeddings, a KV cache joined with the new keys), or None."""
    seen, frontier = set(), [node]
    while frontier:
        x = frontier.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if x.op == "k.matmul":
            return x if x.inputs[1].op == "constant" else None
        if x.op in ("reshape", "permute", "expand", "slice", "k.elementwise", "k.concat"):
            frontier.extend(i for i in x.inputs if i.op not in ("constant", "input", "scalar"))
    return None
