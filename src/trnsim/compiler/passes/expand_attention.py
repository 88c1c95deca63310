"""neuronx-cc ``--model-type generic``: attention as the separate operators PyTorch spells.

With ``--model-type transformer`` (torch-neuronx's default since Neuron 2.14) trnsim fuses
attention into one kernel (`fuse_attention`). neuronx-cc's own default, ``generic``, makes no
transformer-specific fusion: here every ``scaled_dot_product_attention`` becomes the eager
operators it is defined by (PyTorch's reference: ``softmax(q @ k^T * scale + bias) @ v``, a
causal mask as the lower triangle), so the scores are a tensor written by one kernel and read
by the next, and the matmuls are auto-cast like any other. Runs before `auto_cast`.

A boolean mask becomes an additive bias in the mask's own shape first, as the reference does
(``attn_bias.masked_fill_(attn_mask.logical_not(), -inf)``, then ``attn_weight += attn_bias``;
transformers before SDPA built the same additive mask once per model): the select runs on the
[b, 1, sq, sk] mask, not on the [b, heads, sq, sk] scores, and the add is the softmax's mask
operand (`fuse_norms`), as a float mask is.
"""

from __future__ import annotations

import numpy as np

from trnsim.compiler.ir import Graph, Node, Rewriter


def expand_attention(graph: Graph) -> Graph:
    rw = Rewriter(graph)
    biases: dict = {}  # a boolean mask's additive bias, made once for every layer
    for node in graph.nodes:
        if node.op != "sdpa":
            rw.keep(node)
            continue
        rw.replace(node, _expand(rw, node, biases))
    return rw.finish()


def _expand(rw: Rewriter, node: Node, biases: dict) -> Node:
    q, k, v = (rw.get(i) for i in node.inputs[:3])
    mask = rw.get(node.inputs[3]) if len(node.inputs) == 4 else None
    src = node.source
    dims = (*range(k.rank - 2), k.rank - 1, k.rank - 2)
    scores = rw.emit("matmul", [q, rw.emit("permute", [k], {"dims": dims}, source=src)],
                     source=src)
    scale = rw.emit("full", [], {"shape": (), "value": float(node.attrs["scale"]),
                                 "dtype": scores.dtype.name}, source=src)
    scores = rw.emit("mul", [scores, scale], source=src)
    bias = _bias(rw, node, mask, scores.dtype.name, biases)
    if bias is not None:
        scores = rw.emit("add", [scores, bias], source=src)
    probs = rw.emit("softmax", [scores], {"axis": scores.rank - 1}, source=src)
    out = rw.emit("matmul", [probs, v], source=src)
    if out.dtype != node.dtype:
        out = rw.emit("cast", [out], {"dtype": node.dtype.name}, source=src)
    return out


def _bias(rw: Rewriter, node: Node, mask: Node | None, dtype: str, biases: dict) -> Node | None:
    """The additive bias of `node`'s mask (a float mask as it is; a boolean or causal one as
    0 / -inf, made once per mask for every layer that reads it), or None without a mask."""
    src = node.source
    if node.attrs["causal"]:
        key = ("causal", node.inputs[0].shape[-2], node.inputs[1].shape[-2])
    elif mask is None or not mask.dtype.is_bool:
        return mask
    else:
        key = id(mask)
    if key not in biases:
        if node.attrs["causal"]:
            mask = rw.new.add_constant(np.tril(np.ones(key[1:], dtype=bool)), name="causal_mask",
                                       source=src)
        zero, low = (rw.emit("full", [], {"shape": (), "value": value, "dtype": dtype}, source=src)
                     for value in (0.0, float("-inf")))
        # a broadcast mask (a padding mask [b, 1, 1, sk] widened to [b, 1, sq, sk]) selects on
        # its own values and the bias is widened the same way, a view
        values = mask.inputs[0] if mask.op == "expand" else mask
        bias = rw.emit("where", [values, zero, low], source=src)
        if values is not mask:
            bias = rw.emit("expand", [bias], {"shape": mask.shape}, source=src)
        biases[key] = bias
    return biases[key]
