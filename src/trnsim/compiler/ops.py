"""The graph IR's primitive operators: each declared once with its shape-and-dtype rule.

The IR's operators are a small canonical set, not ATen's thousand overloads: ``add.Tensor``,
``add.Scalar`` and ``addmm``'s bias all become ``add``; ``mm``/``bmm``/``addmm``/``linear``
become ``matmul`` (+ ``add``). `trnsim.compiler.aten` maps ATen onto these; the reference
interpreter (`trnsim.compiler.interpret`) is the executable definition of what each one computes;
the kernel-level operators the fusion passes produce are declared in `trnsim.compiler.fused`.

Types follow the hardware, not PyTorch: there is no 64-bit type on a NeuronCore, so int64
becomes int32 and float64 becomes float32 at capture (as neuronx-cc does). Python numbers in a
model are ``scalar`` nodes, weak in type promotion exactly like PyTorch's wrapped numbers.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trnsim.compiler.errors import IRError
from trnsim.numerics import DType, dtype

if TYPE_CHECKING:
    from trnsim.compiler.ir import Graph, Node

Shape = tuple[int, ...]
Rule = Callable[["list[Node]", "dict[str, Any]", "Graph | None"], "tuple[Shape, DType]"]

F32 = dtype("float32")
I32 = dtype("int32")
BOOL = dtype("bool_")


@dataclass(frozen=True)
class OpDef:
    """An operator: its family, its rule and the attributes it requires."""

    name: str
    kind: str  # "leaf" | "elementwise" | "reduce" | "view" | "compute" | "kernel"
    rule: Rule
    attrs: tuple[str, ...] = ()
    doc: str = ""


OPS: dict[str, OpDef] = {}


def register(name: str, kind: str, rule: Rule, attrs: Sequence[str] = (), doc: str = "") -> None:
    OPS[name] = OpDef(name, kind, rule, tuple(attrs), doc)


def infer(op: str, inputs: list[Node], attrs: dict[str, Any], graph: Graph | None = None
          ) -> tuple[Shape, DType]:
    """The output shape and dtype of `op` on `inputs`; raises `IRError` on inconsistent operands."""
    opdef = OPS.get(op)
    if opdef is None:
        raise IRError(f"unknown IR operator {op!r}")
    missing = [a for a in opdef.attrs if a not in attrs]
    if missing:
        raise IRError(f"{op}: missing attribute(s) {', '.join(missing)}")
    shape, dt = opdef.rule(inputs, attrs, graph)
    return tuple(int(s) for s in shape), dt


def kind(op: str) -> str:
    return OPS[op].kind if op in OPS else "unknown"


# --- dtype promotion (PyTorch's three tiers: dimensioned tensors > 0-d tensors > Python numbers)
def category(dt: DType) -> int:
    return 0 if dt.is_bool else (1 if dt.is_int else 2)


def _promote_same_category(dts: Sequence[DType]) -> DType:
    """Promote within the highest category present (bool < int < float)."""
    top = max(category(d) for d in dts)
    dts = [d for d in dts if category(d) == top]
    best = dts[0]
    for d in dts[1:]:
        if d == best:
            continue
        if {d.name, best.name} == {"bfloat16", "float16"}:
            best = F32
        elif d.itemsize > best.itemsize:
            best = d
        elif d.itemsize == best.itemsize and d.is_int and d.name.startswith("u") != best.name.startswith("u"):
            best = dtype({1: "int16", 2: "int32"}.get(d.itemsize, "int32"))
    return best


def promote(inputs: Sequence[Node]) -> DType:
    """PyTorch's result type for an elementwise op (with int64 -> int32, float64 -> float32)."""
    tiers: list[list[DType]] = [[], [], []]
    for n in inputs:
        tier = 2 if n.op == "scalar" else (1 if n.shape == () else 0)
        tiers[tier].append(n.dtype)
    result: DType | None = None
    for tier, dts in enumerate(tiers):
        if not dts:
            continue
        cand = _promote_same_category(dts)
        if tier == 2:  # a Python number only contributes its category's default type
            cand = {0: BOOL, 1: I32, 2: F32}[max(category(d) for d in dts)]
        if result is None:
            result = cand
        elif category(cand) > category(result):
            result = cand if tier < 2 else {1: I32, 2: F32}[category(cand)]
    assert result is not None
    return result


