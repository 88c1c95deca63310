"""neuronx-cc ``--model-type generic``: attention as the separate operators PyTorch spells.

With ``--model-type transformer`` (torch-neuronx's default since Neuron 2.14) trnsim fuses
attention into one kernel (`fuse_attention`). neuronx-cc's own default, ``generic``, makes no
transformer-specific fusion: here every ``scaled_dot_product_attention`` becomes the eager
operators it is defined by (PyTorch's reference: ``softmax(q @ k^T * scale + mask) @ v``, a
causal mask as the lower triangle), so the scores are a tensor written by one kernel and read
by the next, and the matmuls are auto-cast like any other. Runs before `auto_cast`.
"""

from __future__ import annotations

import numpy as np

from trnsim.compiler.ir import Graph, Node, Rewriter


def expand_attention(graph: Graph) -> Graph:
    rw = Rewriter(graph)
    for node in graph.nodes:
        if node.op != "sdpa":
            rw.keep(node)
            continue
        rw.replace(node, _expand(rw, node))
    return rw.finish()


def _expand(rw: Rewriter, node: Node) -> Node:
    q, k, v = (rw.get(i) for i in node.inputs[:3])
    mask = rw.get(node.inputs[3]) if len(node.inputs) == 4 else None
    src = node.source
    dims = (*range(k.rank - 2), k.rank - 1, k.rank - 2)
    scores = rw.emit("matmul", [q, rw.emit("permute", [k], {"dims": dims}, source=src)],
                     source=src)
    scale = rw.emit("full", [], {"shape": (), "value": float(node.attrs["scale"]),
                                 "dtype": scores.dtype.name}, source=src)
    scores = rw.emit("mul", [scores, scale], source=src)
    sq, sk = q.shape[-2], k.shape[-2]
    if node.attrs["causal"]:
        keep = np.tril(np.ones((sq, sk), dtype=bool))
        mask = rw.new.add_constant(keep, name="causal_mask", source=src)
    if mask is not None:
        if mask.dtype.is_bool:
            low = rw.emit("full", [], {"shape": (), "value": float("-inf"),
                                       "dtype": scores.dtype.name}, source=src)
            scores = rw.emit("where", [mask, scores, low], source=src)
        else:
            scores = rw.emit("add", [scores, mask], source=src)
    probs = rw.emit("softmax", [scores], {"axis": scores.rank - 1}, source=src)
    out = rw.emit("matmul", [probs, v], source=src)
    if out.dtype != node.dtype:
        out = rw.emit("cast", [out], {"dtype": node.dtype.name}, source=src)
    return out
