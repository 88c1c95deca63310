"""Vector, GpSimd and DMA kernel ops: element-wise programs, reductions, pooling, gathers,
scatters, top-k, concatenation, padding, and the collective of a tensor-parallel rank."""

from __future__ import annotations

import itertools

import numpy as np

from trnsim.compiler.errors import IRError
from trnsim.compiler.fused import check_program
from trnsim.compiler.kernel_ops.record import (
    KernelOp,
    broadcast,
    kernels,
    out_dtype,
    ref,
    run_program,
    same_as,
    to_callable,
)
from trnsim.errors import InvalidArgumentError


def _elementwise_shape(inputs, attrs, graph):
    check_program(tuple(attrs["program"]), len(inputs), has_acc=False)
    if not attrs["program"]:
        raise IRError("k.elementwise with an empty program")
    return broadcast(*(i.shape for i in inputs)), out_dtype(attrs)


def _elementwise_reference(node, args, graph):
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out = run_program(node.attrs["program"], args)
    return ref().store(np.broadcast_to(out, node.shape), node.dtype)


def _elementwise_lower(lowering, node, out):
    lowering.call(node, kernels().elementwise, out, [lowering.tile(n) for n in node.inputs],
                  program=to_callable(node.attrs["program"], has_acc=False))


ELEMENTWISE = KernelOp(
    "k.elementwise", ("program", "dtype"),
    _elementwise_shape, _elementwise_reference, _elementwise_lower, doc="""
operands (in0, in1, ...), broadcast together. attrs: program (a step `Program` whose steps read
``in<k>``), dtype. Kernel: ``elementwise(out, inputs, *, program)``: inputs broadcast to out;
``program(tiles) -> Tile`` computes one block from equally shaped 2-D blocks of the inputs.""")


def _reduce_shape(inputs, attrs, graph):
    from trnsim.compiler.ops import OPS

    check_program(tuple(attrs["prologue"]), len(inputs), has_acc=False)
    shape, _ = OPS[attrs["op"]].rule(list(inputs[:1]), attrs, graph)
    return shape, out_dtype(attrs)


def _reduce_reference(node, args, graph):
    a = node.attrs
    x = run_program(a["prologue"], args) if a["prologue"] else args[0]
    x = np.broadcast_to(x, args[0].shape)
    return ref().reduce(a["op"], x, a["axes"], a["keepdim"], node.dtype, a.get("correction", 1))


def _reduce_lower(lowering, node, out):
    a = node.attrs
    prologue = to_callable(a["prologue"], has_acc=False) if a["prologue"] else None
    lowering.call(node, kernels().reduce, out, lowering.tile(node.inputs[0]), op=a["op"],
                  axes=tuple(a["axes"]), keepdim=a["keepdim"], correction=a.get("correction"),
                  prologue=prologue)


REDUCE = KernelOp(
    "k.reduce", ("op", "axes", "keepdim", "prologue", "dtype"),
    _reduce_shape, _reduce_reference, _reduce_lower, doc="""
operand (x). attrs: op (sum | mean | amax | amin | prod | any | all | argmax | argmin | var),
axes, keepdim, correction (var), prologue (a step `Program` over ``in0`` applied first, or ()),
dtype. Kernel: ``reduce(out, x, *, op, axes, keepdim, correction=None, prologue=None)``: empty
`axes` reduces nothing (numpy's axis=()), except argmax/argmin, which then reduce everything.""")


def _pool2d_shape(inputs, attrs, graph):
    from trnsim.compiler.ops import conv_out

    x = inputs[0]
    if attrs["kind"] == "adaptive_avg":
        return (*x.shape[:-2], *attrs["output_size"]), out_dtype(attrs)
    hw = [conv_out(x.shape[-2 + i], attrs["kernel"][i], attrs["stride"][i], attrs["padding"][i],
                   attrs["dilation"][i], attrs["ceil_mode"]) for i in range(2)]
    return (*x.shape[:-2], *hw), out_dtype(attrs)


def _pool2d_reference(node, args, graph):
    interpret, a = ref(), node.attrs
    if a["kind"] == "adaptive_avg":
        return interpret.store(interpret.adaptive_avg_pool2d(args[0], a["output_size"]),
                               node.dtype)
    out = interpret.pool2d(args[0], a["kind"], a["kernel"], a["stride"], a["padding"],
                           a["dilation"], a["ceil_mode"], a.get("count_include_pad", True),
                           a.get("divisor_override"))
    return interpret.store(out, node.dtype)


