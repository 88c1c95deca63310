"""Attention fusion: QK^T -> scale -> mask -> softmax -> PV becomes one ``k.attention`` node.

Two spellings reach here. ``sdpa`` (PyTorch's scaled_dot_product_attention, kept whole by
capture; Hugging Face's default "sdpa" implementation) maps directly. The "eager" spelling
(BERT/GPT-2/ViT with ``attn_implementation="eager"``, and hand-written models) is matched
backwards from the second matmul: ``matmul(softmax(matmul(q, k^T) * scale + mask), v)`` with
free reshapes between the steps and every intermediate used only inside the pattern.

The mask is classified once, at compile time, because the kernel differs: none, causal (no
operand: the kernel skips the upper triangle's blocks), a boolean keep-mask, or an additive bias
(e.g. Hugging Face's 0 / -3.4e38 padding mask computed from ``attention_mask``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trnsim.compiler.ir import Graph, Node, Rewriter
from trnsim.compiler.passes.match import (
    is_transpose_last2,
    only_user,
    operand_pairs,
    peel_float_cast,
    scalar_value,
)
from trnsim.errors import UnsupportedError

# An additive mask entry at or below this counts as "masked out" (HF uses finfo.min).
MASKED_BELOW = -1e4


def fuse_attention(graph: Graph) -> Graph:
    users = graph.users()
    outputs = {id(o) for o in graph.outputs}
    rw = Rewriter(graph)
    for node in graph.nodes:
        if node.op == "sdpa":
            rw.replace(node, _from_sdpa(rw, node, graph))
            continue
        match = _match_eager(node, graph, users, outputs) if node.op == "matmul" else None
        if match is None:
            rw.keep(node)
            continue
        rw.replace(node, _emit(rw, graph, node, **match))
    return rw.finish()


def _from_sdpa(rw: Rewriter, node: Node, graph: Graph) -> Node:
    q, k, v = (rw.get(i) for i in node.inputs[:3])
    mask = rw.get(node.inputs[3]) if len(node.inputs) == 4 else None
    kind, mask = classify_mask(mask, rw.new, node.attrs["causal"], node.shape[-2],
                               node.inputs[1].shape[-2])
    return _attention_node(rw, node, q, k, v, mask, kind, node.attrs["scale"])


def _attention_node(rw: Rewriter, node: Node, q: Node, k: Node, v: Node, mask: Node | None,
                    kind: str, scale: float) -> Node:
    (q, cq), (k, ck), (v, cv) = (peel_float_cast(t) for t in (q, k, v))
    compute = cq or ck or cv or _common_float(q, k, v)
    k_transposed = False
    if is_transpose_last2(k):
        k, k_transposed = k.inputs[0], True
    if not k_transposed:
        q, k, v, mask = _ungroup(rw, node, q, k, v, mask)
        q, k, v, mask = _stack_group(rw, node, q, k, v, mask, kind)
    batch = _broadcast(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    attrs: dict[str, Any] = {
        "scale": float(scale), "mask_kind": kind, "k_transposed": k_transposed,
        "batch": batch, "sq": q.shape[-2], "sk": v.shape[-2], "d": q.shape[-1],
        "dv": v.shape[-1], "compute_dtype": compute, "dtype": node.dtype.name}
    inputs = [q, k, v] + ([mask] if mask is not None else [])
    out = rw.emit("k.attention", inputs, attrs, source=node.source, name="attention")
    if out.shape != node.shape:
        out = rw.emit("reshape", [out], {"shape": node.shape}, source=node.source)
    return out


def _ungroup(rw: Rewriter, node: Node, q: Node, k: Node, v: Node, mask: Node | None
             ) -> tuple[Node, Node, Node, Node | None]:
    """Grouped-query attention without copying K and V once per query head.

    Hugging Face's repeat_kv spells K (and V) of `kv` heads shared by `r` query heads as
    reshape(expand(x[*b, kv, 1, s, d] -> [*b, kv, r, s, d]) -> [*b, kv * r, s, d]); merging a
    broadcast axis into the head axis is no strided view, so it would be copied r times through
    HBM (at a 4K-token decode step, most of the time). Instead the attention runs over batch
    (*b, kv, r): K and V stay the broadcast view and Q is reshaped, both free."""
    grouped = [_repeat_kv(t) for t in (k, v)]
    if any(g is None for g in grouped) or grouped[0][1:] != grouped[1][1:]:
        return q, k, v, mask
    (k5, kv, r), (v5, _, _) = grouped
    if q.rank != k.rank or q.shape[-3] != kv * r:
        return q, k, v, mask
    if mask is not None and mask.rank >= 3:
        if mask.shape[-3] != 1:
            return q, k, v, mask  # a per-head mask: keep the copy rather than regroup it
        mask = rw.emit("reshape", [mask], {"shape": (*mask.shape[:-2], 1, *mask.shape[-2:])},
                       source=node.source)
    q5 = rw.emit("reshape", [q], {"shape": (*q.shape[:-3], kv, r, *q.shape[-2:])},
                 source=node.source)
    return q5, k5, v5, mask


def _stack_group(rw: Rewriter, node: Node, q: Node, k: Node, v: Node, mask: Node | None,
                 kind: str) -> tuple[Node, Node, Node, Node | None]:
    """The `r` query heads sharing a K/V head as `r` times the queries of one problem.

    After `_ungroup` the attention runs per (*b, kv, r), each query head alone against its
    shared K/V: at a decode step that is one query row per problem, r problems reading the same
    keys. When no mask tells the stacked queries apart (none, or one over keys only), the
    [*b, kv, r, sq, d] queries are the [*b, kv, r * sq, d] queries of one problem over
    [*b, kv, s, d] K and V (free reshapes), as a grouped-query kernel computes them."""
    if q.rank < 5 or q.rank != k.rank or kind == "causal" \
            or not all(_group_broadcast(t) for t in (k, v)):
        return q, k, v, mask
    if mask is not None and (mask.rank < 3 or mask.shape[-2] != 1 or mask.shape[-3] != 1):
        return q, k, v, mask
    *lead, kv, r, sq, d = q.shape

    def reshaped(x: Node, shape) -> Node:
        return rw.emit("reshape", [x], {"shape": tuple(shape)}, source=node.source)

    q = reshaped(q, (*lead, kv, r * sq, d))
    k, v = (reshaped(t.inputs[0], (*t.shape[:-3], *t.shape[-2:])) for t in (k, v))
    if mask is not None:
        mask = reshaped(mask, (*mask.shape[:-3], *mask.shape[-2:]))
    return q, k, v, mask


def _group_broadcast(t: Node) -> bool:
    """`t` is `_ungroup`'s [*b, kv, r, s, d] view: an expand of axis -3 from size 1 only."""
    if t.op != "expand":
        return False
    source = t.inputs[0]
    return source.rank == t.rank and source.shape[-3] == 1 and all(
        a == b for i, (a, b) in enumerate(zip(source.shape, t.shape, strict=True))
        if i != t.rank - 3)


