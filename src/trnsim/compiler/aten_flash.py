"""Translations of the lazy device's flash-attention ops (`trnsim.runtime.xla.flash`).

``trnsim::flash_attention`` becomes one ``k.flash_attention`` node (out and lse packed, see
`trnsim.compiler.kernel_ops.flash`) and two slices; ``trnsim::flash_attention_backward`` one
``k.flash_attention_backward`` node and three slices. The nodes are kernel-level already: no
pass has anything to fuse into them.
"""

from __future__ import annotations

from trnsim.compiler.aten import Translator
from trnsim.compiler.ir import Node


def _slice(cx: Translator, x: Node, axis: int, start: int, end: int) -> Node:
    return cx.emit("slice", [x], axis=axis, start=start, end=end, step=1)


def _attrs(q: Node, scale: float, causal: bool) -> dict:
    return {"scale": float(scale), "causal": bool(causal), "compute_dtype": q.dtype.name,
            "dtype": q.dtype.name}


def flash_attention(cx: Translator, q: Node, k: Node, v: Node, scale: float, causal: bool
                    ) -> tuple[Node, Node]:
    d = q.shape[-1]
    packed = cx.emit("k.flash_attention", [q, k, v], **_attrs(q, scale, causal))
    axis = packed.rank - 1
    return _slice(cx, packed, axis, 0, d), _slice(cx, packed, axis, d, d + 2)


def flash_attention_backward(cx: Translator, grad: Node, q: Node, k: Node, v: Node, out: Node,
                             lse: Node, scale: float, causal: bool) -> tuple[Node, Node, Node]:
    packed = cx.emit("k.flash_attention_backward", [grad, q, k, v, out, lse],
                     **_attrs(q, scale, causal))
    grads = [cx.emit("reshape", [_slice(cx, packed, 0, i, i + 1)], shape=packed.shape[1:])
             for i in range(3)]
    if q.rank < 3:
        return tuple(grads)
    dims = (*range(q.rank - 3), q.rank - 2, q.rank - 3, q.rank - 1)  # rows back inside heads
    return tuple(cx.emit("permute", [g], dims=dims) for g in grads)


FLASH = {"trnsim.flash_attention.default": flash_attention,
         "trnsim.flash_attention_backward.default": flash_attention_backward}
