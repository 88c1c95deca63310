"""TensorE kernel ops: ``k.matmul`` and ``k.conv2d`` (fp32 accumulation, fused epilogues).

Common attributes: ``compute_dtype`` (the dtype TensorE reads operands in: auto-cast may make it
"bfloat16" while the operands are fp32 in HBM; the kernel casts (RNE) on load),
``accumulate_dtype`` ("float32"), ``epilogue`` (a fused step `Program` applied to the result
before it is written, at PSUM eviction: steps read ``acc``, the fp32 accumulator, and ``in<k>``,
operand k of the node; the last step's value is written, cast to ``dtype``).
"""

from __future__ import annotations

import numpy as np

from trnsim.compiler.errors import IRError
from trnsim.compiler.kernel_ops.record import (
    F32,
    KernelOp,
    broadcast,
    epilogue_shape,
    kernels,
    load,
    out_dtype,
    ref,
    run_program,
)


def _matmul_shape(inputs, attrs, graph):
    a, b = inputs[:2]
    m, k, n = attrs["m"], attrs["k"], attrs["n"]
    ak = a.shape[-2:] if not attrs["transpose_a"] else a.shape[-2:][::-1]
    bk = b.shape[-2:] if not attrs["transpose_b"] else b.shape[-2:][::-1]
    if tuple(ak) != (m, k) or tuple(bk) != (k, n):
        raise IRError(f"k.matmul operands {a.shape}, {b.shape} (transposed {attrs['transpose_a']},"
                      f" {attrs['transpose_b']}) do not give [{m}, {k}] @ [{k}, {n}]")
    batch = broadcast(a.shape[:-2], b.shape[:-2])
    if tuple(attrs["batch"]) != batch:
        raise IRError(f"k.matmul batch {attrs['batch']} != operands' {batch}")
    first = 2
    if attrs["bias"]:
        if inputs[2].shape != (n,):
            raise IRError(f"k.matmul bias {inputs[2].shape} != ({n},)")
        first = 3
    out = epilogue_shape((*batch, m, n), inputs[first:], attrs, len(inputs))
    return out, out_dtype(attrs)


def _matmul_reference(node, args, graph):
    interpret, a = ref(), node.attrs
    x, y = load(args[0], a["compute_dtype"]), load(args[1], a["compute_dtype"])
    if a["transpose_a"]:
        x = np.swapaxes(x, -1, -2)
    if a["transpose_b"]:
        y = np.swapaxes(y, -1, -2)
    acc = np.matmul(x, y).astype(F32)
    if a["bias"]:
        acc = acc + interpret.compute(args[2], True)
    if a["epilogue"]:
        acc = run_program(a["epilogue"], args, acc)
    return interpret.store(acc, node.dtype)


def _matmul_lower(lowering, node, out):
    a, ins = node.attrs, node.inputs
    first = 3 if a["bias"] else 2
    b_node, transpose_b = ins[1], a["transpose_b"]
    if a.get("weight_layout") == "kn" and transpose_b and b_node.op == "constant":
        b, transpose_b = lowering.weight_kn(b_node), False
    else:
        b = lowering.tile(b_node)
    lowering.call(node, kernels().matmul, out, lowering.tile(ins[0]), b,
                  bias=lowering.tile(ins[2]) if a["bias"] else None,
                  extras=[lowering.tile(n) for n in ins[first:]], transpose_a=a["transpose_a"],
                  transpose_b=transpose_b, compute_dtype=a["compute_dtype"],
                  stationary=a["stationary"], epilogue=lowering.epilogue(a, first))


