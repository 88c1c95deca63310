"""Reference interpreter: the executable definition of every IR operator, in numpy.

Each operator's meaning is one small function in `EVAL`; `evaluate(graph, inputs)` runs a graph
on numpy arrays. Passes are tested by running a graph before and after them here; later, the
simulated results of a compiled model are checked against it.

Arithmetic: floating values compute in float32 (as the Vector and Scalar engines do) and are
stored in the node's dtype with RNE (`trnsim.numerics.cast`); integers compute in int64 and are
stored as the node's (32-bit) type. A float -> int ``cast`` truncates toward zero, as PyTorch's
``.to(int)`` does: the IR means what the model meant. Kernel-level (``k.*``) operators'
references are their records' in `trnsim.compiler.kernel_ops`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from trnsim.compiler.ir import Graph, Node
from trnsim.compiler.ops import BINARY_ARITH, BINARY_BITS, COMPARE, UNARY_FLOAT, UNARY_SAME
from trnsim.errors import InvalidArgumentError
from trnsim.numerics import DType, cast

Eval = Callable[[Node, list[np.ndarray], Graph], np.ndarray]
EVAL: dict[str, Eval] = {}
F32 = np.float32


def evaluate(graph: Graph, inputs: Sequence[Any]) -> list[np.ndarray]:
    """Run `graph` on `inputs` (arrays or torch CPU tensors, in graph input order).

    A tensor-parallel graph (``graph.meta["tensor_parallel"]``) runs once per rank in lockstep:
    each rank reads its own weight chunks and ``k.collective`` combines the ranks' values; the
    outputs (replicated) are rank 0's."""
    if len(inputs) != len(graph.inputs):
        raise InvalidArgumentError(f"{graph.name} takes {len(graph.inputs)} inputs, "
                                   f"got {len(inputs)}")
    from trnsim.sim.execution_plan import rank_chunk  # here: `trnsim bench` warm loads no simulator

    ranks = int(graph.meta.get("tensor_parallel", 1))
    last_use: dict[int, int] = {}
    for i, node in enumerate(graph.nodes):
        for operand in node.inputs:
            last_use[id(operand)] = i
    keep = {id(o) for o in graph.outputs}
    envs: list[dict[int, np.ndarray]] = [{} for _ in range(ranks)]
    for node, value in zip(graph.inputs, inputs, strict=True):
        shard = node.attrs.get("tp_shard")  # each rank holds its chunk of a sharded input
        for rank, env in enumerate(envs):
            data = _as_numpy(value)
            env[id(node)] = store(data if shard is None else rank_chunk(data, shard, rank),
                                  node.dtype)
    for i, node in enumerate(graph.nodes):
        if node.op == "k.collective":
            values = _collective(node, [env[id(node.inputs[0])] for env in envs])
            for env in envs:
                env[id(node)] = values
        elif node.op == "constant" and ranks > 1:
            for rank, env in enumerate(envs):
                env[id(node)] = graph.constant(node).value(rank)
        elif node.op != "input":
            for env in envs:
                env[id(node)] = EVAL[node.op](node, [env[id(x)] for x in node.inputs], graph)
        for operand in set(node.inputs):  # free what nothing later reads (big models)
            if last_use.get(id(operand)) == i and id(operand) not in keep:
                for env in envs:
                    env.pop(id(operand), None)
    return [envs[0][id(o)] for o in graph.outputs]


def _collective(node: Node, values: list[np.ndarray]) -> np.ndarray:
    """The value every rank holds after a ``k.collective`` of the ranks' `values`."""
    if node.attrs["kind"] == "all_gather":
        return np.concatenate(values, axis=node.attrs["axis"])
    total = np.sum(np.stack([v.astype(F32) for v in values]), axis=0)
    return store(total, node.dtype)


def _as_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        from trnsim.compiler.capture import tensor_to_numpy
        return tensor_to_numpy(value)
    return np.asarray(value)


