"""ATen (core IR, after decomposition) -> trnsim graph IR: one small translation per overload.

`TRANSLATIONS` is the op coverage table: an ATen overload is supported exactly when it has an
entry here. Each entry receives the FX node's arguments (operands already translated to IR nodes,
Python numbers and lists as they are) and emits IR nodes through the `Translator`. An overload
without an entry becomes an `UnsupportedOp`; capture collects every one before failing.

Why translate instead of keeping ATen's names: the passes and the kernel library then see one
``add`` instead of add.Tensor/add.Scalar/addmm's bias, one ``matmul`` for mm/bmm/addmm, one
``reshape`` for view/unsqueeze/squeeze/flatten/select's drop, so each rule is written once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from trnsim.compiler.ir import Graph, Node
from trnsim.compiler.ops import kind, norm_axis
from trnsim.errors import UnsupportedError
from trnsim.numerics import DType, dtype

Translation = Callable[..., Any]
TRANSLATIONS: dict[str, Translation] = {}

# Ops that produce nothing the graph needs (checks torch.export leaves behind).
IGNORED = frozenset({"aten._assert_tensor_metadata.default", "aten._assert_scalar.default",
                     "aten.sym_constrain_range_for_size.default",
                     "aten._assert_async.msg", "aten.sym_constrain_range.default"})


def ir_dtype(torch_dtype: Any) -> DType:
    """The trnsim dtype a torch dtype computes in: 64-bit types narrow to 32 (no 64-bit datapath)."""
    name = str(torch_dtype).replace("torch.", "")
    if name in ("int64", "uint64"):
        return dtype("int32")
    if name == "float64":
        return dtype("float32")
    if name.startswith("complex"):
        raise UnsupportedError(f"{name} tensors (no complex datapath on a NeuronCore)")
    return dtype(name)


class Translator:
    """Emits IR for one FX node at a time; knows the node's source line and PyTorch's answer."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.source: str | None = None
        self.expected: Any = None  # the FX node's meta["val"] (FakeTensor or tuple)
        self.current_target = ""  # "aten.add.Tensor": the overload being translated

    def emit(self, op: str, inputs: Sequence[Node] = (), **attrs: Any) -> Node:
        node = self.graph.add(op, list(inputs), attrs, source=self.source)
        if node.dtype.name == "int32" and kind(op) == "elementwise" and self._int64_result():
            node.attrs["int64"] = True  # PyTorch's value is int64: int32 must hold it exactly
        return node

    def _int64_result(self) -> bool:
        values = self.expected if isinstance(self.expected, (tuple, list)) else (self.expected,)
        return any(str(getattr(v, "dtype", "")) == "torch.int64" for v in values)

    def tensor(self, value: Any, like: Node | None = None) -> Node:
        """An operand: an IR node as is; a Python number becomes a weak ``scalar`` node."""
        if isinstance(value, Node):
            return value
        if isinstance(value, bool):
            return self.graph.add_scalar(value, "bool_")
        if isinstance(value, int):
            return self.graph.add_scalar(value, "int32")
        if isinstance(value, float):
            return self.graph.add_scalar(value, "float32")
        raise UnsupportedError(f"operand of type {type(value).__name__}")

    def out_dtype(self) -> DType:
        return ir_dtype(self.expected.dtype)

    def out_shape(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self.expected.shape)


def aten(*names: str) -> Callable[[Translation], Translation]:
    def decorate(fn: Translation) -> Translation:
        for name in names:
            TRANSLATIONS[f"aten.{name}"] = fn
        return fn
    return decorate


def supported_ops() -> list[str]:
    """Every ATen overload trnsim translates, as ``aten::name.overload``."""
    return sorted(k.replace("aten.", "aten::", 1) for k in TRANSLATIONS)


# --- identities -------------------------------------------------------------------------------
@aten("clone.default", "alias.default", "detach.default", "lift_fresh_copy.default",
      "contiguous.default")
def _identity(cx: Translator, x: Node, *args: Any, **kwargs: Any) -> Node:
    return x


@aten("_to_copy.default")
def _to_copy(cx: Translator, x: Node, **kwargs: Any) -> Node:
    target = cx.out_dtype()
    return x if target == x.dtype else cx.emit("cast", [x], dtype=target.name)


# --- elementwise ----------------------------------------------------------------------------
for _name in ("abs", "neg", "exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh", "sigmoid",
              "relu", "erf", "sin", "cos", "floor", "ceil", "sign", "logical_not"):
    def _unary(cx: Translator, x: Node, _op: str = _name) -> Node:
        return cx.emit(_op, [x])
    TRANSLATIONS[f"aten.{_name}.default"] = _unary
TRANSLATIONS["aten.round.default"] = lambda cx, x: cx.emit("round", [x])


@aten("bitwise_not.default")
def _bitwise_not(cx: Translator, x: Node) -> Node:
    """~x: logical not of a mask; for integers, all bits flipped (-1 - x, or max - x unsigned)."""
    if x.dtype.is_bool:
        return cx.emit("logical_not", [x])
    if not x.dtype.is_int:
        raise UnsupportedError(f"bitwise_not of {x.dtype.name}")
    top = -1 if x.dtype.min < 0 else x.dtype.max
    return cx.emit("sub", [cx.emit("full", shape=(), value=top, dtype=x.dtype.name), x])


@aten("gelu.default")
def _gelu(cx: Translator, x: Node, approximate: str = "none") -> Node:
    return cx.emit("gelu", [x], approximate=approximate)


