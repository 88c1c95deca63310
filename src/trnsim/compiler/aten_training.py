"""Translations the backward pass needs beyond inference: scatters, activation derivatives.

After PyTorch's decompositions, a training step's backward adds few operators to what the
forward uses: `scatter` (the one-hot gradient of `nll_loss`, of `gather`) and `index_put` with
`accumulate=True` (the gradient of an embedding, rows summed by index). `scatter` along an axis
becomes dense element-wise work: a one-hot mask from a compare of the index with an iota, then
a select (one fused pass when each position has one index, as `nll_loss`'s backward). An
embedding's gradient is rows added into a zeroed table by indirect DMA with read-add-write
(``dma_copy(dst_rmw_op=add)``: the `scatter` IR op with `accumulate`), its work proportional to
the tokens, not to tokens x vocabulary as a one-hot matmul's would be.

The derivatives of GELU (erf form) and SiLU are ScalarE activation functions (NKI's
`gelu_dx`, `silu_dx`): their backward is one activation pass and one multiply by the
gradient, not PyTorch's decomposition into a dozen element-wise steps.
"""

from __future__ import annotations

import math
from typing import Any

from trnsim.compiler.aten import TRANSLATIONS, Translator, aten
from trnsim.compiler.aten_flash import FLASH
from trnsim.compiler.ir import Node
from trnsim.compiler.ops import norm_axis
from trnsim.errors import UnsupportedError


def _one_hot(cx: Translator, index: Node, axis: int, size: int) -> Node:
    """mask[..., k, ..., j] = index[..., k, ...] == j along a new last axis of length `size`."""
    iota = cx.emit("arange", start=0, end=size, step=1, dtype="int32")
    idx = index if index.dtype.name == "int32" else cx.emit("cast", [index], dtype="int32")
    return cx.emit("eq", [cx.emit("reshape", [idx], shape=(*idx.shape, 1)), iota])


@aten("scatter.value", "scatter.src")
def _scatter(cx: Translator, x: Node, dim: int, index: Node, value: Any) -> Node:
    """out = x with out[..., index[..., k, ...], ...] = value (k over the index's extent on
    `dim`): for each position j on `dim`, the last k whose index is j wins."""
    axis = norm_axis(dim, x.rank)
    if index.shape[:axis] != x.shape[:axis] or index.shape[axis + 1:] != x.shape[axis + 1:]:
        raise UnsupportedError("scatter whose index differs from the input off the scattered "
                               "axis")
    n = x.shape[axis]
    if index.shape[axis] == 1:  # nll_loss's backward: one class per row
        return _scatter_one(cx, x, axis, index, value)
    hot = _one_hot(cx, index, axis, n)  # [..., k, ..., n]
    last = hot.rank - 1
    order = list(range(last))
    order[axis] = last
    order = (*order, axis)
    hot = cx.emit("permute", [hot], dims=order)  # [..., n(at axis), ..., k]
    hit = cx.emit("any", [hot], axes=(last,), keepdim=False)
    if isinstance(value, Node):
        src = cx.emit("permute", [cx.emit("reshape", [value], shape=(*value.shape, 1))],
                      dims=order) if value.shape == index.shape else None
        if src is None:
            raise UnsupportedError("scatter.src with a source shaped unlike its index")
        picked = cx.emit("sum", [cx.emit("where", [hot, src, cx.tensor(0.0)])], axes=(last,),
                         keepdim=False)
        value = picked
    out = cx.emit("where", [hit, cx.tensor(value), x])
    want = cx.out_dtype()
    return out if out.dtype == want else cx.emit("cast", [out], dtype=want.name)


def _scatter_one(cx: Translator, x: Node, axis: int, index: Node, value: Any) -> Node:
    """scatter with one index per position off `axis` (index extent 1 on it): the one-hot is
    a compare of the index with an iota along `axis`, broadcast, and the select writes `value`
    (a source shaped like the index broadcasts along `axis` too). One element-wise pass over
    x, as XLA fuses a compare-select, with no [..., k, ..., n] mask to reduce over k."""
    n = x.shape[axis]
    iota = cx.emit("arange", start=0, end=n, step=1, dtype="int32")
    if axis != x.rank - 1:
        iota = cx.emit("reshape", [iota], shape=tuple(n if d == axis else 1
                                                       for d in range(x.rank)))
    idx = index if index.dtype.name == "int32" else cx.emit("cast", [index], dtype="int32")
    hot = cx.emit("eq", [idx, iota])
    out = cx.emit("where", [hot, cx.tensor(value), x])
    want = cx.out_dtype()
    return out if out.dtype == want else cx.emit("cast", [out], dtype=want.name)