def _repeat_kv(t: Node) -> tuple[Node, int, int] | None:
    """(the expanded [*b, kv, r, s, d] node, kv, r) if `t` is repeat_kv's reshape, else None."""
    if t.op != "reshape" or t.inputs[0].op != "expand":
        return None
    expanded = t.inputs[0]
    source = expanded.inputs[0]
    if expanded.rank != t.rank + 1 or expanded.rank < 4 or source.rank != expanded.rank \
            or source.shape[-3] != 1:
        return None
    *lead, kv, r, s, d = expanded.shape
    if tuple(t.shape) != (*lead, kv * r, s, d):
        return None
    return expanded, kv, r


def _common_float(*nodes: Node) -> str:
    names = {n.dtype.name for n in nodes}
    return names.pop() if len(names) == 1 else "float32"


def _broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    from trnsim.compiler.ops import broadcast
    return broadcast(*shapes)


def classify_mask(mask: Node | None, graph: Graph, causal: bool, sq: int, sk: int
                  ) -> tuple[str, Node | None]:
    """("none" | "causal" | "bool" | "bias", the operand to keep or None)."""
    if mask is None:
        return ("causal" if causal else "none"), None
    if mask.op not in ("constant", "full"):
        if causal:
            raise UnsupportedError("scaled_dot_product_attention with is_causal and a mask")
        return ("bool" if mask.dtype.is_bool else "bias"), mask
    values = np.asarray(graph.constant(mask).value()) if mask.op == "constant" else \
        np.full(mask.shape, mask.attrs["value"])
    keep = values.astype(bool) if mask.dtype.is_bool else values.astype(np.float32) > MASKED_BELOW
    zero_bias = mask.dtype.is_bool or bool(np.all(values[keep] == 0))
    full = np.broadcast_to(keep, (*keep.shape[:-2], sq, sk)) if keep.ndim >= 2 else \
        np.broadcast_to(keep, (sq, sk))
    tri = np.tril(np.ones((sq, sk), bool))
    if zero_bias and bool(np.all(full)) and not causal:
        return "none", None
    if zero_bias and (bool(np.all(full == tri)) or (causal and bool(np.all(full | ~tri)))):
        return "causal", None
    if causal:
        raise UnsupportedError("scaled_dot_product_attention with is_causal and a mask")
    return ("bool" if mask.dtype.is_bool else "bias"), mask