@aten("silu.default")
def _silu(cx: Translator, x: Node) -> Node:
    return cx.emit("silu", [x])


@aten("clamp.Tensor")
def _clamp_tensor(cx: Translator, x: Node, min: Any = None, max: Any = None) -> Node:
    """clamp with tensor bounds (T5's fp16 overflow guard): maximum, then minimum."""
    out = x
    if min is not None:
        out = cx.emit("maximum", [out, cx.tensor(min)])
    if max is not None:
        out = cx.emit("minimum", [out, cx.tensor(max)])
    return out if out.dtype == cx.out_dtype() else cx.emit("cast", [out], dtype=cx.out_dtype().name)


@aten("isinf.default")
def _isinf(cx: Translator, x: Node) -> Node:
    if not x.dtype.is_float:
        return cx.emit("full", shape=x.shape, value=False, dtype="bool_")
    return cx.emit("eq", [cx.emit("abs", [x]), cx.tensor(float("inf"))])


@aten("clamp.default")
def _clamp(cx: Translator, x: Node, min: float | None = None, max: float | None = None) -> Node:
    return cx.emit("clamp", [x], min=min, max=max)


@aten("hardtanh.default")
def _hardtanh(cx: Translator, x: Node, min_val: float = -1.0, max_val: float = 1.0) -> Node:
    return cx.emit("clamp", [x], min=min_val, max=max_val)


def _binary(op: str, **fixed: Any) -> Translation:
    def translate(cx: Translator, a: Any, b: Any, alpha: Any = 1) -> Node:
        x, y = cx.tensor(a), cx.tensor(b)
        if alpha != 1:
            y = cx.emit("mul", [y, cx.tensor(alpha)])
        return cx.emit(op, [x, y], **fixed)
    return translate


for _aten_name, _op in (("add", "add"), ("sub", "sub"), ("mul", "mul"),
                        ("maximum", "maximum"), ("minimum", "minimum"),
                        ("remainder", "remainder"), ("fmod", "fmod"), ("eq", "eq"), ("ne", "ne"),
                        ("lt", "lt"),
                        ("le", "le"), ("gt", "gt"), ("ge", "ge"),
                        ("bitwise_and", "bitwise_and"), ("bitwise_or", "bitwise_or"),
                        ("bitwise_xor", "bitwise_xor"), ("logical_and", "logical_and"),
                        ("logical_or", "logical_or"), ("logical_xor", "logical_xor")):
    for _overload in ("Tensor", "Scalar", "default"):
        TRANSLATIONS[f"aten.{_aten_name}.{_overload}"] = _binary(_op)
for _overload in ("Tensor_Tensor", "Tensor_Scalar", "Scalar"):
    TRANSLATIONS[f"aten.pow.{_overload}"] = _binary("pow")
for _direction, _dunder in (("left", "lshift"), ("right", "rshift")):
    for _name in (f"__{_dunder}__.Scalar", f"__{_dunder}__.Tensor",
                  f"bitwise_{_direction}_shift.Tensor", f"bitwise_{_direction}_shift.Tensor_Scalar",
                  f"bitwise_{_direction}_shift.Scalar_Tensor"):
        TRANSLATIONS[f"aten.{_name}"] = _binary(f"{_direction}_shift")


@aten("div.Tensor", "div.Scalar")
def _div(cx: Translator, a: Any, b: Any) -> Node:
    return cx.emit("div", [cx.tensor(a), cx.tensor(b)], true_div=True)


@aten("floor_divide.default", "floor_divide.Scalar")
def _floor_divide(cx: Translator, a: Any, b: Any) -> Node:
    return _div_mode(cx, a, b, rounding_mode="floor")


@aten("div.Tensor_mode", "div.Scalar_mode")
def _div_mode(cx: Translator, a: Any, b: Any, rounding_mode: str | None = None) -> Node:
    x, y = cx.tensor(a), cx.tensor(b)
    out = cx.emit("div", [x, y], true_div=rounding_mode is None)
    if rounding_mode == "trunc" and out.dtype.is_int:
        # integers: the floor quotient, plus one where the exact quotient is negative and not
        # a whole number (remainder non-zero, operands of opposite signs)
        inexact = cx.emit("ne", [cx.emit("remainder", [x, y]), cx.tensor(0)])
        opposite = cx.emit("ne", [cx.emit("lt", [x, cx.tensor(0)]), cx.emit("lt", [y, cx.tensor(0)])])
        out = cx.emit("add", [out, cx.emit("logical_and", [inexact, opposite])])
    elif rounding_mode == "floor":
        out = cx.emit("floor", [out])
    elif rounding_mode == "trunc":
        out = cx.emit("mul", [cx.emit("sign", [out]), cx.emit("floor", [cx.emit("abs", [out])])])
    return out if out.dtype == cx.out_dtype() else cx.emit("cast", [out], dtype=cx.out_dtype().name)


@aten("where.self", "where.ScalarSelf", "where.ScalarOther", "where.Scalar")
def _where(cx: Translator, cond: Node, x: Any, y: Any) -> Node:
    return cx.emit("where", [cond, cx.tensor(x), cx.tensor(y)])


@aten("masked_fill.Scalar", "masked_fill.Tensor")
def _masked_fill(cx: Translator, x: Node, mask: Node, value: Any) -> Node:
    return cx.emit("where", [mask, cx.tensor(value), x])