def _index_put_accumulate(cx: Translator, x: Node, indices: Any, values: Any,
                          accumulate: bool = False) -> Node:
    picked = [i for i in indices if i is not None]
    if not accumulate:
        return TRANSLATIONS["aten.index_put.default"](cx, x, indices, values, accumulate)
    if len(indices) != 1 or len(picked) != 1 or picked[0].dtype.name == "bool_":
        raise UnsupportedError("index_put(accumulate=True) other than on the first axis with "
                               "one integer index")
    index = picked[0]
    count = index.numel
    flat_index = cx.emit("reshape", [index], shape=(count,))
    values = cx.tensor(values)
    full = (*index.shape, *x.shape[1:])
    flat_values = cx.emit("reshape", [cx.emit("expand", [values], shape=full)
                                      if values.shape != full else values],
                          shape=(count, *x.shape[1:]))
    if flat_values.dtype != x.dtype:
        flat_values = cx.emit("cast", [flat_values], dtype=x.dtype.name)
    return cx.emit("scatter", [x, flat_values, flat_index], accumulate=True)


_plain_index_put = TRANSLATIONS["aten.index_put.default"]


def _index_put(cx: Translator, x: Node, indices: Any, values: Any, accumulate: bool = False
               ) -> Node:
    if accumulate:
        return _index_put_accumulate(cx, x, indices, values, True)
    return _plain_index_put(cx, x, indices, values, accumulate)


for _name in ("aten.index_put.default", "aten.index_put_.default",
              "aten._unsafe_index_put.default"):
    TRANSLATIONS[_name] = _index_put


@aten("native_dropout.default")
def _native_dropout(cx: Translator, x: Node, p: float, train: bool | None) -> tuple[Node, Node]:
    """Training dropout. The device draws the mask with its own random generator (one VectorE
    pass, the `Dropout` instruction); the IR has no random op, so a compare of the same size
    stands in for the draw: the step's timing is right, while the values (the mask) come from
    the caller (the lazy device computes them with PyTorch's seeded generator)."""
    if not train or p == 0:
        return x, cx.emit("full", shape=x.shape, value=True, dtype="bool_")
    keep = cx.emit("ne", [x, cx.tensor(float("nan"))])
    scaled = cx.emit("mul", [cx.emit("where", [keep, x, cx.tensor(0.0)]),
                             cx.tensor(1.0 / (1.0 - p))])
    if scaled.dtype != x.dtype:
        scaled = cx.emit("cast", [scaled], dtype=x.dtype.name)
    return scaled, keep


@aten("normal_.default", "uniform_.default")
def _random_fill(cx: Translator, x: Node, *args: Any, **kwargs: Any) -> Node:
    """Initialisation on the device (`nn.init.normal_` of a materialised weight): the device
    fills the tensor from its own generator in one pass; the IR has no random op, so a fill of
    the same size stands in (the values come from the caller, as for dropout)."""
    return cx.emit("full", shape=x.shape, value=0.0, dtype=x.dtype.name)


def _matching(cx: Translator, out: Node) -> Node:
    want = cx.out_dtype()
    return out if out.dtype == want else cx.emit("cast", [out], dtype=want.name)


@aten("gelu_backward.default")
def _gelu_backward(cx: Translator, grad: Node, x: Node, approximate: str = "none") -> Node:
    """grad * GELU'(x): ScalarE's `gelu_dx` for the erf form; the tanh form's derivative as
    PyTorch writes it (NKI has no tanh-GELU derivative function)."""
    if approximate != "tanh":
        return _matching(cx, cx.emit("mul", [grad, cx.emit("gelu_dx", [x])]))
    beta, kappa = math.sqrt(2.0) * (2.0 / math.sqrt(math.pi)) * 0.5, 0.044715
    square = cx.emit("mul", [x, x])
    inner = cx.emit("mul", [cx.tensor(beta), cx.emit("add", [
        x, cx.emit("mul", [cx.tensor(kappa), cx.emit("mul", [square, x])])])])
    tanh = cx.emit("tanh", [inner])
    left = cx.emit("mul", [cx.tensor(0.5), x])
    right = cx.emit("add", [cx.tensor(1.0), tanh])
    slope = cx.emit("mul", [cx.tensor(beta), cx.emit("add", [
        cx.tensor(1.0), cx.emit("mul", [cx.tensor(3.0 * kappa), square])])])
    right_dx = cx.emit("mul", [cx.emit("mul", [left, cx.emit("sub", [
        cx.tensor(1.0), cx.emit("mul", [tanh, tanh])])]), slope])
    dx = cx.emit("add", [cx.emit("mul", [cx.tensor(0.5), right]), right_dx])
    return _matching(cx, cx.emit("mul", [grad, dx]))