# --- shape helpers -------------------------------------------------------------------------
def broadcast(*shapes: Shape) -> Shape:
    rank = max(map(len, shapes), default=0)
    out = []
    for axis in range(rank):
        sizes = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            raise IRError(f"shapes {', '.join(map(str, shapes))} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def norm_axis(axis: int, rank: int) -> int:
    if not -max(rank, 1) <= axis < max(rank, 1):
        raise IRError(f"axis {axis} out of range for rank {rank}")
    return axis % max(rank, 1)


def _n(inputs: list[Node], count: int | tuple[int, int], op: str) -> None:
    lo, hi = (count, count) if isinstance(count, int) else count
    if not lo <= len(inputs) <= hi:
        raise IRError(f"{op} takes {lo}..{hi} operands, got {len(inputs)}")


# --- leaves --------------------------------------------------------------------------------
def _input(inputs, attrs, graph):
    return tuple(attrs["shape"]), dtype(attrs["dtype"])


def _constant(inputs, attrs, graph):
    if graph is None or attrs["ref"] not in graph.constants:
        raise IRError(f"constant {attrs['ref']!r} has no data")
    c = graph.constants[attrs["ref"]]
    return c.shape, c.dtype


def _scalar(inputs, attrs, graph):
    return (), dtype(attrs["dtype"])


def _full(inputs, attrs, graph):
    return tuple(attrs["shape"]), dtype(attrs["dtype"])


def _arange(inputs, attrs, graph):
    length = max(0, math.ceil((attrs["end"] - attrs["start"]) / attrs["step"]))
    return (length,), dtype(attrs["dtype"])


register("input", "leaf", _input, ("index", "shape", "dtype"), "a tensor argument of the model")
register("constant", "leaf", _constant, ("ref",), "a weight, buffer or folded tensor")
register("scalar", "leaf", _scalar, ("value", "dtype"), "a Python number (weak type)")
register("full", "leaf", _full, ("shape", "value", "dtype"), "a tensor filled with one value")
register("arange", "leaf", _arange, ("start", "end", "step", "dtype"), "start, start+step, ...")

# --- elementwise ---------------------------------------------------------------------------
UNARY_SAME = ("neg", "abs", "relu", "sign", "floor", "ceil", "round", "clamp")
UNARY_FLOAT = ("exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh", "sigmoid", "gelu", "silu",
               "erf", "sin", "cos", "gelu_dx", "silu_dx")  # *_dx: derivatives (backward)
BINARY_ARITH = ("add", "sub", "mul", "div", "pow", "maximum", "minimum", "remainder",
                "fmod")
BINARY_BITS = ("bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift")
COMPARE = ("eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor")
ELEMENTWISE = (*UNARY_SAME, *UNARY_FLOAT, "logical_not", "cast", *BINARY_ARITH, *BINARY_BITS,
               *COMPARE, "where")


def _unary_same(inputs, attrs, graph):
    _n(inputs, 1, "unary")
    return inputs[0].shape, inputs[0].dtype


def _unary_float(inputs, attrs, graph):
    _n(inputs, 1, "unary")
    return inputs[0].shape, inputs[0].dtype if inputs[0].dtype.is_float else F32


def _cast(inputs, attrs, graph):
    _n(inputs, 1, "cast")
    return inputs[0].shape, dtype(attrs["dtype"])


def _logical_not(inputs, attrs, graph):
    _n(inputs, 1, "logical_not")
    return inputs[0].shape, BOOL


def _binary(inputs, attrs, graph):
    _n(inputs, 2, "binary")
    dt = promote(inputs)
    if attrs.get("true_div") and not dt.is_float:
        dt = F32
    return broadcast(inputs[0].shape, inputs[1].shape), dt


def _compare(inputs, attrs, graph):
    _n(inputs, 2, "comparison")
    return broadcast(inputs[0].shape, inputs[1].shape), BOOL


def _where(inputs, attrs, graph):
    _n(inputs, 3, "where")
    return broadcast(*(i.shape for i in inputs)), promote(inputs[1:])


for _op in UNARY_SAME:
    register(_op, "elementwise", _unary_same)
for _op in UNARY_FLOAT:
    register(_op, "elementwise", _unary_float)
register("logical_not", "elementwise", _logical_not)
register("cast", "elementwise", _cast, ("dtype",), "convert (RNE) to attrs['dtype']")
for _op in (*BINARY_ARITH, *BINARY_BITS):
    register(_op, "elementwise", _binary)
for _op in COMPARE:
    register(_op, "elementwise", _compare)
register("where", "elementwise", _where, (), "cond ? x : y")


# --- reductions and scans -------------------------------------------------------------------
REDUCE = ("sum", "mean", "amax", "amin", "prod", "any", "all", "argmax", "argmin", "var")


def _reduce(inputs, attrs, graph, op: str):
    _n(inputs, 1, op)
    x = inputs[0]
    axes = tuple(attrs["axes"])
    for a in axes:
        if not 0 <= a < max(x.rank, 1):
            raise IRError(f"reduction axis {a} out of range for rank {x.rank} (axes are normalised)")
    if x.rank == 0:
        shape: Shape = ()
    elif attrs["keepdim"]:
        shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    else:
        shape = tuple(s for i, s in enumerate(x.shape) if i not in axes)
    return shape, _reduce_dtype(op, x.dtype)


def _reduce_dtype(op: str, dt: DType) -> DType:
    if op in ("any", "all"):
        return BOOL
    if op in ("argmax", "argmin"):
        return I32
    if op in ("sum", "prod") and not dt.is_float:
        return I32
    if op in ("mean", "var") and not dt.is_float:
        return F32
    return dt


for _op in REDUCE:
    register(_op, "reduce", functools.partial(_reduce, op=_op), ("axes", "keepdim"))


def _softmax(inputs, attrs, graph):
    _n(inputs, 1, "softmax")
    norm_axis(attrs["axis"], inputs[0].rank)
    return inputs[0].shape, inputs[0].dtype if inputs[0].dtype.is_float else F32


def _cumsum(inputs, attrs, graph):
    _n(inputs, 1, "cumsum")
    norm_axis(attrs["axis"], inputs[0].rank)
    x = inputs[0]
    return x.shape, x.dtype if x.dtype.is_float else I32


def _topk(inputs, attrs, graph):
    _n(inputs, 1, "topk")
    x = inputs[0]
    axis = norm_axis(attrs["axis"], x.rank)
    k = int(attrs["k"])
    size = x.shape[axis] if x.rank else 1
    if not 0 <= k <= size:
        raise IRError(f"topk: k = {k} is out of range for {size} elements along axis {axis}")
    if attrs["part"] not in ("values", "indices"):
        raise IRError(f"topk: part {attrs['part']!r} is not 'values' or 'indices'")
    shape = tuple(k if i == axis else s for i, s in enumerate(x.shape))
    return shape, (x.dtype if attrs["part"] == "values" else I32)


register("softmax", "compute", _softmax, ("axis",))
# the k largest (or smallest) along `axis`, in order; one node per part (values or indices)
register("topk", "compute", _topk, ("k", "axis", "largest", "part"))
register("log_softmax", "compute", _softmax, ("axis",))
register("cumsum", "compute", _cumsum, ("axis",))


# --- compute ---------------------------------------------------------------------------------
def _matmul(inputs, attrs, graph):
    _n(inputs, 2, "matmul")
    a, b = inputs
    if a.rank < 2 or b.rank < 2:
        raise IRError(f"matmul operands need rank >= 2, got {a.shape} and {b.shape}")
    (m, k), (k2, n) = a.shape[-2:], b.shape[-2:]
    if k != k2:
        raise IRError(f"matmul contraction sizes differ: {a.shape} @ {b.shape}")
    return (*broadcast(a.shape[:-2], b.shape[:-2]), m, n), _result_dtype(inputs, attrs)


def _result_dtype(inputs: Sequence[Node], attrs: dict[str, Any]) -> DType:
    """matmul/conv/sdpa: PyTorch's promotion, unless auto-cast fixed the result (out_dtype): the
    accumulation is fp32 in PSUM, so an fp32 result of bf16 operands is exact, not re-rounded."""
    if attrs.get("out_dtype"):
        return dtype(attrs["out_dtype"])
    return promote(inputs)


def conv_out(size: int, k: int, stride: int, pad: int, dil: int, ceil_mode: bool = False) -> int:
    span = size + 2 * pad - dil * (k - 1) - 1
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad:  # PyTorch: last window must start inside
        out -= 1
    return out


def _conv2d(inputs, attrs, graph):
    _n(inputs, (2, 3), "conv2d")
    x, w = inputs[:2]
    if x.rank != 4 or w.rank != 4:
        raise IRError(f"conv2d wants NCHW input and OIHW weight, got {x.shape} and {w.shape}")
    g = attrs["groups"]
    if x.shape[1] != w.shape[1] * g or w.shape[0] % g:
        raise IRError(f"conv2d channels: input {x.shape}, weight {w.shape}, groups {g}")
    if len(inputs) == 3 and inputs[2].shape != (w.shape[0],):
        raise IRError(f"conv2d bias {inputs[2].shape} != ({w.shape[0]},)")
    hw = [conv_out(x.shape[2 + i], w.shape[2 + i], attrs["stride"][i], attrs["padding"][i],
                   attrs["dilation"][i]) for i in range(2)]
    return (x.shape[0], w.shape[0], *hw), _result_dtype(inputs[:2], attrs)


def _pool2d(inputs, attrs, graph):
    _n(inputs, 1, "pool2d")
    x = inputs[0]
    if x.rank not in (3, 4):
        raise IRError(f"pool2d wants (N)CHW, got {x.shape}")
    dil = attrs.get("dilation", (1, 1))
    hw = [conv_out(x.shape[-2 + i], attrs["kernel"][i], attrs["stride"][i], attrs["padding"][i],
                   dil[i], attrs["ceil_mode"]) for i in range(2)]
    return (*x.shape[:-2], *hw), x.dtype


def _adaptive_avg_pool2d(inputs, attrs, graph):
    _n(inputs, 1, "adaptive_avg_pool2d")
    return (*inputs[0].shape[:-2], *attrs["output_size"]), inputs[0].dtype


def _layer_norm(inputs, attrs, graph):
    _n(inputs, (1, 3), "layer_norm")
    x = inputs[0]
    k = attrs["normalized"]
    want = 1 + int(attrs["weight"]) + int(attrs["bias"])
    if len(inputs) != want:
        raise IRError(f"layer_norm has {len(inputs)} operands, attributes say {want}")
    for p in inputs[1:]:
        if p.shape != x.shape[x.rank - k:]:
            raise IRError(f"layer_norm parameter {p.shape} != normalised shape {x.shape[-k:]}")
    return x.shape, x.dtype


def _batch_norm(inputs, attrs, graph):
    _n(inputs, 5, "batch_norm")
    x = inputs[0]
    for p in inputs[1:]:
        if p.shape != (x.shape[1],):
            raise IRError(f"batch_norm parameter {p.shape} != ({x.shape[1]},)")
    return x.shape, x.dtype


def _embedding(inputs, attrs, graph):
    _n(inputs, 2, "embedding")
    w, idx = inputs
    if w.rank != 2 or idx.dtype.is_float:
        raise IRError(f"embedding wants a 2-D table and integer indices, got {w.shape}, {idx.dtype}")
    return (*idx.shape, w.shape[1]), w.dtype


def _gather(inputs, attrs, graph):
    _n(inputs, 2, "gather")
    x, idx = inputs
    norm_axis(attrs["axis"], x.rank)
    if idx.rank != x.rank:
        raise IRError(f"gather index rank {idx.rank} != input rank {x.rank}")
    return idx.shape, x.dtype


def _index(inputs, attrs, graph):
    x, *idx = inputs
    dims = tuple(attrs["dims"])
    if len(dims) != len(idx) or any(not 0 <= d < x.rank for d in dims):
        raise IRError(f"index dims {dims} do not fit {len(idx)} index tensors on rank {x.rank}")
    bshape = broadcast(*(i.shape for i in idx))
    rest = [s for d, s in enumerate(x.shape) if d not in dims]
    adjacent = list(dims) == list(range(dims[0], dims[0] + len(dims)))
    if adjacent:
        first = sum(1 for d in range(dims[0]) if d not in dims)
        shape = (*rest[:first], *bshape, *rest[first:])
    else:
        shape = (*bshape, *rest)
    return shape, x.dtype


def _index_select(inputs, attrs, graph):
    _n(inputs, 2, "index_select")
    x, idx = inputs
    axis = norm_axis(attrs["axis"], x.rank)
    return tuple(idx.numel if d == axis else s for d, s in enumerate(x.shape)), x.dtype


def _sdpa(inputs, attrs, graph):
    _n(inputs, (3, 4), "sdpa")
    q, k, v = inputs[:3]
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise IRError(f"sdpa shapes q {q.shape}, k {k.shape}, v {v.shape} do not fit")
    batch = broadcast(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if len(inputs) == 4:
        broadcast(inputs[3].shape, (*batch, q.shape[-2], k.shape[-2]))
    return (*batch, q.shape[-2], v.shape[-1]), _result_dtype([q], attrs)


register("matmul", "compute", _matmul, (), "a[..., M, K] @ b[..., K, N], batch dims broadcast")
register("conv2d", "compute", _conv2d, ("stride", "padding", "dilation", "groups"),
         "NCHW x OIHW (+ bias)")
register("max_pool2d", "compute", _pool2d, ("kernel", "stride", "padding", "dilation",
                                             "ceil_mode"))
register("avg_pool2d", "compute", _pool2d, ("kernel", "stride", "padding", "ceil_mode",
                                             "count_include_pad", "divisor_override"))
register("adaptive_avg_pool2d", "compute", _adaptive_avg_pool2d, ("output_size",))
register("layer_norm", "compute", _layer_norm, ("normalized", "eps", "weight", "bias"))
register("batch_norm", "compute", _batch_norm, ("eps",), "inference: running statistics")
register("embedding", "compute", _embedding, (), "rows of weight[V, D] at integer indices")
register("gather", "compute", _gather, ("axis",))
register("index", "compute", _index, ("dims",), "advanced indexing x[..., i0, ..., i1]")
register("index_select", "compute", _index_select, ("axis",))


def _scatter(inputs, attrs, graph):
    _n(inputs, 3, "scatter")
    x, values, index = inputs
    if x.rank == 0 or index.dtype.is_float:
        raise IRError(f"scatter needs rows of a tensor and integer indices, got x {x.shape}, "
                      f"index {index.dtype.name}")
    broadcast(values.shape, (*index.shape, *x.shape[1:]))
    return x.shape, x.dtype


register("scatter", "compute", _scatter, ("accumulate",),
         "x with rows index[i] (axis 0) set to values[i] (accumulate: values[i] added to them)")
register("sdpa", "compute", _sdpa, ("scale", "causal"),
         "softmax(q k^T * scale + mask) v (scaled_dot_product_attention)")


# --- views and data movement -------------------------------------------------------------------
VIEWS = ("reshape", "permute", "expand", "slice")


def _reshape(inputs, attrs, graph):
    _n(inputs, 1, "reshape")
    shape = tuple(attrs["shape"])
    if math.prod(shape) != inputs[0].numel or any(s < 0 for s in shape):
        raise IRError(f"reshape {inputs[0].shape} -> {shape} changes the element count")
    return shape, inputs[0].dtype


def _permute(inputs, attrs, graph):
    _n(inputs, 1, "permute")
    dims = tuple(attrs["dims"])
    if sorted(dims) != list(range(inputs[0].rank)):
        raise IRError(f"permute dims {dims} are not a permutation of rank {inputs[0].rank}")
    return tuple(inputs[0].shape[d] for d in dims), inputs[0].dtype


def _expand(inputs, attrs, graph):
    _n(inputs, 1, "expand")
    shape = tuple(attrs["shape"])
    x = inputs[0].shape
    if len(shape) < len(x) or broadcast(x, shape) != shape:
        raise IRError(f"expand {x} -> {shape} is not a broadcast")
    return shape, inputs[0].dtype


def _slice(inputs, attrs, graph):
    _n(inputs, 1, "slice")
    x = inputs[0]
    axis = attrs["axis"]
    if not 0 <= axis < x.rank:
        raise IRError(f"slice axis {axis} out of range for rank {x.rank}")
    start, end, step = attrs["start"], attrs["end"], attrs["step"]
    if not 0 <= start <= end <= x.shape[axis] or step < 1:
        raise IRError(f"slice [{start}:{end}:{step}] out of range for size {x.shape[axis]}")
    length = -(-(end - start) // step)
    return tuple(length if d == axis else s for d, s in enumerate(x.shape)), x.dtype


def _concat(inputs, attrs, graph):
    if not inputs:
        raise IRError("concat of nothing")
    axis = attrs["axis"]
    first = inputs[0].shape
    for i in inputs[1:]:
        if i.rank != len(first) or any(a != b for d, (a, b) in enumerate(zip(i.shape, first, strict=True))
                                       if d != axis):
            raise IRError(f"concat shapes {[n.shape for n in inputs]} differ off axis {axis}")
    size = sum(i.shape[axis] for i in inputs)
    return tuple(size if d == axis else s for d, s in enumerate(first)), promote(inputs)


def _pad(inputs, attrs, graph):
    _n(inputs, 1, "pad")
    x = inputs[0]
    pads = tuple(attrs["pads"])  # (before, after) per axis, first axis first
    if len(pads) != x.rank:
        raise IRError(f"pad wants one (before, after) pair per axis, got {pads}")
    return tuple(s + b + a for s, (b, a) in zip(x.shape, pads, strict=True)), x.dtype


register("reshape", "view", _reshape, ("shape",))
register("permute", "view", _permute, ("dims",))
register("expand", "view", _expand, ("shape",), "broadcast size-1 (or new leading) axes")
register("slice", "view", _slice, ("axis", "start", "end", "step"))
register("concat", "compute", _concat, ("axis",))
register("pad", "compute", _pad, ("pads", "value"), "constant padding")


def _register_kernel_ops() -> None:
    """The kernel-level operators' shape rules (`trnsim.compiler.kernel_ops`)."""
    from trnsim.compiler.kernel_ops import KERNEL_OPS

    for op in KERNEL_OPS.values():
        register(op.name, "kernel", op.shape, op.attrs, op.doc)


_register_kernel_ops()