# --- reductions -------------------------------------------------------------------------------
def _axes(x: Node, dims: Any) -> tuple[int, ...]:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return tuple(range(x.rank))
    if isinstance(dims, int):
        dims = [dims]
    return tuple(sorted({norm_axis(d, x.rank) for d in dims}))


def _reduction(op: str) -> Translation:
    def translate(cx: Translator, x: Node, dims: Any = None, keepdim: bool = False,
                  dtype: Any = None, **kwargs: Any) -> Node:
        if isinstance(dims, bool):  # any.default(x) style calls have no dims
            dims, keepdim = None, dims
        out = cx.emit(op, [x], axes=_axes(x, dims), keepdim=bool(keepdim))
        target = cx.out_dtype()
        return out if out.dtype == target else cx.emit("cast", [out], dtype=target.name)
    return translate


for _op, _overloads in (("sum", ("dim_IntList", "default")), ("mean", ("dim", "default")),
                        ("amax", ("default",)), ("amin", ("default",)),
                        ("prod", ("dim_int", "default")), ("any", ("dim", "dims", "default")),
                        ("all", ("dim", "dims", "default"))):
    for _overload in _overloads:
        TRANSLATIONS[f"aten.{_op}.{_overload}"] = _reduction(_op)


@aten("argmax.default", "argmin.default")
def _argmax(cx: Translator, x: Node, dim: int | None = None, keepdim: bool = False) -> Node:
    op = "argmax" if cx.current_target.startswith("aten.argmax") else "argmin"
    if dim is None:
        x = cx.emit("reshape", [x], shape=(x.numel,))
        dim = 0
    return cx.emit(op, [x], axes=_axes(x, dim), keepdim=bool(keepdim))


@aten("topk.default")
def _topk(cx: Translator, x: Node, k: int, dim: int = -1, largest: bool = True,
          sorted: bool = True) -> tuple[Node, Node]:
    # sorted=False leaves the order to the implementation: trnsim's is sorted either way
    axis = norm_axis(dim, x.rank)
    return tuple(cx.emit("topk", [x], k=int(k), axis=axis, largest=bool(largest), part=part)
                 for part in ("values", "indices"))


@aten("sort.default", "sort.stable")
def _sort(cx: Translator, x: Node, *args: Any, dim: int = -1, descending: bool = False,
          stable: bool | None = None) -> tuple[Node, Node]:
    """A top-k of every element: ties keep their order (stable), whatever `stable` says."""
    if args:  # sort.default(self, dim, descending) positionally
        dim, descending = (*args, descending)[:2]
    axis = norm_axis(dim, x.rank)
    n = x.shape[axis] if x.rank else 1
    return tuple(cx.emit("topk", [x], k=n, axis=axis, largest=bool(descending), part=part)
                 for part in ("values", "indices"))


@aten("index_put.default")
def _index_put(cx: Translator, x: Node, indices: Sequence[Node | None], values: Any,
               accumulate: bool = False) -> Node:
    """x[index] = values for one integer index tensor on the first axis (rows written by
    indirect DMA; a repeated index keeps the last write)."""
    picked = [i for i in indices if i is not None]
    if accumulate or len(indices) != 1 or len(picked) != 1 or picked[0].dtype.name == "bool_":
        raise UnsupportedError("index_put other than x[int_index] = values on the first axis "
                               "(accumulate, boolean masks, several index tensors)")
    values = cx.tensor(values)
    if values.dtype != x.dtype:
        values = cx.emit("cast", [values], dtype=x.dtype.name)
    return cx.emit("scatter", [x, values, picked[0]], accumulate=False)


@aten("histc.default")
def _histc(cx: Translator, x: Node, bins: int = 100, min: float = 0, max: float = 0) -> Node:
    """Counts of x in `bins` equal bins over [min, max] (x == max in the last; outside ignored),
    as a compare of each element's bin with every bin and a sum: bins x elements of VectorE
    work, small for the expert counts mixture-of-experts layers take."""
    low, high = float(min), float(max)
    if low == high:
        raise UnsupportedError("histc over the data's own range (min == max) is not supported; "
                               "give min and max")
    flat = cx.emit("cast", [cx.emit("reshape", [x], shape=(x.numel, 1))], dtype="float32")

    def number(v: float) -> Node:
        return cx.emit("full", shape=(), value=float(v), dtype="float32")

    where = cx.emit("floor", [cx.emit("mul", [cx.emit("sub", [flat, number(low)]),
                                               number(bins / (high - low))])])
    where = cx.emit("minimum", [where, number(bins - 1)])
    inside = cx.emit("logical_and", [cx.emit("ge", [flat, number(low)]),
                                     cx.emit("le", [flat, number(high)])])
    edges = cx.emit("reshape", [cx.emit("arange", start=0, end=int(bins), step=1,
                                        dtype="float32")], shape=(1, int(bins)))
    hits = cx.emit("logical_and", [cx.emit("eq", [where, edges]), inside])
    counts = cx.emit("sum", [cx.emit("cast", [hits], dtype="float32")], axes=(0,),
                     keepdim=False)
    out = cx.out_dtype()
    return counts if out.name == "float32" else cx.emit("cast", [counts], dtype=out.name)


@aten("var.correction")
def _var(cx: Translator, x: Node, dims: Any = None, *, correction: float | None = 1,
         keepdim: bool = False) -> Node:
    return cx.emit("var", [x], axes=_axes(x, dims), keepdim=bool(keepdim),
                   correction=1 if correction is None else correction)


