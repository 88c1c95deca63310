"""Translations of ATen's composite operators, as torch.export's graph holds them undecomposed.

Decomposing to core ATen re-traces the whole model (about 3 s of BERT-large's 5 s capture) only
to turn ``linear`` into ``permute + addmm + view``. When every operator of the exported graph has
a translation here or in `trnsim.compiler.aten`, capture translates that graph directly; the
translations below emit exactly what the decomposition would have produced, so the passes see
the same IR either way (tests compare both paths). Anything else (an unknown operator, a
training-mode dropout or batch norm, an in-place op whose input is read again) makes capture
fall back to the decomposition.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trnsim.compiler.aten import (
    TRANSLATIONS,
    Translator,
    _binary,
    _convolution,
    _to_copy,
    aten,
    two_norm,
)
from trnsim.compiler.aten import _conv2d as _conv2d_node
from trnsim.compiler.ir import Node
from trnsim.compiler.ops import norm_axis
from trnsim.errors import UnsupportedError


@aten("linear.default")
def _linear(cx: Translator, x: Node, w: Node, b: Node | None = None) -> Node:
    """view(x, [-1, K]) @ w^T (+ b) -> view back: the shape core ATen's decomposition gives."""
    k = x.shape[-1]
    flat = x if x.rank == 2 else cx.emit("reshape", [x], shape=(x.numel // max(k, 1), k))
    wt = cx.emit("permute", [w], dims=(1, 0))
    out = cx.emit("matmul", [flat, wt])
    if b is not None:
        out = cx.emit("add", [out, b])
    return out if out.shape == cx.out_shape() else cx.emit("reshape", [out], shape=cx.out_shape())


@aten("matmul.default")
def _matmul(cx: Translator, a: Node, b: Node) -> Node:
    if a.rank == 1:
        a = cx.emit("reshape", [a], shape=(1, a.shape[0]))
    if b.rank == 1:
        b = cx.emit("reshape", [b], shape=(b.shape[0], 1))
    out = cx.emit("matmul", [a, b])
    return out if out.shape == cx.out_shape() else cx.emit("reshape", [out], shape=cx.out_shape())


@aten("layer_norm.default")
def _layer_norm(cx: Translator, x: Node, shape: Sequence[int], w: Node | None = None,
                b: Node | None = None, eps: float = 1e-5, cudnn_enable: bool = True) -> Node:
    inputs = [x] + [p for p in (w, b) if p is not None]
    return cx.emit("layer_norm", inputs, normalized=len(shape), eps=float(eps),
                   weight=w is not None, bias=b is not None)


@aten("dropout.default")
def _dropout(cx: Translator, x: Node, p: float = 0.5, train: bool = False) -> Node:
    if train and p > 0:
        raise UnsupportedError("dropout in training mode")
    return x


@aten("conv2d.default")
def _conv2d(cx: Translator, x: Node, w: Node, b: Node | None = None, stride: Any = 1,
            padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Node:
    if isinstance(padding, str):
        raise UnsupportedError(f"conv2d padding={padding!r} (decomposed instead)")
    pair = lambda v: (int(v), int(v)) if isinstance(v, int) else (int(v[0]), int(v[-1]))  # noqa: E731
    return _conv2d_node(cx, x, w, b, pair(stride), pair(padding), pair(dilation), groups)


@aten("conv1d.default")
def _conv1d(cx: Translator, x: Node, w: Node, b: Node | None = None, stride: Any = 1,
            padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Node:
    if isinstance(padding, str):
        raise UnsupportedError(f"conv1d padding={padding!r} (decomposed instead)")
    one = lambda v: (int(v),) if isinstance(v, int) else (int(v[0]),)  # noqa: E731
    return _convolution(cx, x, w, b, one(stride), one(padding), one(dilation), False, (0,),
                        groups)


@aten("_weight_norm.default")
def _weight_norm(cx: Translator, v: Node, g: Node, dim: int = 0) -> Node:
    """w = g * v / ||v||, the norm over every axis but `dim` (weight norm's reparametrisation;
    computed once at compile time when v and g are weights)."""
    axes = tuple(a for a in range(v.rank) if a != norm_axis(dim, v.rank))
    return cx.emit("mul", [v, cx.emit("div", [g, two_norm(cx, v, axes, True)], true_div=True)])


@aten("batch_norm.default")
def _batch_norm(cx: Translator, x: Node, w: Node | None, b: Node | None, mean: Node | None,
                var: Node | None, training: bool, momentum: float, eps: float,
                cudnn_enabled: bool = True) -> Node:
    if training or mean is None or var is None:
        raise UnsupportedError("batch norm with batch statistics (training mode)")
    import numpy as np

    c = x.shape[1]
    w = w if w is not None else cx.graph.add_constant(np.ones(c, np.float32), name="bn_ones")
    b = b if b is not None else cx.graph.add_constant(np.zeros(c, np.float32), name="bn_zeros")
    return cx.emit("batch_norm", [x, w, b, mean, var], eps=float(eps))


@aten("softmax.int", "log_softmax.int")
def _softmax(cx: Translator, x: Node, dim: int, dtype: Any = None) -> Node:
    if dtype is not None and x.dtype != cx.out_dtype():
        x = cx.emit("cast", [x], dtype=cx.out_dtype().name)
    op = "log_softmax" if cx.current_target.startswith("aten.log_") else "softmax"
    return cx.emit(op, [x], axis=norm_axis(dim, x.rank))


@aten("to.dtype", "to.dtype_layout", "to.device", "type_as.default")
def _to(cx: Translator, x: Node, *args: Any, **kwargs: Any) -> Node:
    return _to_copy(cx, x)


@aten("diff.default")
def _diff(cx: Translator, x: Node, n: int = 1, dim: int = -1, prepend: Node | None = None,
          append: Node | None = None) -> Node:
    """x[1:] - x[:-1] along dim, n times, after attaching prepend/append (GPT-2's position ids)."""
    axis = norm_axis(dim, x.rank)
    parts = [p for p in (prepend, x, append) if p is not None]
    if len(parts) > 1:
        x = cx.emit("concat", parts, axis=axis)
    for _ in range(n):
        size = x.shape[axis]
        hi = cx.emit("slice", [x], axis=axis, start=1, end=size, step=1)
        lo = cx.emit("slice", [x], axis=axis, start=0, end=size - 1, step=1)
        x = cx.emit("sub" if not x.dtype.is_bool else "logical_xor", [hi, lo])
    return x


TRANSLATIONS["aten.__and__.Tensor"] = _binary("bitwise_and")
TRANSLATIONS["aten.__or__.Tensor"] = _binary("bitwise_or")

# In-place versions are translated as their functional op; capture allows them only where the
# mutated operand is read by nothing else (so no later reader could see the mutation).
INPLACE = {"aten.add_.Tensor": "aten.add.Tensor", "aten.mul_.Tensor": "aten.mul.Tensor",
           "aten.relu_.default": "aten.relu.default", "aten.sub_.Tensor": "aten.sub.Tensor",
           "aten.div_.Tensor": "aten.div.Tensor",
           "aten.index_put_.default": "aten.index_put.default"}
for _inplace, _functional in INPLACE.items():
    TRANSLATIONS[_inplace] = TRANSLATIONS[_functional]


# --- Hugging Face's custom operators ---------------------------------------------------------
def _grouped_mm(cx: Translator, x: Node, w: Node, offs: Node) -> Node:
    """transformers::grouped_mm_fallback: rows of x (sorted by expert) times their expert's
    weights, rows from offs[e-1] to offs[e] taking w[e] (rows past offs[-1] give 0). The groups'
    sizes depend on the routing, so the static form runs every expert over every row with the
    rows of other experts masked to 0 and sums over experts: E times the matmul work, each
    expert's weights read once (batched_mm instead gathers each row's expert weights)."""
    s, k = x.shape
    e = w.shape[0]
    rows = cx.emit("reshape", [cx.emit("arange", start=0, end=s, step=1, dtype="int32")],
                   shape=(s, 1))
    ends = cx.emit("reshape", [cx.emit("cast", [offs], dtype="int32")], shape=(1, e))
    starts = cx.emit("pad", [cx.emit("slice", [ends], axis=1, start=0, end=e - 1, step=1)],
                     pads=((0, 0), (1, 0)), value=0) if e > 1 else \
        cx.emit("full", shape=(1, 1), value=0, dtype="int32")
    mine = cx.emit("logical_and", [cx.emit("ge", [rows, starts]), cx.emit("lt", [rows, ends])])
    mask = cx.emit("reshape", [cx.emit("permute", [cx.emit("cast", [mine], dtype=x.dtype.name)],
                                       dims=(1, 0))], shape=(e, s, 1))
    masked = cx.emit("mul", [cx.emit("reshape", [x], shape=(1, s, k)), mask])
    out = cx.emit("sum", [cx.emit("matmul", [masked, w])], axes=(0,), keepdim=False)
    return out if out.dtype == cx.out_dtype() else cx.emit("cast", [out],
                                                           dtype=cx.out_dtype().name)


TRANSLATIONS["transformers.grouped_mm_fallback.default"] = _grouped_mm