_POOL_KEYS = ("kind", "kernel", "stride", "padding", "dilation", "ceil_mode", "count_include_pad",
              "divisor_override", "output_size")


def _pool2d_lower(lowering, node, out):
    a = node.attrs
    lowering.call(node, kernels().pool2d, out, lowering.tile(node.inputs[0]),
                  **{k: a[k] for k in _POOL_KEYS if k in a})


POOL2D = KernelOp(
    "k.pool2d", ("kind", "dtype"), _pool2d_shape, _pool2d_reference, _pool2d_lower, doc="""
operand (x[N,C,H,W]). attrs: kind ("max" | "avg" | "adaptive_avg"), kernel, stride, padding,
dilation, ceil_mode, count_include_pad, divisor_override, output_size, dtype. Kernel:
``pool2d(out, x, *, kind, kernel, stride, padding, dilation, ceil_mode, count_include_pad,
divisor_override, output_size)``.""")


def _gather_shape(inputs, attrs, graph):
    from trnsim.compiler.ops import OPS

    kind = attrs["kind"]
    if kind not in ("embedding", "gather", "index", "index_select"):
        raise IRError(f"k.gather kind {kind!r}")
    shape, _ = OPS[kind].rule(list(inputs), attrs, graph)
    return shape, out_dtype(attrs)


def _gather_reference(node, args, graph):
    interpret = ref()
    return interpret.store(interpret.EVAL[node.attrs["kind"]](node, args, graph), node.dtype)


def _gather_lower(lowering, node, out):
    view = lowering.constant_index_view(node)
    if view is not None:  # indices known at compile time and affine: a free view
        lowering.env[id(node)] = view
        return
    a, ins = node.attrs, node.inputs
    lowering.call(node, kernels().gather, out, lowering.tile(ins[0]),
                  *(lowering.tile(n) for n in ins[1:]), kind=a["kind"], axis=a.get("axis", 0),
                  dims=tuple(a.get("dims", ())))


GATHER = KernelOp(
    "k.gather", ("kind", "dtype"), _gather_shape, _gather_reference, _gather_lower, doc="""
operands (table, indices...). attrs: kind ("embedding": rows of a [V, D] table; "gather":
torch.gather along axis; "index": advanced indexing on dims; "index_select": along axis), axis,
dims, dtype. Kernel: ``gather(out, table, *indices, kind, axis=0, dims=())``: indices are
integer tensors known only at run time (indirect DMA / GpSimd gather); constant affine indices
lower to a strided view instead.""")


def _cumsum_lower(lowering, node, out):
    lowering.call(node, kernels().cumsum, out, lowering.tile(node.inputs[0]),
                  axis=node.attrs["axis"])


CUMSUM = KernelOp("k.cumsum", ("axis", "dtype"), *same_as("cumsum"), _cumsum_lower, doc="""
operand (x). attrs: axis, dtype. Kernel: ``cumsum(out, x, *, axis)``.""")


def _scatter_lower(lowering, node, out):
    x = node.inputs[0]
    # x filled with one value (a gradient's zeros): XLA fuses the fill into the scatter's
    # initialisation, so the kernel writes it from a memset tile rather than reading it
    fill = float(x.attrs["value"]) if x.op == "full" else None
    lowering.call(node, kernels().scatter, out, *(lowering.tile(n) for n in node.inputs),
                  accumulate=bool(node.attrs.get("accumulate", False)), fill=fill)


SCATTER = KernelOp("k.scatter", ("dtype", "accumulate"), *same_as("scatter"), _scatter_lower,
                   doc="""
operands (x, values, index). x with rows index[i] of axis 0 set to values[i] (values broadcast
to [*index.shape, *x.shape[1:]]; a repeated index keeps the last), or with `accumulate` added
to them (every repeat summed: an embedding's gradient). attrs: dtype, accumulate. Kernel:
``scatter(out, x, values, index, accumulate=, fill=)`` (indirect DMA writes, read-add-write
when accumulating; `fill` when x is a `full`: written from a memset tile, not read).""")


def _topk_lower(lowering, node, out):
    a = node.attrs
    lowering.call(node, kernels().topk, out, lowering.tile(node.inputs[0]), k=a["k"],
                  axis=a["axis"], largest=a["largest"], part=a["part"])