@aten("_softmax.default", "_log_softmax.default")
def _softmax(cx: Translator, x: Node, dim: int, half_to_float: bool = False) -> Node:
    op = "log_softmax" if "log" in cx.current_target else "softmax"
    return cx.emit(op, [x], axis=norm_axis(dim, x.rank))


@aten("_safe_softmax.default")
def _safe_softmax(cx: Translator, x: Node, dim: int, dtype: Any = None) -> Node:
    """softmax whose all -inf rows give zeros (scaled_dot_product_attention's math path): one
    softmax kernel with `safe`, not PyTorch's decomposition (softmax, an all(x == -inf)
    reduction and a select, three passes over the scores)."""
    if dtype is not None and x.dtype != cx.out_dtype():
        x = cx.emit("cast", [x], dtype=cx.out_dtype().name)
    return cx.emit("softmax", [x], axis=norm_axis(dim, x.rank), safe=True)


@aten("cumsum.default")
def _cumsum(cx: Translator, x: Node, dim: int, dtype: Any = None) -> Node:
    out = cx.emit("cumsum", [x], axis=norm_axis(dim, x.rank))
    return out if out.dtype == cx.out_dtype() else cx.emit("cast", [out], dtype=cx.out_dtype().name)


# --- matmul, convolution, pooling, normalisation ------------------------------------------------
@aten("mm.default", "bmm.default")
def _mm(cx: Translator, a: Node, b: Node) -> Node:
    return cx.emit("matmul", [a, b])


@aten("addmm.default")
def _addmm(cx: Translator, bias: Node, a: Node, b: Node, *, beta: Any = 1, alpha: Any = 1) -> Node:
    out = cx.emit("matmul", [a, b])
    if alpha != 1:
        out = cx.emit("mul", [out, cx.tensor(alpha)])
    if beta != 1:
        bias = cx.emit("mul", [bias, cx.tensor(beta)])
    return cx.emit("add", [out, bias])


@aten("convolution.default")
def _convolution(cx: Translator, x: Node, w: Node, b: Node | None, stride: Sequence[int],
                 padding: Sequence[int], dilation: Sequence[int], transposed: bool,
                 output_padding: Sequence[int], groups: int) -> Node:
    if transposed:
        raise UnsupportedError("transposed convolution")
    if x.rank == 3:  # conv1d: run as conv2d over a height of 1
        x4 = cx.emit("reshape", [x], shape=(x.shape[0], x.shape[1], 1, x.shape[2]))
        w4 = cx.emit("reshape", [w], shape=(w.shape[0], w.shape[1], 1, w.shape[2]))
        out = _conv2d(cx, x4, w4, b, (1, stride[0]), (0, padding[0]), (1, dilation[0]), groups)
        return cx.emit("reshape", [out], shape=cx.out_shape())
    if x.rank != 4:
        raise UnsupportedError(f"{x.rank - 2}-D convolution (1-D and 2-D are supported)")
    return _conv2d(cx, x, w, b, stride, padding, dilation, groups)


def _conv2d(cx: Translator, x: Node, w: Node, b: Node | None, stride: Sequence[int],
            padding: Sequence[int], dilation: Sequence[int], groups: int) -> Node:
    two = lambda v: tuple(int(i) for i in (v if len(v) == 2 else (v[0], v[0])))  # noqa: E731
    stride, padding, dilation = two(stride), two(padding), two(dilation)
    if patchify(w.shape, stride, padding, dilation, groups, x.shape):
        return _patch_matmul(cx, x, w, b)
    inputs = [x, w] + ([b] if b is not None else [])
    return cx.emit("conv2d", inputs, stride=stride, padding=padding, dilation=dilation,
                   groups=int(groups))


def patchify(w_shape: Sequence[int], stride: tuple[int, int], padding: tuple[int, int],
             dilation: tuple[int, int], groups: int, x_shape: Sequence[int]) -> bool:
    """A convolution whose kernel tiles the image (kernel = stride > 1, no padding, dilation or
    groups): ViT's and Swin's patch embeddings."""
    kh, kw = w_shape[-2:]
    return ((kh, kw) == stride and kh * kw > 1 and padding == (0, 0) and dilation == (1, 1)
            and groups == 1 and x_shape[-2] % kh == 0 and x_shape[-1] % kw == 0)