def store(x: np.ndarray, dt: DType) -> np.ndarray:
    """`x` in `dt`'s storage: floats RNE, float -> int truncates, ints wrap (as PyTorch's)."""
    x = np.asarray(x)
    if x.dtype == dt.np_dtype:
        return x
    if dt.is_int and x.dtype.kind in "iu":
        return x.astype(dt.np_dtype)
    if dt.is_int and x.dtype.kind == "f":
        x = np.trunc(x.astype(np.float64))
    return np.asarray(cast(x, dt, rounding="rne"))


def compute(x: np.ndarray, as_float: bool) -> np.ndarray:
    """The values an engine computes on: float32 for floats, int64 for ints, bool for bool."""
    if as_float or x.dtype.kind == "f" or x.dtype.kind == "V":
        return x.astype(F32) if x.dtype != F32 else x
    if x.dtype.kind in "iu":
        return x.astype(np.int64)
    return x


def _floatish(arrays: Sequence[np.ndarray]) -> bool:
    return any(a.dtype.kind == "f" or a.dtype.name in ("bfloat16",) or a.dtype.kind == "V"
               for a in arrays)


# --- elementwise: one table shared with fused programs (trnsim.compiler.fused.Step) -----------
def erf(x: np.ndarray) -> np.ndarray:
    """erf to ~1e-7 absolute (Abramowitz & Stegun 7.1.26 in float64): numpy has no erf."""
    z = np.abs(x.astype(np.float64))
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027
                                                                          + t * 1.061405429))))
    return (np.sign(x) * (1.0 - poly * np.exp(-z * z))).astype(F32)


def gelu(x: np.ndarray, approximate: str = "none") -> np.ndarray:
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
        return (0.5 * x * (1.0 + np.tanh(inner))).astype(F32)
    return (0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))).astype(F32)


def gelu_dx(x: np.ndarray) -> np.ndarray:
    """d/dx of x * Phi(x) (erf GELU): Phi(x) + x * phi(x)."""
    x64 = x.astype(np.float64)
    cdf = 0.5 * (1.0 + erf(x64 / math.sqrt(2.0)).astype(np.float64))
    return (cdf + x64 * np.exp(-0.5 * x64 * x64) / math.sqrt(2.0 * math.pi)).astype(F32)


def silu_dx(x: np.ndarray) -> np.ndarray:
    """d/dx of x * sigmoid(x): s * (1 + x * (1 - s))."""
    s = _sigmoid(x)
    return (s * (1.0 + x * (1.0 - s))).astype(F32)


def _clamp(x: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    lo, hi = attrs.get("min"), attrs.get("max")
    if lo is not None:
        x = np.maximum(x, np.asarray(lo, x.dtype))
    if hi is not None:
        x = np.minimum(x, np.asarray(hi, x.dtype))
    return x


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-x))).astype(F32)


UNARY: dict[str, Callable[[np.ndarray, dict[str, Any]], np.ndarray]] = {
    "neg": lambda x, a: -x, "abs": lambda x, a: np.abs(x), "relu": lambda x, a: np.maximum(x, 0),
    "sign": lambda x, a: np.sign(x), "floor": lambda x, a: np.floor(x),
    "ceil": lambda x, a: np.ceil(x), "round": lambda x, a: np.round(x),
    "clamp": _clamp, "exp": lambda x, a: np.exp(x), "log": lambda x, a: np.log(x),
    "sqrt": lambda x, a: np.sqrt(x), "rsqrt": lambda x, a: (1.0 / np.sqrt(x)).astype(F32),
    "reciprocal": lambda x, a: (1.0 / x).astype(F32), "tanh": lambda x, a: np.tanh(x),
    "sigmoid": lambda x, a: _sigmoid(x),
    "gelu": lambda x, a: gelu(x, a.get("approximate", "none")),
    "silu": lambda x, a: (x * _sigmoid(x)).astype(F32), "erf": lambda x, a: erf(x),
    "gelu_dx": lambda x, a: gelu_dx(x), "silu_dx": lambda x, a: silu_dx(x),
    "sin": lambda x, a: np.sin(x), "cos": lambda x, a: np.cos(x),
    "logical_not": lambda x, a: ~(x.astype(bool)),
}

BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
    "pow": np.power, "maximum": np.maximum, "minimum": np.minimum, "remainder": np.mod, "fmod": np.fmod,
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal,
    "logical_and": lambda a, b: np.logical_and(a, b), "logical_or": lambda a, b: np.logical_or(a, b),
    "logical_xor": lambda a, b: np.logical_xor(a, b),
}


def _shift(op: str, a: np.ndarray, b: np.ndarray, *, bits: int) -> np.ndarray:
    """PyTorch's shifts: a shift by a negative amount or by the width or more gives 0 (left) or
    the sign (right)."""
    inside = (b >= 0) & (b < bits)
    amount = np.where(inside, b, 0)
    if op == "left_shift":
        return np.where(inside, np.left_shift(a, amount), 0)
    return np.where(inside, np.right_shift(a, amount), np.right_shift(a, 63))


def elementwise(op: str, args: Sequence[np.ndarray], attrs: dict[str, Any], out: DType
                ) -> np.ndarray:
    """Compute one elementwise op on stored arrays; the result is `out`'s storage."""
    if op == "cast":
        return store(args[0], out)
    as_float = out.is_float or (op in COMPARE and _floatish(args))
    if op in ("bitwise_and", "bitwise_or", "bitwise_xor", "logical_and", "logical_or",
              "logical_xor") and not as_float:
        vals = [a if a.dtype == bool else compute(a, False) for a in args]
    else:
        vals = [compute(a, as_float) for a in args]
    if op == "where":
        result = np.where(args[0].astype(bool), *vals[1:])
    elif op in UNARY:
        result = UNARY[op](vals[0], attrs)
    elif op == "div" and not attrs.get("true_div", True) and not as_float:
        result = np.floor_divide(*vals)
    elif op in ("left_shift", "right_shift"):
        result = _shift(op, *vals, bits=8 * out.itemsize)
    else:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            result = BINARY[op](*vals)
    return store(result, out)