@aten("silu_backward.default")
def _silu_backward(cx: Translator, grad: Node, x: Node) -> Node:
    """grad * SiLU'(x), SiLU's derivative one ScalarE activation (`silu_dx`)."""
    return _matching(cx, cx.emit("mul", [grad, cx.emit("silu_dx", [x])]))


_inference_layer_norm = TRANSLATIONS["aten.native_layer_norm.default"]


def _layer_norm_with_statistics(cx: Translator, x: Node, shape: Any, w: Node | None,
                                b: Node | None, eps: float) -> tuple[Node, Node, Node]:
    """The layer norm kernel, plus the mean and 1/std the backward reads (saved by autograd).
    Inference graphs never read them and dead-code elimination drops them."""
    out = _inference_layer_norm(cx, x, shape, w, b, eps)[0]
    axes = tuple(range(x.rank - len(shape), x.rank))
    mean = cx.emit("mean", [x], axes=axes, keepdim=True)
    centred = cx.emit("sub", [x, mean])
    var = cx.emit("mean", [cx.emit("mul", [centred, centred])], axes=axes, keepdim=True)
    rstd = cx.emit("rsqrt", [cx.emit("add", [var, cx.tensor(float(eps))])])
    return out, mean, rstd


def _lerp(cx: Translator, start: Node, end: Node, weight: Any) -> Node:
    """start + weight * (end - start): Adam's moment update (`exp_avg.lerp_(grad, 1 - beta1)`).
    PyTorch's decomposition picks one of two formulas by `|weight| < 0.5`; with a Python weight
    that choice is a constant, and one formula is what the device computes."""
    out = cx.emit("add", [start, cx.emit("mul", [cx.tensor(weight), cx.emit("sub", [end, start])])])
    want = cx.out_dtype()
    return out if out.dtype == want else cx.emit("cast", [out], dtype=want.name)


for _name in ("aten.lerp.Scalar", "aten.lerp.Tensor", "aten.lerp_.Scalar", "aten.lerp_.Tensor"):
    TRANSLATIONS[_name] = _lerp


@aten("nll_loss_forward.default")
def _nll_loss(cx: Translator, logp: Node, target: Node, weight: Node | None, reduction: int,
              ignore_index: int) -> tuple[Node, Node]:
    """-logp[i, target[i]] summed (reduction 2) or averaged (1) over the rows not ignored, the
    row's class picked with a one-hot compare (dense VectorE work, like the backward's)."""
    if weight is not None or logp.rank != 2:
        raise UnsupportedError("nll_loss with class weights or over more than [N, C]")
    classes = logp.shape[1]
    hot = _one_hot(cx, target, 1, classes)  # [N, C]
    picked = cx.emit("sum", [cx.emit("where", [hot, logp, cx.tensor(0.0)])], axes=(1,),
                     keepdim=False)
    idx = target if target.dtype.name == "int32" else cx.emit("cast", [target], dtype="int32")
    kept = cx.emit("cast", [cx.emit("ne", [idx, cx.tensor(int(ignore_index))])],
                   dtype=logp.dtype.name)
    losses = cx.emit("neg", [cx.emit("mul", [picked, kept])])
    if reduction == 0:
        return losses, cx.emit("full", shape=(), value=0.0, dtype=logp.dtype.name)
    total = cx.emit("sum", [losses], axes=(0,), keepdim=False)
    count = cx.emit("sum", [kept], axes=(0,), keepdim=False)
    if reduction == 1:
        total = cx.emit("div", [total, count], true_div=True)
    return total, count


def _embedding_clamped(cx: Translator, weight: Node, index: Node, *args: Any) -> Node:
    """An embedding whose indices are clamped to the table first, as XLA's gather clamps
    them. In a training graph the indices are often a broadcast view of a buffer (BERT's
    `token_type_ids[:, :seq].expand(batch, seq)`); the clamp writes them out densely, which
    the gather's indirect DMA needs."""
    rows = weight.shape[0]
    dense = cx.emit("minimum", [cx.emit("maximum", [index, cx.tensor(0)]), cx.tensor(rows - 1)])
    return cx.emit("embedding", [weight, dense])


# Translations that differ in a training graph (which reads what inference drops); the lazy
# device's adapter looks here before `TRANSLATIONS`.
TRAINING = {"aten.native_layer_norm.default": _layer_norm_with_statistics,
            "aten.embedding.default": _embedding_clamped, **FLASH}