def _patch_matmul(cx: Translator, x: Node, w: Node, b: Node | None) -> Node:
    """A patchify convolution as one matmul: [N * patches, C * kh * kw] @ W^T, the patches
    gathered by a strided view of x. The conv kernel would keep every tap of every output
    channel on each partition (ViT-base: 256 x 768 bf16 = 384 KiB, twice SBUF)."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    ph, pw = h // kh, wd // kw
    rows = patch_rows(cx, x, kh, kw)
    wt = cx.emit("permute", [cx.emit("reshape", [w], shape=(o, c * kh * kw))], dims=(1, 0))
    out = cx.emit("matmul", [rows, wt])
    if b is not None:
        out = cx.emit("add", [out, b])
    out = cx.emit("reshape", [out], shape=(n, ph, pw, o))
    return cx.emit("permute", [out], dims=(0, 3, 1, 2))


def patch_rows(cx: Translator, x: Node, kh: int, kw: int) -> Node:
    """[N * patches, C * kh * kw]: the kh x kw patches of x [N, C, H, W], one per row (a view)."""
    n, c, h, wd = x.shape
    ph, pw = h // kh, wd // kw
    patches = cx.emit("reshape", [x], shape=(n, c, ph, kh, pw, kw))
    patches = cx.emit("permute", [patches], dims=(0, 2, 4, 1, 3, 5))  # n, ph, pw, c, kh, kw
    return cx.emit("reshape", [patches], shape=(n * ph * pw, c * kh * kw))


def _pair(v: Any, default: Sequence[int] | None = None) -> tuple[int, int]:
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        assert default is not None
        v = default
    if isinstance(v, int):
        return (v, v)
    return (int(v[0]), int(v[-1])) if len(v) <= 2 else (int(v[0]), int(v[1]))


@aten("max_pool2d_with_indices.default", "max_pool2d.default")
def _max_pool2d(cx: Translator, x: Node, kernel: Any, stride: Any = None, padding: Any = 0,
                dilation: Any = 1, ceil_mode: bool = False) -> Any:
    k = _pair(kernel)
    out = cx.emit("max_pool2d", [x], kernel=k, stride=_pair(stride, k), padding=_pair(padding),
                  dilation=_pair(dilation), ceil_mode=bool(ceil_mode))
    return (out, None) if "with_indices" in cx.current_target else out


@aten("avg_pool2d.default")
def _avg_pool2d(cx: Translator, x: Node, kernel: Any, stride: Any = None, padding: Any = 0,
                ceil_mode: bool = False, count_include_pad: bool = True,
                divisor_override: int | None = None) -> Node:
    k = _pair(kernel)
    return cx.emit("avg_pool2d", [x], kernel=k, stride=_pair(stride, k), padding=_pair(padding),
                   ceil_mode=bool(ceil_mode), count_include_pad=bool(count_include_pad),
                   divisor_override=divisor_override)


@aten("_adaptive_avg_pool2d.default", "adaptive_avg_pool2d.default")
def _adaptive_avg_pool2d(cx: Translator, x: Node, output_size: Any) -> Node:
    return cx.emit("adaptive_avg_pool2d", [x], output_size=_pair(output_size))


@aten("group_norm.default")
def _group_norm(cx: Translator, x: Node, groups: int, w: Node | None = None,
                b: Node | None = None, eps: float = 1e-5, cudnn_enabled: bool = True) -> Node:
    """Each group's channels x positions normalised as one row (a layer norm over [N, G, -1]),
    then the per-channel affine."""
    n, c = x.shape[0], x.shape[1]
    rows = cx.emit("reshape", [x], shape=(n, int(groups), x.numel // (n * int(groups))))
    out = cx.emit("reshape", [cx.emit("layer_norm", [rows], normalized=1, eps=float(eps),
                                      weight=False, bias=False)], shape=x.shape)
    per_channel = (c, *([1] * (x.rank - 2)))
    for p, op in ((w, "mul"), (b, "add")):
        if p is not None:
            out = cx.emit(op, [out, cx.emit("reshape", [p], shape=per_channel)])
    return out


@aten("native_group_norm.default")
def _native_group_norm(cx: Translator, x: Node, w: Node | None, b: Node | None, n: int, c: int,
                       hw: int, groups: int, eps: float) -> tuple[Node, None, None]:
    return _group_norm(cx, x, groups, w, b, eps), None, None


@aten("linalg_vector_norm.default")
def _vector_norm(cx: Translator, x: Node, ord: float = 2, dim: Any = None, keepdim: bool = False,
                 *, dtype: Any = None) -> Node:
    """The 2-norm sqrt(sum(x^2)) (weight norm's ||v||); other orders are refused by name."""
    if float(ord) != 2.0:
        raise UnsupportedError(f"linalg.vector_norm with ord={ord} (only ord=2)")
    return two_norm(cx, x, _axes(x, dim), bool(keepdim))


def two_norm(cx: Translator, x: Node, axes: tuple[int, ...], keepdim: bool) -> Node:
    """sqrt(sum(x^2)) over `axes`."""
    return cx.emit("sqrt", [cx.emit("sum", [cx.emit("mul", [x, x])], axes=axes, keepdim=keepdim)])


@aten("upsample_bilinear2d.default", "upsample_bilinear2d.vec", "upsample_bicubic2d.default",
      "upsample_bicubic2d.vec")
def _upsample_bilinear2d(cx: Translator, x: Node, output_size: Any = None, align_corners: bool = False,
                         *scales: Any) -> Node:
    """Bilinear and bicubic resizing are linear in each spatial axis: out = A_h @ x @ A_w^T with
    constant interpolation matrices (PyTorch's source-index rules), i.e. two matmuls on
    TensorE."""
    matrix = _bicubic_matrix if "bicubic" in cx.current_target else _bilinear_matrix
    h, w = x.shape[-2:]
    oh, ow = cx.out_shape()[-2:]
    factors = [s for s in scales if s is not None]
    if len(factors) == 1 and isinstance(factors[0], (list, tuple)):
        factors = list(factors[0])
    sh, sw = [*factors, None, None][:2]
    a_wt = cx.graph.add_constant(matrix(w, ow, align_corners, sw).T.copy(),
                                 name="resize_w", dt=x.dtype)  # the result keeps x's dtype
    a_ht = cx.graph.add_constant(matrix(h, oh, align_corners, sh).T.copy(),
                                 name="resize_h", dt=x.dtype)
    lead = x.shape[:-2]
    n, swap = math.prod(lead), (*range(len(lead)), len(lead) + 1, len(lead))
    rows = cx.emit("matmul", [cx.emit("reshape", [x], shape=(n * h, w)), a_wt])  # [.. h, ow]
    cols = cx.emit("permute", [cx.emit("reshape", [rows], shape=(*lead, h, ow))], dims=swap)
    out = cx.emit("matmul", [cx.emit("reshape", [cols], shape=(n * ow, h)), a_ht])  # [.. ow, oh]
    return cx.emit("permute", [cx.emit("reshape", [out], shape=(*lead, ow, oh))], dims=swap)


def _source(i: int, size: int, out: int, align_corners: bool, scale: float | None) -> float:
    """Where output pixel i samples the input (PyTorch's area_pixel_compute_source_index,
    before the linear mode's clamp at 0)."""
    if align_corners:
        return i * (size - 1) / (out - 1) if out > 1 else 0.0
    return (i + 0.5) * (1.0 / scale if scale else size / out) - 0.5


def _bilinear_matrix(size: int, out: int, align_corners: bool, scale: float | None) -> np.ndarray:
    """[out, size] weights of PyTorch's 1-D linear interpolation (upsample_bilinear2d)."""
    m = np.zeros((out, size), np.float32)
    for i in range(out):
        src = max(_source(i, size, out, align_corners, scale), 0.0)
        lo = min(int(np.floor(src)), size - 1)
        hi = min(lo + 1, size - 1)
        frac = src - lo
        m[i, lo] += 1.0 - frac
        m[i, hi] += frac
    return m


def _bicubic_matrix(size: int, out: int, align_corners: bool, scale: float | None) -> np.ndarray:
    """[out, size] weights of PyTorch's 1-D cubic convolution (upsample_bicubic2d: Keys' kernel
    with A = -0.75, source index not clamped, the 4 taps clamped to the edge)."""
    a = -0.75

    def near(t: float) -> float:  # |distance| <= 1
        return ((a + 2) * t - (a + 3)) * t * t + 1

    def far(t: float) -> float:  # 1 < |distance| < 2
        return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a

    m = np.zeros((out, size), np.float64)
    for i in range(out):
        src = _source(i, size, out, align_corners, scale)
        base = int(np.floor(src))
        t = src - base
        for tap, weight in zip(range(base - 1, base + 3),
                               (far(t + 1), near(t), near(1 - t), far(2 - t)), strict=True):
            m[i, min(max(tap, 0), size - 1)] += weight
    return m.astype(np.float32)


@aten("native_layer_norm.default")
def _layer_norm(cx: Translator, x: Node, shape: Sequence[int], w: Node | None, b: Node | None,
                eps: float) -> tuple[Node, None, None]:
    inputs = [x] + [p for p in (w, b) if p is not None]
    out = cx.emit("layer_norm", inputs, normalized=len(shape), eps=float(eps),
                  weight=w is not None, bias=b is not None)
    return out, None, None


@aten("_native_batch_norm_legit_no_training.default")
def _batch_norm(cx: Translator, x: Node, w: Node | None, b: Node | None, mean: Node, var: Node,
                momentum: float, eps: float) -> tuple[Node, None, None]:
    c = x.shape[1]
    g = cx.graph
    w = w if w is not None else g.add_constant(np.ones(c, np.float32), name="bn_ones")
    b = b if b is not None else g.add_constant(np.zeros(c, np.float32), name="bn_zeros")
    return cx.emit("batch_norm", [x, w, b, mean, var], eps=float(eps)), None, None


# --- gathers ----------------------------------------------------------------------------------
@aten("embedding.default")
def _embedding(cx: Translator, w: Node, idx: Node, *args: Any) -> Node:
    return cx.emit("embedding", [w, idx])


@aten("gather.default")
def _gather(cx: Translator, x: Node, dim: int, index: Node, sparse_grad: bool = False) -> Node:
    return cx.emit("gather", [x, index], axis=norm_axis(dim, x.rank))


@aten("index.Tensor")
def _index(cx: Translator, x: Node, indices: Sequence[Node | None]) -> Node:
    dims = tuple(d for d, i in enumerate(indices) if i is not None)
    return cx.emit("index", [x, *(i for i in indices if i is not None)], dims=dims)


@aten("index_select.default")
def _index_select(cx: Translator, x: Node, dim: int, index: Node) -> Node:
    return cx.emit("index_select", [x, index], axis=norm_axis(dim, x.rank))


# --- views and data movement ----------------------------------------------------------------
@aten("view.default", "_unsafe_view.default", "reshape.default", "squeeze.dim", "squeeze.dims",
      "squeeze.default", "unsqueeze.default", "flatten.using_ints")
def _reshape(cx: Translator, x: Node, *args: Any) -> Node:
    shape = cx.out_shape()
    return x if shape == x.shape else cx.emit("reshape", [x], shape=shape)


@aten("permute.default")
def _permute(cx: Translator, x: Node, dims: Sequence[int]) -> Node:
    dims = tuple(norm_axis(d, x.rank) for d in dims)
    return x if dims == tuple(range(x.rank)) else cx.emit("permute", [x], dims=dims)


@aten("t.default", "transpose.int")
def _transpose(cx: Translator, x: Node, d0: int = 0, d1: int = 1) -> Node:
    if x.rank < 2:
        return x
    dims = list(range(x.rank))
    a, b = norm_axis(d0, x.rank), norm_axis(d1, x.rank)
    dims[a], dims[b] = dims[b], dims[a]
    return _permute(cx, x, dims)


@aten("repeat.default")
def _repeat(cx: Translator, x: Node, repeats: Sequence[int]) -> Node:
    """torch.repeat (tile): each axis of size s becomes (r, s) broadcast, then r * s."""
    reps = [int(r) for r in repeats]
    shape = (1,) * (len(reps) - x.rank) + x.shape
    pairs = [d for s in shape for d in (1, s)]
    wide = [d for r, s in zip(reps, shape, strict=True) for d in (r, s)]
    y = cx.emit("expand", [cx.emit("reshape", [x], shape=tuple(pairs))], shape=tuple(wide))
    return cx.emit("reshape", [y], shape=cx.out_shape())


@aten("repeat_interleave.self_int")
def _repeat_interleave(cx: Translator, x: Node, repeats: int, dim: int | None = None,
                       output_size: int | None = None) -> Node:
    """Each element along dim repeated in place: the axis of size s becomes (s, r), then s * r."""
    if dim is None:
        x, dim = cx.emit("reshape", [x], shape=(x.numel,)), 0
    axis = norm_axis(dim, x.rank)
    inner = (*x.shape[:axis + 1], 1, *x.shape[axis + 1:])
    wide = (*x.shape[:axis + 1], int(repeats), *x.shape[axis + 1:])
    y = cx.emit("expand", [cx.emit("reshape", [x], shape=inner)], shape=wide)
    return cx.emit("reshape", [y], shape=cx.out_shape())


@aten("expand.default")
def _expand(cx: Translator, x: Node, sizes: Sequence[int], implicit: bool = False) -> Node:
    shape = cx.out_shape()
    return x if shape == x.shape else cx.emit("expand", [x], shape=shape)


def _slice_node(cx: Translator, x: Node, dim: int, start: int | None, end: int | None,
                step: int) -> Node:
    axis = norm_axis(dim, x.rank)
    size = x.shape[axis]
    start, end, _ = slice(start, end, step).indices(size)
    end = max(end, start)
    if (start, end, step) == (0, size, 1):
        return x
    return cx.emit("slice", [x], axis=axis, start=start, end=end, step=int(step))


@aten("slice.Tensor")
def _slice(cx: Translator, x: Node, dim: int = 0, start: int | None = None,
           end: int | None = None, step: int = 1) -> Node:
    return _slice_node(cx, x, dim, start, end, step)


@aten("select.int")
def _select(cx: Translator, x: Node, dim: int, index: int) -> Node:
    axis = norm_axis(dim, x.rank)
    index = index % x.shape[axis]
    one = _slice_node(cx, x, axis, index, index + 1, 1)
    return cx.emit("reshape", [one], shape=cx.out_shape())


@aten("slice_scatter.default")
def _slice_scatter(cx: Translator, x: Node, src: Node, dim: int = 0, start: int | None = None,
                   end: int | None = None, step: int = 1) -> Node:
    """x with x[start:end] along dim replaced by src (what ``y[:, 1:] = z`` functionalises to):
    the untouched parts of x and src, concatenated."""
    axis = norm_axis(dim, x.rank)
    size = x.shape[axis]
    start, end, _ = slice(start, end, step).indices(size)
    end = max(end, start)
    if step != 1:
        raise UnsupportedError(f"slice_scatter with step {step} (only step 1: y[a:b] = z)")
    src = _like(cx, src, x.dtype, (*x.shape[:axis], end - start, *x.shape[axis + 1:]))
    parts = ([_slice_node(cx, x, axis, 0, start, 1)] if start > 0 else []) + [src] + \
        ([_slice_node(cx, x, axis, end, size, 1)] if end < size else [])
    return parts[0] if len(parts) == 1 else cx.emit("concat", parts, axis=axis)


@aten("select_scatter.default")
def _select_scatter(cx: Translator, x: Node, src: Node, dim: int, index: int) -> Node:
    """``y[:, i] = z``: src gets its axis back, then replaces one slice."""
    axis = norm_axis(dim, x.rank)
    index = index % x.shape[axis]
    src = cx.emit("reshape", [src], shape=(*src.shape[:axis], 1, *src.shape[axis:]))
    return _slice_scatter(cx, x, src, axis, index, index + 1)


@aten("copy.default")
def _copy(cx: Translator, x: Node, src: Node, non_blocking: bool = False) -> Node:
    """Functional ``x.copy_(src)``: src in x's dtype and shape."""
    return _like(cx, cx.tensor(src), x.dtype, x.shape)


@aten("fill.Scalar", "fill.Tensor")
def _fill(cx: Translator, x: Node, value: Any) -> Node:
    return _like(cx, cx.tensor(value), x.dtype, x.shape)


def _like(cx: Translator, v: Node, dtype: Any, shape: tuple[int, ...]) -> Node:
    if v.dtype != dtype:
        v = cx.emit("cast", [v], dtype=dtype.name)
    if v.shape != shape:
        if v.rank < len(shape):
            v = cx.emit("reshape", [v], shape=(1,) * (len(shape) - v.rank) + v.shape)
        v = cx.emit("expand", [v], shape=shape)
    return v


@aten("as_strided.default")
def _as_strided(cx: Translator, x: Node, size: Sequence[int], stride: Sequence[int],
                storage_offset: int | None = None) -> Node:
    """Only the restrides decompositions emit that are reshapes of a contiguous tensor (e.g. a
    pool's [N, C, 1, 1] result): the same elements in the same order."""
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    expected, step = [], 1
    for s in reversed(size):
        expected.append(step)
        step *= s
    moving = [(st, ex) for s, st, ex in zip(size, stride, reversed(expected), strict=True) if s != 1]
    if (storage_offset or 0) != 0 or step != x.numel or any(st != ex for st, ex in moving):
        raise UnsupportedError(f"as_strided(size={list(size)}, stride={list(stride)}, "
                               f"storage_offset={storage_offset or 0}) of a {list(x.shape)} tensor "
                               f"is not a reshape; only reshaping restrides are supported")
    return x if size == x.shape else cx.emit("reshape", [x], shape=size)


@aten("adaptive_avg_pool1d.default")
def _adaptive_avg_pool1d(cx: Translator, x: Node, output_size: Any) -> Node:
    """As a 2-D pool over [.., 1, L]."""
    out = _pair(output_size)[-1]
    y = cx.emit("reshape", [x], shape=(*x.shape[:-1], 1, x.shape[-1]))
    y = cx.emit("adaptive_avg_pool2d", [y], output_size=(1, out))
    return cx.emit("reshape", [y], shape=(*x.shape[:-1], out))


@aten("cat.default")
def _cat(cx: Translator, tensors: Sequence[Node], dim: int = 0) -> Node:
    parts = [t for t in tensors if t.numel > 0]
    if not parts:  # every part empty (YOLOS's mid-layer embeddings of a 1-layer model)
        return cx.emit("full", shape=cx.out_shape(), value=0, dtype=cx.out_dtype().name)
    if len(parts) == 1:
        return parts[0]
    return cx.emit("concat", parts, axis=norm_axis(dim, parts[0].rank))


@aten("chunk.default")
def _chunk(cx: Translator, x: Node, chunks: int, dim: int = 0) -> list[Node]:
    """torch.chunk: pieces of ceil(size / chunks) (the last may be smaller, fewer if needed)."""
    size = x.shape[norm_axis(dim, x.rank)]
    return _split(cx, x, max(-(-size // max(int(chunks), 1)), 1), dim)


@aten("split_with_sizes.default", "split.Tensor")
def _split(cx: Translator, x: Node, sizes: Any, dim: int = 0) -> list[Node]:
    axis = norm_axis(dim, x.rank)
    if isinstance(sizes, int):
        sizes = [min(sizes, x.shape[axis] - s) for s in range(0, x.shape[axis], sizes)]
    out, start = [], 0
    for s in sizes:
        out.append(_slice_node(cx, x, axis, start, start + s, 1))
        start += s
    return out


@aten("constant_pad_nd.default")
def _pad(cx: Translator, x: Node, pad: Sequence[int], value: float = 0.0) -> Node:
    pairs = [(0, 0)] * x.rank
    for i in range(len(pad) // 2):  # torch lists the last axis first
        pairs[x.rank - 1 - i] = (int(pad[2 * i]), int(pad[2 * i + 1]))
    if any(b < 0 or a < 0 for b, a in pairs):
        raise UnsupportedError("negative padding (cropping) in constant_pad_nd")
    return cx.emit("pad", [x], pads=tuple(pairs), value=value)


# --- generators -----------------------------------------------------------------------------
@aten("full.default", "zeros.default", "ones.default", "empty.memory_format",
      "full_like.default", "zeros_like.default", "ones_like.default", "empty_like.default",
      "scalar_tensor.default", "new_ones.default", "new_zeros.default", "new_full.default",
      "empty_permuted.default", "empty_strided.default", "new_empty.default",
      "new_empty_strided.default")
def _full(cx: Translator, *args: Any, **kwargs: Any) -> Node:
    target = cx.current_target
    if "ones" in target:
        value: Any = 1
    elif "zeros" in target or "empty" in target:
        value = 0
    elif target.startswith("aten.scalar_tensor"):
        value = args[0]
    else:
        value = args[-1] if "new_full" not in target else args[2]
    dt = cx.out_dtype()
    value = bool(value) if dt.is_bool else (int(value) if dt.is_int else float(value))
    return cx.emit("full", shape=cx.out_shape(), value=value, dtype=dt.name)


@aten("arange.start_step", "arange.default", "arange.start")
def _arange(cx: Translator, *args: Any, **kwargs: Any) -> Node:
    nums = [a for a in args if isinstance(a, (int, float))]
    start, end, step = (0, nums[0], 1) if len(nums) == 1 else (*nums[:2], nums[2] if len(nums) > 2 else 1)
    out = cx.emit("arange", start=start, end=end, step=step, dtype=cx.out_dtype().name)
    if out.shape != cx.out_shape():  # float steps: trust PyTorch's length
        raise UnsupportedError(f"arange({start}, {end}, {step}) length differs from PyTorch's")
    return out


# --- attention ------------------------------------------------------------------------------
@aten("scaled_dot_product_attention.default")
def _sdpa(cx: Translator, q: Node, k: Node, v: Node, attn_mask: Node | None = None,
          dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
          enable_gqa: bool = False) -> Node:
    if dropout_p:
        raise UnsupportedError("scaled_dot_product_attention with dropout (trace in eval mode)")
    if enable_gqa and q.shape[-3] != k.shape[-3]:
        reps = q.shape[-3] // k.shape[-3]
        k, v = (_repeat_heads(cx, t, reps) for t in (k, v))
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    inputs = [q, k, v] + ([attn_mask] if attn_mask is not None else [])
    return cx.emit("sdpa", inputs, scale=scale, causal=bool(is_causal))


def _repeat_heads(cx: Translator, t: Node, reps: int) -> Node:
    *b, h, s, d = t.shape
    e = cx.emit("expand", [cx.emit("reshape", [t], shape=(*b, h, 1, s, d))],
                shape=(*b, h, reps, s, d))
    return cx.emit("reshape", [e], shape=(*b, h * reps, s, d))