def _eval_elementwise(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return elementwise(node.op, args, node.attrs, node.dtype)


for _op in (*UNARY_SAME, *UNARY_FLOAT, "logical_not", "cast", *BINARY_ARITH, *BINARY_BITS,
            *COMPARE, "where"):
    EVAL[_op] = _eval_elementwise


def rule(*names: str) -> Callable[[Eval], Eval]:
    def decorate(fn: Eval) -> Eval:
        for name in names:
            EVAL[name] = fn
        return fn
    return decorate


# --- leaves -----------------------------------------------------------------------------------
@rule("constant")
def _constant(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    return graph.constant(node).value()


@rule("scalar")
def _scalar(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    return store(np.asarray(node.attrs["value"]), node.dtype)


@rule("full")
def _full(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    return store(np.full(node.shape, node.attrs["value"]), node.dtype)


@rule("arange")
def _arange(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    a = node.attrs
    return store(np.arange(a["start"], a["end"], a["step"])[: node.shape[0]], node.dtype)


# --- reductions -------------------------------------------------------------------------------
def reduce(op: str, x: np.ndarray, axes: Sequence[int], keepdim: bool, out: DType,
           correction: float = 1) -> np.ndarray:
    axes = tuple(axes)
    if op in ("argmax", "argmin"):
        fn = np.argmax if op == "argmax" else np.argmin
        r = fn(compute(x, False), axis=axes[0] if axes else None)
        if keepdim and axes:
            r = np.expand_dims(r, axes[0])
        return store(r, out)
    if op in ("any", "all"):
        r = (np.any if op == "any" else np.all)(x.astype(bool), axis=axes, keepdims=keepdim)
        return store(r, out)
    v = compute(x, out.is_float)
    if op == "var":
        n = math.prod(x.shape[a] for a in axes) if axes else x.size
        mean = v.mean(axis=axes, keepdims=True)
        r = ((v - mean) ** 2).sum(axis=axes, keepdims=keepdim) / max(n - correction, 0)
    else:
        fn = {"sum": np.sum, "mean": np.mean, "amax": np.max, "amin": np.min, "prod": np.prod}[op]
        r = fn(v, axis=axes, keepdims=keepdim)
    return store(r, out)


@rule("sum", "mean", "amax", "amin", "prod", "any", "all", "argmax", "argmin", "var")
def _reduce(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    a = node.attrs
    return reduce(node.op, args[0], a["axes"], a["keepdim"], node.dtype, a.get("correction", 1))


def softmax(x: np.ndarray, axis: int, log: bool = False, safe: bool = False) -> np.ndarray:
    """`safe`: rows that are all -inf give zeros (PyTorch's `_safe_softmax`), not NaN."""
    x = compute(x, True)
    with np.errstate(invalid="ignore"):
        shifted = x - np.max(x, axis=axis, keepdims=True)
        e = np.exp(shifted)
        total = e.sum(axis=axis, keepdims=True)
        out = (shifted - np.log(total)) if log else e / total
    if safe:
        out = np.where(np.all(x == -np.inf, axis=axis, keepdims=True), np.float32(0), out)
    return out


@rule("softmax", "log_softmax")
def _softmax(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    return store(softmax(args[0], node.attrs["axis"], node.op == "log_softmax",
                         bool(node.attrs.get("safe", False))), node.dtype)


@rule("cumsum")
def _cumsum(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    return store(np.cumsum(compute(args[0], node.dtype.is_float), axis=node.attrs["axis"]),
                 node.dtype)


def topk(x: np.ndarray, k: int, axis: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    """Values and indices of the k largest (smallest) along axis, best first; ties go to the
    lower index (a stable sort), as repeated max8 / match_replace8 rounds find them."""
    v = compute(x, True)
    order = np.argsort(-v if largest else v, axis=axis, kind="stable")
    index = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(v, index, axis=axis), index


@rule("topk")
def _topk(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    a = node.attrs
    values, index = topk(args[0], a["k"], a["axis"], a["largest"])
    return store(values if a["part"] == "values" else index, node.dtype)


# --- compute ----------------------------------------------------------------------------------
@rule("matmul")
def _matmul(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    return store(np.matmul(compute(args[0], True), compute(args[1], True)), node.dtype)


def conv2d(x: np.ndarray, w: np.ndarray, stride: Sequence[int], padding: Sequence[int],
           dilation: Sequence[int], groups: int) -> np.ndarray:
    """NCHW x OIHW in float32 through strided windows (one tensordot per group)."""
    x = np.pad(compute(x, True), ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    w = compute(w, True)
    o, cg, kh, kw = w.shape
    span = ((kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1)
    win = np.lib.stride_tricks.sliding_window_view(x, span, axis=(2, 3))
    win = win[:, :, ::stride[0], ::stride[1], ::dilation[0], ::dilation[1]]
    og = o // groups
    outs = [np.tensordot(win[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og],
                         axes=([1, 4, 5], [1, 2, 3])) for g in range(groups)]
    return np.concatenate(outs, axis=-1).transpose(0, 3, 1, 2).astype(F32)


@rule("conv2d")
def _conv2d(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    a = node.attrs
    out = conv2d(args[0], args[1], a["stride"], a["padding"], a["dilation"], a["groups"])
    if len(args) == 3:
        out = out + compute(args[2], True)[:, None, None]
    return store(out, node.dtype)


def pool2d(x: np.ndarray, kind: str, kernel: Sequence[int], stride: Sequence[int],
           padding: Sequence[int], dilation: Sequence[int], ceil_mode: bool,
           count_include_pad: bool = True, divisor_override: int | None = None) -> np.ndarray:
    from trnsim.compiler.ops import conv_out

    v = compute(x, True)
    h, w = v.shape[-2:]
    out_hw = [conv_out(s, kernel[i], stride[i], padding[i], dilation[i], ceil_mode)
              for i, s in enumerate((h, w))]
    extra = [max(0, (out_hw[i] - 1) * stride[i] + (kernel[i] - 1) * dilation[i] + 1
                 - (s + 2 * padding[i])) for i, s in enumerate((h, w))]
    lead = [(0, 0)] * (v.ndim - 2)
    pads = [(padding[0], padding[0] + extra[0]), (padding[1], padding[1] + extra[1])]
    span = tuple((kernel[i] - 1) * dilation[i] + 1 for i in range(2))

    def windows(a: np.ndarray) -> np.ndarray:
        win = np.lib.stride_tricks.sliding_window_view(a, span, axis=(-2, -1))
        return win[..., ::stride[0], ::stride[1], ::dilation[0], ::dilation[1]][
            ..., : out_hw[0], : out_hw[1], :, :]

    if kind == "max":
        padded = np.pad(v, lead + pads, constant_values=-np.inf)
        return windows(padded).max(axis=(-2, -1))
    total = windows(np.pad(v, lead + pads)).sum(axis=(-2, -1))
    if divisor_override:
        return (total / divisor_override).astype(F32)
    if count_include_pad:  # padding counts, the ceil_mode overhang does not
        counted = np.pad(np.ones((h + 2 * padding[0], w + 2 * padding[1]), F32),
                         [(0, extra[0]), (0, extra[1])])
    else:
        counted = np.pad(np.ones((h, w), F32), pads)
    return (total / windows(counted).sum(axis=(-2, -1))).astype(F32)


@rule("max_pool2d", "avg_pool2d")
def _pool(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    a = node.attrs
    out = pool2d(args[0], "max" if node.op == "max_pool2d" else "avg", a["kernel"], a["stride"],
                 a["padding"], a.get("dilation", (1, 1)), a["ceil_mode"],
                 a.get("count_include_pad", True), a.get("divisor_override"))
    return store(out, node.dtype)


def adaptive_avg_pool2d(x: np.ndarray, output_size: Sequence[int]) -> np.ndarray:
    v = compute(x, True)
    h, w = v.shape[-2:]
    oh, ow = output_size
    out = np.empty((*v.shape[:-2], oh, ow), F32)
    for i in range(oh):
        h0, h1 = (i * h) // oh, -(-((i + 1) * h) // oh)
        for j in range(ow):
            w0, w1 = (j * w) // ow, -(-((j + 1) * w) // ow)
            out[..., i, j] = v[..., h0:h1, w0:w1].mean(axis=(-2, -1))
    return out


@rule("adaptive_avg_pool2d")
def _adaptive(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    return store(adaptive_avg_pool2d(args[0], node.attrs["output_size"]), node.dtype)


def layer_norm(x: np.ndarray, normalized: int, eps: float, weight: np.ndarray | None,
               bias: np.ndarray | None, rms: bool = False) -> np.ndarray:
    v = compute(x, True)
    axes = tuple(range(v.ndim - normalized, v.ndim))
    if rms:
        y = v / np.sqrt((v * v).mean(axis=axes, keepdims=True) + F32(eps))
    else:
        mean = v.mean(axis=axes, keepdims=True)
        var = ((v - mean) ** 2).mean(axis=axes, keepdims=True)
        y = (v - mean) / np.sqrt(var + F32(eps))
    if weight is not None:
        y = y * compute(weight, True)
    if bias is not None:
        y = y + compute(bias, True)
    return y.astype(F32)


@rule("layer_norm")
def _layer_norm(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    a = node.attrs
    w = args[1] if a["weight"] else None
    b = args[1 + int(a["weight"])] if a["bias"] else None
    return store(layer_norm(args[0], a["normalized"], a["eps"], w, b), node.dtype)


@rule("batch_norm")
def _batch_norm(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    x, w, b, mean, var = (compute(a, True) for a in args)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    scale = w / np.sqrt(var + F32(node.attrs["eps"]))
    return store(x * scale.reshape(shape) + (b - mean * scale).reshape(shape), node.dtype)


@rule("embedding")
def _embedding(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    return args[0][args[1].astype(np.int64)]


@rule("gather")
def _gather(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    return np.take_along_axis(args[0], args[1].astype(np.int64), axis=node.attrs["axis"])


@rule("index")
def _index(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    x, *idx = args
    key: list[Any] = [slice(None)] * x.ndim
    for d, i in zip(node.attrs["dims"], idx, strict=True):
        key[d] = i.astype(np.int64) if i.dtype != bool else i
    return x[tuple(key)]


@rule("scatter")
def _scatter(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    x, values, index = args
    out = np.array(x, copy=True)
    index = np.asarray(index).astype(np.int64)
    rows = np.broadcast_to(values, (*index.shape, *x.shape[1:])).reshape(-1, *x.shape[1:])
    if node.attrs.get("accumulate"):  # every repeat of an index adds, in index order
        for i, row in zip(index.ravel(), rows, strict=True):
            out[i] = out[i] + row.astype(out.dtype)
        return store(out, node.dtype)
    for i, row in zip(index.ravel(), rows, strict=True):  # in order: the last write wins
        out[i] = row
    return store(out, node.dtype)


@rule("index_select")
def _index_select(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    return np.take(args[0], args[1].astype(np.int64).reshape(-1), axis=node.attrs["axis"])


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None,
              scale: float, causal: bool, k_transposed: bool = False) -> np.ndarray:
    """softmax(q k^T * scale + mask) v in float32; fully masked rows give 0 (as PyTorch's)."""
    kt = compute(k, True) if k_transposed else np.swapaxes(compute(k, True), -1, -2)
    s = np.matmul(compute(q, True), kt) * F32(scale)
    keep = None
    if causal:
        sq, sk = s.shape[-2:]
        keep = np.tril(np.ones((sq, sk), bool))  # top-left aligned, as torch's is_causal
    if mask is not None:
        if mask.dtype == bool:
            keep = mask if keep is None else keep & mask
        else:
            s = s + compute(mask, True)
    if keep is not None:
        s = np.where(keep, s, -np.inf)
    p = softmax(s, -1)
    p = np.nan_to_num(p, nan=0.0)
    return np.matmul(p, compute(v, True)).astype(F32)


@rule("sdpa")
def _sdpa(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    mask = args[3] if len(args) == 4 else None
    out = attention(args[0], args[1], args[2], mask, node.attrs["scale"], node.attrs["causal"])
    return store(out, node.dtype)


# --- views and data movement ----------------------------------------------------------------
EVAL["reshape"] = lambda n, a, g: a[0].reshape(n.shape)
EVAL["permute"] = lambda n, a, g: np.transpose(a[0], n.attrs["dims"])
EVAL["expand"] = lambda n, a, g: np.broadcast_to(a[0], n.shape)
EVAL["concat"] = lambda n, a, g: store(np.concatenate(
    [store(x, n.dtype) for x in a], axis=n.attrs["axis"]), n.dtype)
EVAL["pad"] = lambda n, a, g: np.pad(a[0], n.attrs["pads"],
                                     constant_values=np.asarray(n.attrs["value"]).astype(a[0].dtype))


@rule("slice")
def _slice(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    a = node.attrs
    key: list[Any] = [slice(None)] * args[0].ndim
    key[a["axis"]] = slice(a["start"], a["end"], a["step"])
    return args[0][tuple(key)]


def _register_kernel_ops() -> None:
    """The kernel-level operators' reference semantics (`trnsim.compiler.kernel_ops`)."""
    from trnsim.compiler.kernel_ops import KERNEL_OPS

    EVAL.update({op.name: op.reference for op in KERNEL_OPS.values()})


_register_kernel_ops()
