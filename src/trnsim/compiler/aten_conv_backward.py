"""`convolution_backward` as TensorE work: matmuls and a transposed convolution, no new kernel.

XLA differentiates a convolution into two more convolutions (the "backward input" one with the
stride turned into input dilation, the "backward filter" one with batch and channels swapped),
and neuronx-cc runs convolutions as matmuls on TensorE. trnsim writes the same work with the
IR's own operators, so each piece runs on a kernel the forward already uses:

- **grad input** = a stride-1 convolution (the `conv2d` kernel) of the output gradient, with
  zeros inserted between its rows and columns when the forward was strided, by the weight
  flipped in space with its input and output channels swapped (per group), padded by
  `dilation * (kernel - 1) - padding`. This is the transposed convolution.
- **grad weight** = one matmul per kernel tap contracting over every output position:
  `grad[O, N*P*Q] @ x_tap[N*P*Q, C]`, where `x_tap` is the strided view of the padded input
  under that tap (positions on partitions, as TensorE contracts). Grouped convolutions batch
  the matmul over groups; depthwise ones (one channel per group) multiply and sum on VectorE.
- **grad bias** = the output gradient summed over batch and positions.
- A patchify convolution (kernel = stride, ViT's patch embedding), which the forward runs as
  one matmul of patch rows (`aten.patch_rows`), differentiates as that matmul does: the patch
  rows times the gradient for the weight, the gradient times the weight scattered back to
  patches (a view) for the input, and its bias gradient sums the gradient's rows: when the
  gradient arrives as a view of those rows (ViT's `flatten(2).transpose(1, 2)` undone), every
  reader reads it in place and none materialises the transposed form.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trnsim.compiler.aten import Translator, aten, patch_rows, patchify
from trnsim.compiler.ir import Node
from trnsim.errors import UnsupportedError


def _two(v: Sequence[int]) -> tuple[int, int]:
    return (int(v[0]), int(v[-1])) if len(v) else (1, 1)


@aten("convolution_backward.default")
def _convolution_backward(cx: Translator, grad: Node, x: Node, w: Node,
                          bias_sizes: Sequence[int] | None, stride: Sequence[int],
                          padding: Sequence[int], dilation: Sequence[int], transposed: bool,
                          output_padding: Sequence[int], groups: int,
                          output_mask: Sequence[bool]) -> tuple[Node | None, ...]:
    """(grad input, grad weight, grad bias); None where `output_mask` does not ask for it."""
    if transposed:
        raise UnsupportedError("the backward of a transposed convolution")
    if x.rank == 3:  # conv1d: as conv2d over a height of 1, as the forward runs it
        return _conv1d_backward(cx, grad, x, w, bias_sizes, stride, padding, dilation, groups,
                                output_mask)
    if x.rank != 4:
        raise UnsupportedError(f"the backward of a {x.rank - 2}-D convolution (1-D and 2-D "
                               "are supported)")
    stride, padding, dilation = _two(stride), _two(padding), _two(dilation)
    want_x, want_w, want_b = (bool(m) for m in output_mask)
    gx = gw = gb = None
    if patchify(w.shape, stride, padding, dilation, groups, x.shape):
        g_rows = cx.emit("reshape", [cx.emit("permute", [grad], dims=(0, 2, 3, 1))],
                         shape=(grad.shape[0] * grad.shape[2] * grad.shape[3], grad.shape[1]))
        gx, gw = _patch_backward(cx, g_rows, x, w, want_x, want_w)
        if want_b:  # summed from the rows: every reader of the gradient reads it as rows
            gb = cx.emit("sum", [g_rows], axes=(0,), keepdim=False)
    else:
        if want_x:
            gx = _input_grad(cx, grad, x, w, stride, padding, dilation, int(groups))
        if want_w:
            gw = _weight_grad(cx, grad, x, w, stride, padding, dilation, int(groups))
        if want_b:
            gb = cx.emit("sum", [grad], axes=(0, 2, 3), keepdim=False)
    return _cast(cx, gx, x), _cast(cx, gw, w), _cast(cx, gb, grad)


def _cast(cx: Translator, value: Node | None, like: Node) -> Node | None:
    """PyTorch's gradient has its tensor's dtype (grad input: the input's, and so on)."""
    if value is None or value.dtype == like.dtype:
        return value
    return cx.emit("cast", [value], dtype=like.dtype.name)


def _conv1d_backward(cx: Translator, grad: Node, x: Node, w: Node, bias_sizes: Any,
                     stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int],
                     groups: int, output_mask: Sequence[bool]) -> tuple[Node | None, ...]:
    four = lambda t: cx.emit("reshape", [t], shape=(t.shape[0], t.shape[1], 1, t.shape[2]))  # noqa: E731
    gx, gw, gb = _convolution_backward(
        cx, four(grad), four(x), four(w), bias_sizes, (1, stride[0]), (0, padding[0]),
        (1, dilation[0]), False, (0, 0), groups, output_mask)
    back = lambda t, like: None if t is None else cx.emit("reshape", [t], shape=like.shape)  # noqa: E731
    return back(gx, x), back(gw, w), gb


