"""Reference semantics of the kernel-level (``k.*``) operators of `trnsim.compiler.fused`.

These say what each kernel of the library must compute, including where it rounds: matmul and
conv operands are cast (RNE) to ``compute_dtype`` on load, products accumulate in fp32 (PSUM),
epilogues and softmax/norm statistics run in fp32 (the engines' arithmetic), and only the final
value is rounded to the node's dtype. Attention casts its probabilities to ``compute_dtype``
before the second matmul, as a bf16 attention kernel does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from trnsim.compiler import interpret as ref
from trnsim.compiler.fused import Program
from trnsim.compiler.ir import Graph, Node
from trnsim.numerics import cast, dtype

F32 = np.float32


def run_program(program: Program, operands: Sequence[np.ndarray], acc: np.ndarray | None = None
                ) -> np.ndarray:
    """Evaluate a fused elementwise program; float intermediates stay fp32 (engine precision)."""
    results: list[np.ndarray] = []
    value = acc
    for step in program:
        args = [_arg(a, operands, results, acc) for a in step.args]
        out = dtype(step.dtype)
        keep = dtype("float32") if out.is_float else out
        value = ref.elementwise(step.op, args, dict(step.attrs), keep)
        results.append(value)
    assert value is not None, "an empty program reads nothing"
    return value


def _arg(a: Any, operands: Sequence[np.ndarray], results: list[np.ndarray],
         acc: np.ndarray | None) -> np.ndarray:
    if isinstance(a, str):
        if a == "acc":
            assert acc is not None
            return acc
        if a.startswith("in"):
            return operands[int(a[2:])]
        return results[int(a[1:])]
    if isinstance(a, bool):
        return np.asarray(a)
    if isinstance(a, int):
        return np.asarray(a, np.int64)
    return np.asarray(a, F32)


def load(x: np.ndarray, compute_dtype: str) -> np.ndarray:
    """An operand as TensorE reads it: rounded (RNE) to compute_dtype, values in fp32."""
    v = ref.compute(x, True)
    if compute_dtype == "float32":
        return v
    return ref.compute(np.asarray(cast(v, compute_dtype, rounding="rne")), True)


def _k_matmul(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    a = node.attrs
    x, y = load(args[0], a["compute_dtype"]), load(args[1], a["compute_dtype"])
    if a["transpose_a"]:
        x = np.swapaxes(x, -1, -2)
    if a["transpose_b"]:
        y = np.swapaxes(y, -1, -2)
    acc = np.matmul(x, y).astype(F32)
    if a["bias"]:
        acc = acc + ref.compute(args[2], True)
    if a["epilogue"]:
        acc = run_program(a["epilogue"], args, acc)
    return ref.store(acc, node.dtype)


def _k_conv2d(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    a = node.attrs
    x, w = load(args[0], a["compute_dtype"]), load(args[1], a["compute_dtype"])
    acc = ref.conv2d(x, w, a["stride"], a["padding"], a["dilation"], a["groups"])
    if a["bias"]:
        acc = acc + ref.compute(args[2], True)[:, None, None]
    if a["epilogue"]:
        acc = run_program(a["epilogue"], args, acc)
    return ref.store(acc, node.dtype)


def _k_attention(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    a = node.attrs
    cd = a["compute_dtype"]
    q, k, v = (load(t, cd) for t in args[:3])
    kt = k if a["k_transposed"] else np.swapaxes(k, -1, -2)
    s = np.matmul(q, kt).astype(F32) * F32(a["scale"])
    keep = None
    if a["mask_kind"] == "causal":
        sq, sk = s.shape[-2:]
        keep = np.tril(np.ones((sq, sk), bool))  # top-left aligned, as torch's is_causal
    elif a["mask_kind"] == "bool":
        keep = args[3].astype(bool)
    elif a["mask_kind"] == "bias":
        s = s + ref.compute(args[3], True)
    if keep is not None:
        s = np.where(keep, s, -np.inf)
    p = np.nan_to_num(ref.softmax(s, -1), nan=0.0)
    return ref.store(np.matmul(load(p, cd), v), node.dtype)


def _k_softmax(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    a = node.attrs
    x = ref.compute(args[0], True)
    if a["scale"] != 1.0:
        x = x * F32(a["scale"])
    if a["mask_kind"] == "bias":
        x = x + ref.compute(args[1], True)
    return ref.store(ref.softmax(x, a["axis"], a["log"]), node.dtype)


def _k_norm(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    a = node.attrs
    x = ref.compute(args[0], True)
    i = 1
    if a["residual"]:
        x = x + ref.compute(args[1], True)
        i = 2
    w = args[i] if a["weight"] else None
    b = args[i + int(a["weight"])] if a["bias"] else None
    out = ref.layer_norm(x, a["normalized"], a["eps"], w, b, rms=a["kind"] == "rms")
    return ref.store(out, node.dtype)


def _k_pool2d(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    a = node.attrs
    if a["kind"] == "adaptive_avg":
        return ref.store(ref.adaptive_avg_pool2d(args[0], a["output_size"]), node.dtype)
    out = ref.pool2d(args[0], a["kind"], a["kernel"], a["stride"], a["padding"], a["dilation"],
                     a["ceil_mode"], a.get("count_include_pad", True), a.get("divisor_override"))
    return ref.store(out, node.dtype)


def _k_gather(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    return ref.store(ref.EVAL[node.attrs["kind"]](node, args, graph), node.dtype)


def _k_elementwise(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out = run_program(node.attrs["program"], args)
    return ref.store(np.broadcast_to(out, node.shape), node.dtype)


def _k_reduce(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
    a = node.attrs
    x = run_program(a["prologue"], args) if a["prologue"] else args[0]
    x = np.broadcast_to(x, args[0].shape)
    return ref.reduce(a["op"], x, a["axes"], a["keepdim"], node.dtype, a.get("correction", 1))


def _same_as(op: str):
    def run(node: Node, args: list[np.ndarray], graph: Graph) -> np.ndarray:
        return ref.store(ref.EVAL[op](node, args, graph), node.dtype)
    return run


ref.EVAL.update({
    "k.matmul": _k_matmul, "k.conv2d": _k_conv2d, "k.attention": _k_attention,
    "k.softmax": _k_softmax, "k.norm": _k_norm, "k.pool2d": _k_pool2d, "k.gather": _k_gather,
    "k.elementwise": _k_elementwise, "k.reduce": _k_reduce, "k.cumsum": _same_as("cumsum"),
    "k.topk": _same_as("topk"), "k.scatter": _same_as("scatter"),
    "k.concat": _same_as("concat"), "k.pad": _same_as("pad"),
})