MATMUL = KernelOp(
    "k.matmul", ("m", "k", "n", "batch", "transpose_a", "transpose_b", "bias", "stationary",
                 "compute_dtype", "epilogue", "dtype"),
    _matmul_shape, _matmul_reference, _matmul_lower, doc="""
operands (a, b[, bias][, extra...]). acc[*batch, m, n] = sum_k A[.., m, k] B[.., k, n] where
A = a, or a^T if transpose_a (a stored [.., k, m]); B = b, or b^T if transpose_b (b stored
[.., n, k], e.g. an nn.Linear weight). Batch dims broadcast. attrs: m, k, n, batch, transpose_a,
transpose_b, bias (bool: operand 2 is a [n] vector added to acc before the epilogue), stationary
("a" | "b": the operand TensorE holds as stationary; the other streams as moving),
weight_layout ("kn" | "nk" | None: how a constant b is pre-laid out in HBM at load),
compute_dtype, accumulate_dtype, epilogue, dtype.
Kernel: ``matmul(out, a, b, *, bias=None, extras=(), transpose_a=False, transpose_b=False,
compute_dtype="bfloat16", stationary="a", epilogue=None)``; "b" stationary is honoured for
m <= 512 (out^T is computed and transposed back); for larger m both orientations cost the same
matmul cycles and "a" is used. `extras` are HBM tensors broadcastable to out.""")


def _conv2d_shape(inputs, attrs, graph):
    from trnsim.compiler.ops import conv_out

    x, w = inputs[:2]
    if x.rank != 4 or w.rank != 4 or x.shape[1] != w.shape[1] * attrs["groups"]:
        raise IRError(f"k.conv2d operands {x.shape}, {w.shape} (groups {attrs['groups']})")
    hw = [conv_out(x.shape[2 + i], w.shape[2 + i], attrs["stride"][i], attrs["padding"][i],
                   attrs["dilation"][i]) for i in range(2)]
    first = 3 if attrs["bias"] else 2
    if attrs["bias"] and inputs[2].shape != (w.shape[0],):
        raise IRError(f"k.conv2d bias {inputs[2].shape} != ({w.shape[0]},)")
    out = epilogue_shape((x.shape[0], w.shape[0], *hw), inputs[first:], attrs, len(inputs))
    return out, out_dtype(attrs)


def _conv2d_reference(node, args, graph):
    interpret, a = ref(), node.attrs
    x, w = load(args[0], a["compute_dtype"]), load(args[1], a["compute_dtype"])
    acc = interpret.conv2d(x, w, a["stride"], a["padding"], a["dilation"], a["groups"])
    if a["bias"]:
        acc = acc + interpret.compute(args[2], True)[:, None, None]
    if a["epilogue"]:
        acc = run_program(a["epilogue"], args, acc)
    return interpret.store(acc, node.dtype)


def _conv2d_lower(lowering, node, out):
    a, ins = node.attrs, node.inputs
    first = 3 if a["bias"] else 2
    lowering.call(node, kernels().conv2d, out, lowering.tile(ins[0]), lowering.tile(ins[1]),
                  bias=lowering.tile(ins[2]) if a["bias"] else None,
                  extras=[lowering.tile(n) for n in ins[first:]], stride=tuple(a["stride"]),
                  padding=tuple(a["padding"]), dilation=tuple(a["dilation"]),
                  groups=a["groups"], compute_dtype=a["compute_dtype"],
                  epilogue=lowering.epilogue(a, first))


CONV2D = KernelOp(
    "k.conv2d", ("stride", "padding", "dilation", "groups", "bias", "compute_dtype", "epilogue",
                 "dtype"),
    _conv2d_shape, _conv2d_reference, _conv2d_lower, doc="""
operands (x[N,C,H,W], w[O,C/g,kh,kw][, bias[O]][, extra...]). attrs: stride, padding, dilation,
groups, bias, folded_bn (bool: batch norm folded into w and bias at compile time),
compute_dtype, accumulate_dtype, epilogue, dtype.
Kernel: ``conv2d(out, x, w, *, bias=None, extras=(), stride, padding, dilation, groups,
compute_dtype, epilogue=None)``: NCHW / OIHW; output rows up to 512 columns.""")

OPS = (MATMUL, CONV2D)