def _patch_backward(cx: Translator, g_rows: Node, x: Node, w: Node, want_x: bool,
                    want_w: bool) -> tuple[Node | None, Node | None]:
    """`g_rows` [N * patches, O]: the output gradient as the forward's matmul wrote it."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    ph, pw = h // kh, wd // kw
    gx = gw = None
    if want_w:  # [O, N*patches] @ [N*patches, C*kh*kw]
        gw = cx.emit("matmul", [cx.emit("permute", [g_rows], dims=(1, 0)),
                                patch_rows(cx, x, kh, kw)])
        gw = cx.emit("reshape", [gw], shape=w.shape)
    if want_x:  # [N*patches, O] @ [O, C*kh*kw], each row back to its patch
        rows = cx.emit("matmul", [g_rows, cx.emit("reshape", [w], shape=(o, c * kh * kw))])
        rows = cx.emit("reshape", [rows], shape=(n, ph, pw, c, kh, kw))
        gx = cx.emit("reshape", [cx.emit("permute", [rows], dims=(0, 3, 1, 4, 2, 5))],
                     shape=x.shape)
    return gx, gw


def _input_grad(cx: Translator, grad: Node, x: Node, w: Node, stride: tuple[int, int],
                padding: tuple[int, int], dilation: tuple[int, int], groups: int) -> Node:
    """The transposed convolution: see the module docstring."""
    o, cg, kh, kw = w.shape
    span = [dilation[i] * (w.shape[2 + i] - 1) for i in range(2)]
    # input rows/columns past the last window (the forward's floor division dropped them)
    rest = [(x.shape[2 + i] + 2 * padding[i] - span[i] - 1) % stride[i] for i in range(2)]
    spread = _insert_zeros(cx, grad, stride, rest)
    edge = [span[i] - padding[i] for i in range(2)]  # the transposed convolution's padding
    for axis in (0, 1):
        if edge[axis] < 0:  # more forward padding than kernel span: crop instead
            size = spread.shape[2 + axis]
            spread = cx.emit("slice", [spread], axis=2 + axis, start=-edge[axis],
                             end=size + edge[axis], step=1)
    og = o // groups
    flipped = _flip(cx, w)  # [O, C/g, kh, kw] -> per group [C/g, O/g, kh, kw]
    flipped = cx.emit("reshape", [flipped], shape=(groups, og, cg, kh, kw))
    flipped = cx.emit("permute", [flipped], dims=(0, 2, 1, 3, 4))
    flipped = cx.emit("reshape", [flipped], shape=(groups * cg, og, kh, kw))
    return cx.emit("conv2d", [spread, flipped], stride=(1, 1),
                   padding=tuple(max(e, 0) for e in edge), dilation=dilation, groups=groups)


def _insert_zeros(cx: Translator, grad: Node, stride: tuple[int, int], rest: Sequence[int]
                  ) -> Node:
    """grad [N, O, P, Q] with stride - 1 zeros after each row and column (none after the last),
    then `rest` more zero rows and columns: the forward's positions on a stride-1 grid."""
    if stride == (1, 1) and not any(rest):
        return grad
    n, o, p, q = grad.shape
    sh, sw = stride
    grid = cx.emit("reshape", [grad], shape=(n, o, p, 1, q, 1))
    grid = cx.emit("pad", [grid], pads=((0, 0), (0, 0), (0, 0), (0, sh - 1), (0, 0), (0, sw - 1)),
                   value=0.0)
    grid = cx.emit("reshape", [grid], shape=(n, o, p * sh, q * sw))
    rows, cols = (p - 1) * sh + 1 + rest[0], (q - 1) * sw + 1 + rest[1]  # rest < stride
    grid = cx.emit("slice", [grid], axis=2, start=0, end=rows, step=1)
    return cx.emit("slice", [grid], axis=3, start=0, end=cols, step=1)


