"""Kernel-level operators: the contract between the compiler and the kernel library.

After the fusion passes, a graph holds only leaves (``input``, ``constant``, ``scalar``, ``full``,
``arange``), views (``reshape``, ``permute``, ``expand``, ``slice``: resolved by the lowering into
DMA access patterns, or a copy where a view node says ``fold="copy"``) and the ``k.*`` operators
below. The lowering maps each ``k.*`` node 1:1 onto one kernel of `trnsim.kernels`; every fact a
kernel needs is on the node: operand shapes and dtypes (on the operand nodes), the output's
shape and dtype, and the attributes listed here. All attributes are plain data (ints, floats,
strings, tuples, `Step`s), so a graph can be printed, compared and saved as JSON.

Common attributes
    dtype            output dtype name (the node's dtype).
    compute_dtype    the dtype TensorE reads operands in (auto-cast may make it "bfloat16" while
                     the operands are fp32 in HBM: the kernel casts (RNE) on load).
    epilogue         a `Program` applied to the result before it is written (PSUM eviction for
                     matmul/conv): steps read ``acc`` (the accumulator, fp32) and ``in<k>``
                     (operand k of the node); the last step's value is written, cast to dtype.

k.matmul   operands (a, b[, bias][, extra...]). acc[*batch, m, n] = sum_k A[.., m, k] B[.., k, n]
           where A = a, or a^T if transpose_a (a stored [.., k, m]); B = b, or b^T if transpose_b
           (b stored [.., n, k], e.g. an nn.Linear weight). Batch dims broadcast.
           attrs: m, k, n, batch, transpose_a, transpose_b, bias (bool: operand 2 is a [n] vector
           added to acc before the epilogue), stationary ("a" | "b": the operand TensorE holds as
           stationary; the other streams as moving), weight_layout ("kn" | "nk" | None: how a
           constant b is pre-laid out in HBM at load), compute_dtype, accumulate_dtype
           ("float32"), epilogue, dtype.
k.conv2d   operands (x[N,C,H,W], w[O,C/g,kh,kw][, bias[O]][, extra...]). attrs: stride, padding,
           dilation, groups, bias, folded_bn (bool: batch norm folded into w and bias at compile
           time), compute_dtype, accumulate_dtype, epilogue, dtype.
k.attention operands (q[*b, sq, d], k[*b, sk, d] (or [*b, d, sk] if k_transposed), v[*b, sk, dv]
           [, mask]). out = softmax(q k^T * scale + mask) v with the softmax in fp32.
           attrs: scale, mask_kind ("none" | "causal" (lower-triangular, no operand) | "bias"
           (additive float operand broadcastable to [*b, sq, sk]) | "bool" (True keeps)),
           k_transposed, batch, sq, sk, d, dv, compute_dtype, dtype.
k.softmax  operands (x[, mask]). softmax (or log_softmax if log) over `axis` of x * scale (+ mask).
           attrs: axis (normalised), scale, log, mask_kind ("none" | "bias"), dtype.
k.norm     operands (x[, residual][, weight][, bias]). y = norm(x (+ residual)) (* weight) (+ bias)
           over the trailing `normalized` axes; statistics in fp32. attrs: kind ("layer" |
           "rms"), normalized, eps, residual, weight, bias (bools: which operands are present),
           dtype.
k.pool2d   operand (x[N,C,H,W]). attrs: kind ("max" | "avg" | "adaptive_avg"), kernel, stride,
           padding, dilation, ceil_mode, count_include_pad, divisor_override, output_size, dtype.
k.gather   operands (table, indices...). attrs: kind ("embedding": rows of a [V, D] table;
           "gather": torch.gather along axis; "index": advanced indexing on dims;
           "index_select": along axis), axis, dims, dtype.
k.elementwise operands (in0, in1, ...), broadcast together. attrs: program (a `Program` whose
           steps read ``in<k>``), dtype.
k.reduce   operand (x). attrs: op (sum | mean | amax | amin | prod | any | all | argmax | argmin
           | var), axes, keepdim, correction (var), prologue (a `Program` over ``in0`` applied
           first, or ()), dtype.
k.cumsum   operand (x). attrs: axis, dtype.
k.scatter  operands (x, values, index). x with rows index[i] of axis 0 set to values[i] (values
           broadcast to [*index.shape, *x.shape[1:]]; a repeated index keeps the last). attrs:
           dtype.
k.topk     operand (x). The k largest (or smallest) along `axis`, best first, ties to the lower
           index; `part` says which this node outputs. attrs: k, axis, largest, part ("values" |
           "indices"), dtype.
k.concat   operands (x0, x1, ...). attrs: axis, dtype.
k.pad      operand (x). attrs: pads ((before, after) per axis), value, dtype.
k.collective operand (x), this rank's value under tensor parallelism (the tensor_parallel pass).
           attrs: kind ("all_gather": concatenate the ranks' x along `axis`; "all_reduce": sum
           over the ranks), axis, degree (ranks in the group), dtype.

Added by the last passes (see `trnsim.compiler.passes`):
    views      fold ("alias" | "dma" | "copy") and access ((element offset, ((stride, size), ...))
               into the base buffer): how the consumer's DMA reads the view.
    k.*        prefetch: constant refs whose HBM -> SBUF loads start while this kernel runs.
    graph      meta["memory_plan"]: `MemoryPlan` with every weight's and activation's HBM offset;
               meta["schedule"]: kernel names in execution order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from trnsim.compiler.errors import IRError
from trnsim.numerics import DType, dtype

if TYPE_CHECKING:
    from trnsim.compiler.ir import Graph, Node

Arg = str | float | int | bool  # "acc", "in<k>", "s<j>", or a literal


@dataclass(frozen=True)
class Step:
    """One elementwise operation of a fused `Program`: ``s<j> = op(args) {attrs}``."""

    op: str  # an elementwise IR op (trnsim.compiler.ops.ELEMENTWISE)
    args: tuple[Arg, ...]
    attrs: tuple[tuple[str, Any], ...] = ()
    dtype: str = "float32"  # the step's result dtype

    def attr(self, key: str, default: Any = None) -> Any:
        return dict(self.attrs).get(key, default)

    def pretty(self) -> str:
        args = ", ".join(a if isinstance(a, str) else repr(a) for a in self.args)
        extra = "".join(f" {k}={v!r}" for k, v in self.attrs)
        return f"{self.op}({args}{extra})"


Program = tuple[Step, ...]


def program_reads(program: Program) -> set[int]:
    """Operand indices (``in<k>``) the program reads."""
    return {int(a[2:]) for s in program for a in s.args if isinstance(a, str) and a.startswith("in")}


def check_program(program: Program, operands: int, *, has_acc: bool) -> None:
    for j, step in enumerate(program):
        for a in step.args:
            if not isinstance(a, str):
                continue
            if a == "acc" and has_acc:
                continue
            if a.startswith("in") and a[2:].isdigit() and int(a[2:]) < operands:
                continue
            if a.startswith("s") and a[1:].isdigit() and int(a[1:]) < j:
                continue
            raise IRError(f"program step {j} ({step.pretty()}) reads {a!r}, which is not defined")


def pretty_program(program: Program) -> str:
    return "; ".join(f"s{j}={s.pretty()}" for j, s in enumerate(program))


# --- rules ------------------------------------------------------------------------------------
def _broadcast(*shapes):
    from trnsim.compiler.ops import broadcast
    return broadcast(*shapes)


def _out(attrs: dict[str, Any]) -> DType:
    return dtype(attrs["dtype"])


def _epilogue_shape(out: tuple[int, ...], extras: Sequence[Node], attrs: dict[str, Any],
                    first_extra: int, total: int) -> tuple[int, ...]:
    check_program(tuple(attrs["epilogue"]), total, has_acc=True)
    for e in extras:
        if _broadcast(out, e.shape) != out:
            raise IRError(f"epilogue operand {e.shape} does not broadcast to the output {out}")
    return out


def _k_matmul(inputs, attrs, graph):
    a, b = inputs[:2]
    m, k, n = attrs["m"], attrs["k"], attrs["n"]
    ak = a.shape[-2:] if not attrs["transpose_a"] else a.shape[-2:][::-1]
    bk = b.shape[-2:] if not attrs["transpose_b"] else b.shape[-2:][::-1]
    if tuple(ak) != (m, k) or tuple(bk) != (k, n):
        raise IRError(f"k.matmul operands {a.shape}, {b.shape} (transposed {attrs['transpose_a']},"
                      f" {attrs['transpose_b']}) do not give [{m}, {k}] @ [{k}, {n}]")
    batch = _broadcast(a.shape[:-2], b.shape[:-2])
    if tuple(attrs["batch"]) != batch:
        raise IRError(f"k.matmul batch {attrs['batch']} != operands' {batch}")
    first = 2
    if attrs["bias"]:
        if inputs[2].shape != (n,):
            raise IRError(f"k.matmul bias {inputs[2].shape} != ({n},)")
        first = 3
    out = _epilogue_shape((*batch, m, n), inputs[first:], attrs, first, len(inputs))
    return out, _out(attrs)


def _k_conv2d(inputs, attrs, graph):
    from trnsim.compiler.ops import conv_out
    x, w = inputs[:2]
    if x.rank != 4 or w.rank != 4 or x.shape[1] != w.shape[1] * attrs["groups"]:
        raise IRError(f"k.conv2d operands {x.shape}, {w.shape} (groups {attrs['groups']})")
    hw = [conv_out(x.shape[2 + i], w.shape[2 + i], attrs["stride"][i], attrs["padding"][i],
                   attrs["dilation"][i]) for i in range(2)]
    first = 3 if attrs["bias"] else 2
    if attrs["bias"] and inputs[2].shape != (w.shape[0],):
        raise IRError(f"k.conv2d bias {inputs[2].shape} != ({w.shape[0]},)")
    out = _epilogue_shape((x.shape[0], w.shape[0], *hw), inputs[first:], attrs, first,
                          len(inputs))
    return out, _out(attrs)


MASK_KINDS = ("none", "causal", "bias", "bool")


def _k_attention(inputs, attrs, graph):
    q, k, v = inputs[:3]
    kd = k.shape[-2:][::-1] if attrs["k_transposed"] else k.shape[-2:]
    sq, sk, d, dv = attrs["sq"], attrs["sk"], attrs["d"], attrs["dv"]
    if q.shape[-2:] != (sq, d) or tuple(kd) != (sk, d) or v.shape[-2:] != (sk, dv):
        raise IRError(f"k.attention q {q.shape}, k {k.shape}, v {v.shape} do not fit "
                      f"sq={sq} sk={sk} d={d} dv={dv}")
    batch = _broadcast(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if tuple(attrs["batch"]) != batch:
        raise IRError(f"k.attention batch {attrs['batch']} != operands' {batch}")
    kind = attrs["mask_kind"]
    if kind not in MASK_KINDS:
        raise IRError(f"k.attention mask_kind {kind!r} not in {MASK_KINDS}")
    has_mask = kind in ("bias", "bool")
    if len(inputs) != 3 + has_mask:
        raise IRError(f"k.attention mask_kind {kind!r} with {len(inputs)} operands")
    if has_mask:
        _broadcast(inputs[3].shape, (*batch, sq, sk))
    return (*batch, sq, dv), _out(attrs)


def _k_softmax(inputs, attrs, graph):
    x = inputs[0]
    if not 0 <= attrs["axis"] < x.rank:
        raise IRError(f"k.softmax axis {attrs['axis']} out of range for {x.shape}")
    if (attrs["mask_kind"] == "bias") != (len(inputs) == 2):
        raise IRError("k.softmax mask operand and mask_kind disagree")
    if len(inputs) == 2 and _broadcast(x.shape, inputs[1].shape) != x.shape:
        raise IRError(f"k.softmax mask {inputs[1].shape} does not broadcast to {x.shape}")
    return x.shape, _out(attrs)


def _k_norm(inputs, attrs, graph):
    x = inputs[0]
    want = 1 + sum(int(attrs[f]) for f in ("residual", "weight", "bias"))
    if len(inputs) != want or attrs["kind"] not in ("layer", "rms"):
        raise IRError(f"k.norm {attrs['kind']} has {len(inputs)} operands, attributes say {want}")
    norm_shape = x.shape[x.rank - attrs["normalized"]:]
    i = 1
    if attrs["residual"]:
        if inputs[1].shape != x.shape:
            raise IRError(f"k.norm residual {inputs[1].shape} != {x.shape}")
        i = 2
    for p in inputs[i:]:
        if p.shape != norm_shape:
            raise IRError(f"k.norm parameter {p.shape} != normalised shape {norm_shape}")
    return x.shape, _out(attrs)


def _k_pool2d(inputs, attrs, graph):
    from trnsim.compiler.ops import conv_out
    x = inputs[0]
    if attrs["kind"] == "adaptive_avg":
        return (*x.shape[:-2], *attrs["output_size"]), _out(attrs)
    hw = [conv_out(x.shape[-2 + i], attrs["kernel"][i], attrs["stride"][i], attrs["padding"][i],
                   attrs["dilation"][i], attrs["ceil_mode"]) for i in range(2)]
    return (*x.shape[:-2], *hw), _out(attrs)


def _k_gather(inputs, attrs, graph):
    from trnsim.compiler.ops import OPS
    kind = attrs["kind"]
    if kind not in ("embedding", "gather", "index", "index_select"):
        raise IRError(f"k.gather kind {kind!r}")
    shape, _ = OPS[kind].rule(list(inputs), attrs, graph)
    return shape, _out(attrs)


def _k_elementwise(inputs, attrs, graph):
    check_program(tuple(attrs["program"]), len(inputs), has_acc=False)
    if not attrs["program"]:
        raise IRError("k.elementwise with an empty program")
    return _broadcast(*(i.shape for i in inputs)), _out(attrs)


def _k_reduce(inputs, attrs, graph):
    from trnsim.compiler.ops import OPS
    check_program(tuple(attrs["prologue"]), len(inputs), has_acc=False)
    shape, _ = OPS[attrs["op"]].rule(list(inputs[:1]), attrs, graph)
    return shape, _out(attrs)


COLLECTIVE_KINDS = ("all_gather", "all_reduce")


def _k_collective(inputs, attrs, graph):
    x = inputs[0]
    kind, degree = attrs["kind"], attrs["degree"]
    if kind not in COLLECTIVE_KINDS or len(inputs) != 1 or degree < 2:
        raise IRError(f"k.collective {kind!r} over {degree} ranks with {len(inputs)} operands")
    if kind == "all_reduce":
        return x.shape, _out(attrs)
    axis = attrs["axis"]
    if not 0 <= axis < x.rank:
        raise IRError(f"k.collective all_gather axis {axis} out of range for {x.shape}")
    return (*x.shape[:axis], x.shape[axis] * degree, *x.shape[axis + 1:]), _out(attrs)


def _k_same_as(op: str):
    def rule(inputs, attrs, graph):
        from trnsim.compiler.ops import OPS
        shape, _ = OPS[op].rule(list(inputs), attrs, graph)
        return shape, _out(attrs)
    return rule


KERNELS: dict[str, tuple[Any, tuple[str, ...]]] = {
    "k.matmul": (_k_matmul, ("m", "k", "n", "batch", "transpose_a", "transpose_b", "bias",
                             "stationary", "compute_dtype", "epilogue", "dtype")),
    "k.conv2d": (_k_conv2d, ("stride", "padding", "dilation", "groups", "bias", "compute_dtype",
                             "epilogue", "dtype")),
    "k.attention": (_k_attention, ("scale", "mask_kind", "k_transposed", "batch", "sq", "sk", "d",
                                   "dv", "compute_dtype", "dtype")),
    "k.softmax": (_k_softmax, ("axis", "scale", "log", "mask_kind", "dtype")),
    "k.norm": (_k_norm, ("kind", "normalized", "eps", "residual", "weight", "bias", "dtype")),
    "k.pool2d": (_k_pool2d, ("kind", "dtype")),
    "k.gather": (_k_gather, ("kind", "dtype")),
    "k.elementwise": (_k_elementwise, ("program", "dtype")),
    "k.reduce": (_k_reduce, ("op", "axes", "keepdim", "prologue", "dtype")),
    "k.cumsum": (_k_same_as("cumsum"), ("axis", "dtype")),
    "k.topk": (_k_same_as("topk"), ("k", "axis", "largest", "part", "dtype")),
    "k.scatter": (_k_same_as("scatter"), ("dtype",)),
    "k.concat": (_k_same_as("concat"), ("axis", "dtype")),
    "k.pad": (_k_same_as("pad"), ("pads", "value", "dtype")),
    "k.collective": (_k_collective, ("kind", "axis", "degree", "dtype")),
}

# What a graph may hold once fusion is done (checked by `check_kernel_level`).
KERNEL_LEVEL_LEAVES = ("input", "constant", "scalar", "full", "arange")
KERNEL_LEVEL_VIEWS = ("reshape", "permute", "expand", "slice")


def check_kernel_level(graph: Graph) -> None:
    """Raise `IRError` if any node is neither a leaf, a view nor a ``k.*`` kernel."""
    allowed = set(KERNEL_LEVEL_LEAVES) | set(KERNEL_LEVEL_VIEWS) | set(KERNELS)
    stray = sorted({n.op for n in graph.nodes if n.op not in allowed})
    if stray:
        raise IRError(f"operators left unfused at kernel level: {', '.join(stray)}")


def _register() -> None:
    from trnsim.compiler.ops import register
    for name, (rule, attrs) in KERNELS.items():
        register(name, "kernel", rule, attrs)


_register()