# --- the eager spelling ---------------------------------------------------------------------------
def _peel(node: Node, ops: tuple[str, ...], seen: list[Node]) -> Node:
    """Walk up through `ops` (free reshapes, auto-cast's casts), recording what was passed."""
    while node.op in ops and (node.op != "cast" or peel_float_cast(node)[1] is not None):
        seen.append(node)
        node = node.inputs[0]
    return node


def _match_eager(pv: Node, graph: Graph, users: dict[Node, list[Node]], outputs: set[int]
                 ) -> dict[str, Any] | None:
    """Match matmul(P, v) with P = softmax(scores) and scores = s(q k^T) (+ mask)."""
    inner: list[Node] = []  # every node between the two matmuls: must be private to the pattern
    p = _peel(pv.inputs[0], ("reshape", "cast"), inner)
    if p.op != "softmax" or p.attrs["axis"] != p.rank - 1:
        return None
    inner.append(p)
    scores, mask = p.inputs[0], None
    if scores.op == "add":
        for s, m in operand_pairs(scores):
            scaled = _scale_of(s, graph)
            if _qk_product(scaled[0] if scaled else s) is not None:
                inner.append(scores)
                scores, mask = s, m
                break
        else:
            return None
    scale = 1.0
    scaled = _scale_of(scores, graph)
    if scaled is not None:
        inner.append(scores)
        scores, scale = scaled
    qk = _peel(scores, ("reshape",), inner)
    if qk.op != "matmul":
        return None
    inner.append(qk)
    if any(only_user(n, users, outputs) is None for n in inner):
        return None
    q, kt = qk.inputs
    sq, sk = p.shape[-2:]
    return {"q": q, "kt": kt, "v": pv.inputs[1], "mask": mask, "scale": scale,
            "batch": p.shape[:-2], "sq": sq, "sk": sk}


def _qk_product(node: Node) -> Node | None:
    node = node.inputs[0] if node.op == "reshape" else node
    return node if node.op == "matmul" else None


def _scale_of(node: Node, graph: Graph) -> tuple[Node, float] | None:
    if node.op not in ("mul", "div"):
        return None
    x, c = node.inputs
    value = scalar_value(c, graph)
    if node.op == "mul" and value is None:
        c, x = node.inputs
        value = scalar_value(c, graph)
    if value is None or isinstance(value, bool) or (node.op == "div" and value == 0):
        return None
    return x, (float(value) if node.op == "mul" else 1.0 / float(value))


def _emit(rw: Rewriter, graph: Graph, pv: Node, q: Node, kt: Node, v: Node, mask: Node | None,
          scale: float, batch: tuple[int, ...], sq: int, sk: int) -> Node:
    """Reshape q, k^T, v to the softmax's batch dims, classify the mask, emit k.attention."""
    def shaped(x: Node, tail: tuple[int, int]) -> Node:
        x = rw.get(x)
        base, cast = peel_float_cast(x)
        want = (*batch, *tail)
        if base.shape == want:
            return x
        if base.op == "reshape" and base.inputs[0].shape == want:
            base = base.inputs[0]
        else:
            base = rw.emit("reshape", [base], {"shape": want}, source=pv.source)
        return base if cast is None else rw.emit("cast", [base], {"dtype": cast}, source=pv.source)

    d, dv = q.shape[-1], v.shape[-1]
    qn, ktn, vn = shaped(q, (sq, d)), shaped(kt, (d, sk)), shaped(v, (sk, dv))
    k = rw.emit("permute", [ktn], {"dims": (*range(len(batch)), len(batch) + 1, len(batch))},
                source=pv.source)
    k = _fold_double_transpose(rw, k)
    m = rw.get(mask) if mask is not None else None
    kind, m = classify_mask(m, rw.new, False, sq, sk)
    out_like = Node(pv.name, pv.op, (), {}, (*batch, sq, dv), pv.dtype)
    out = _attention_node(rw, out_like, qn, k, vn, m, kind, scale)
    if out.shape != pv.shape:
        out = rw.emit("reshape", [out], {"shape": pv.shape}, source=pv.source)
    return out


def _fold_double_transpose(rw: Rewriter, k: Node) -> Node:
    inner = k.inputs[0]
    if is_transpose_last2(inner):
        return inner.inputs[0]
    base, cast = peel_float_cast(inner)
    if cast is not None and is_transpose_last2(base):
        return rw.emit("cast", [base.inputs[0]], {"dtype": cast})
    return k