def _flip(cx: Translator, w: Node) -> Node:
    """w reversed along both kernel axes (a concat of single-row slices: the weight is small)."""
    for axis in (2, 3):
        size = w.shape[axis]
        if size > 1:
            parts = [cx.emit("slice", [w], axis=axis, start=i, end=i + 1, step=1)
                     for i in reversed(range(size))]
            w = cx.emit("concat", parts, axis=axis)
    return w


def _weight_grad(cx: Translator, grad: Node, x: Node, w: Node, stride: tuple[int, int],
                 padding: tuple[int, int], dilation: tuple[int, int], groups: int) -> Node:
    """One matmul per tap over all output positions: see the module docstring."""
    o, cg, kh, kw = w.shape
    n, _, p, q = grad.shape
    og = o // groups
    if any(padding):
        x = cx.emit("pad", [x], pads=((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2),
                    value=0.0)
    depthwise = cg == 1 and og == 1
    g_mat = None
    if not depthwise:  # [groups, O/g, N*P*Q]
        g_mat = cx.emit("reshape", [grad], shape=(n, groups, og, p * q))
        g_mat = cx.emit("reshape", [cx.emit("permute", [g_mat], dims=(1, 2, 0, 3))],
                        shape=(groups, og, n * p * q))
    taps = []
    for a in range(kh):
        for b in range(kw):
            tap = _tap_view(cx, x, a, b, p, q, stride, dilation)  # [N, C, P, Q]
            if depthwise:
                per_channel = cx.emit("sum", [cx.emit("mul", [grad, tap])], axes=(0, 2, 3),
                                      keepdim=False)
                taps.append(cx.emit("reshape", [per_channel], shape=(o, 1, 1)))
                continue
            x_mat = cx.emit("reshape", [tap], shape=(n, groups, cg, p * q))
            x_mat = cx.emit("reshape", [cx.emit("permute", [x_mat], dims=(1, 0, 3, 2))],
                            shape=(groups, n * p * q, cg))
            if groups == 1:
                one = cx.emit("matmul", [cx.emit("reshape", [g_mat], shape=(og, n * p * q)),
                                         cx.emit("reshape", [x_mat], shape=(n * p * q, cg))])
            else:
                one = cx.emit("matmul", [g_mat, x_mat])  # [groups, O/g, C/g]
            taps.append(cx.emit("reshape", [one], shape=(o, cg, 1)))
    out = taps[0] if len(taps) == 1 else cx.emit("concat", taps, axis=2)
    return cx.emit("reshape", [out], shape=w.shape)


def _tap_view(cx: Translator, x: Node, a: int, b: int, p: int, q: int,
              stride: tuple[int, int], dilation: tuple[int, int]) -> Node:
    """The padded input under kernel tap (a, b): x[:, :, a*dh + i*sh, b*dw + j*sw]."""
    for axis, (offset, count) in enumerate(((a * dilation[0], p), (b * dilation[1], q))):
        step = stride[axis]
        x = cx.emit("slice", [x], axis=2 + axis, start=offset, end=offset + (count - 1) * step + 1,
                    step=step)
    return x