TOPK = KernelOp("k.topk", ("k", "axis", "largest", "part", "dtype"), *same_as("topk"),
                _topk_lower, doc="""
operand (x). The k largest (or smallest) along `axis`, best first, ties to the lower index;
`part` says which this node outputs. attrs: k, axis, largest, part ("values" | "indices"),
dtype. Kernel: ``topk(out, x, *, k, axis, largest=True, part="values")`` (indices as int32).""")


def _concat_lower(lowering, node, out):
    update = lowering.slot_update(node)
    if update is not None:
        base, key, src = update  # the rebuilt tensor is `base` with one part replaced
        source = lowering.tile(src)
        axis = node.attrs["axis"] % node.rank
        # one copy per index of the axes before the written one (a KV cache's batch and heads):
        # each writes one row of `base`, so reads of the other positions of those rows (the
        # cached keys a decode step attends to) depend only on the rows they share with it
        for lead in itertools.product(*(range(n) for n in node.shape[:axis])):
            lowering.call(node, kernels().copy, base[(*lead, *key[axis:])],
                          source[(*lead, *(slice(None),) * (node.rank - axis))])
        lowering.env[id(node)] = base
        return
    lowering.call(node, kernels().concat, out, [lowering.tile(n) for n in node.inputs],
                  axis=node.attrs["axis"])


CONCAT = KernelOp("k.concat", ("axis", "dtype"), *same_as("concat"), _concat_lower, doc="""
operands (x0, x1, ...). attrs: axis, dtype. Kernel: ``concat(out, inputs, *, axis)``; a concat
that rebuilds a tensor nothing else reads with one part replaced (a KV cache written at its
next position) lowers to a copy into that part instead.""")


def _pad_lower(lowering, node, out):
    a = node.attrs
    lowering.call(node, kernels().pad, out, lowering.tile(node.inputs[0]),
                  pads=tuple(map(tuple, a["pads"])), value=a["value"])


PAD = KernelOp("k.pad", ("pads", "value", "dtype"), *same_as("pad"), _pad_lower, doc="""
operand (x). attrs: pads ((before, after) per axis), value, dtype. Kernel:
``pad(out, x, *, pads, value)``.""")

COLLECTIVE_KINDS = ("all_gather", "all_reduce")


def _collective_shape(inputs, attrs, graph):
    x = inputs[0]
    kind, degree = attrs["kind"], attrs["degree"]
    if kind not in COLLECTIVE_KINDS or len(inputs) != 1 or degree < 2:
        raise IRError(f"k.collective {kind!r} over {degree} ranks with {len(inputs)} operands")
    if kind == "all_reduce":
        return x.shape, out_dtype(attrs)
    axis = attrs["axis"]
    if not 0 <= axis < x.rank:
        raise IRError(f"k.collective all_gather axis {axis} out of range for {x.shape}")
    return (*x.shape[:axis], x.shape[axis] * degree, *x.shape[axis + 1:]), out_dtype(attrs)


def _collective_reference(node, args, graph):
    """One rank alone has no value for it: `interpret.evaluate` runs every rank of a
    tensor-parallel graph and combines them itself."""
    raise InvalidArgumentError(f"{node!r} = k.collective combines the values of "
                               f"{node.attrs['degree']} ranks; evaluate() runs them all when the "
                               f"graph says graph.meta['tensor_parallel']")


def _collective_lower(lowering, node, out):
    a = node.attrs
    lowering.call(node, kernels().collective, out, lowering.tile(node.inputs[0]), kind=a["kind"],
                  axis=a["axis"], degree=a["degree"])


COLLECTIVE = KernelOp(
    "k.collective", ("kind", "axis", "degree", "dtype"), _collective_shape,
    _collective_reference, _collective_lower, doc="""
operand (x), this rank's value under tensor parallelism (the tensor_parallel pass). attrs: kind
("all_gather": concatenate the ranks' x along `axis`; "all_reduce": sum over the ranks), axis,
degree (ranks in the group), dtype. Its value depends on every rank: `interpret.evaluate`
combines the ranks. Kernel: ``collective(out, x, *, kind, axis, degree)`` (one
`CollectiveOp`, timed by the fabric).""")

OPS = (ELEMENTWISE, REDUCE, POOL2D, GATHER, CUMSUM, SCATTER, TOPK, CONCAT, PAD, COLLECTIVE)
