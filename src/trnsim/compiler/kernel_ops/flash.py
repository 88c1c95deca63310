"""Training attention: ``k.flash_attention`` (out and row log-sum-exp) and its fused backward.

Emitted by the lazy device's translation of ``trnsim::flash_attention`` and
``trnsim::flash_attention_backward`` (`trnsim.runtime.xla.flash` says when SDPA takes them). IR
nodes have one output, so each packs its results: the forward [*b, s, d + 2] (out, then the
log-sum-exp as hi and lo parts in the node's dtype), the backward [3, *outer, s, heads, d] (dq,
dk, dv with a row of every head adjacent, as the projections that read them lay rows out); the
translation slices and permutes them apart (free views).
"""

from __future__ import annotations

import numpy as np

from trnsim.compiler.errors import IRError
from trnsim.compiler.kernel_ops.record import F32, KernelOp, kernels, load, out_dtype, ref

ATTRS = ("scale", "causal", "compute_dtype", "dtype")


def _same(name: str, inputs) -> tuple[int, ...]:
    shape = inputs[0].shape
    if len(shape) < 2 or any(t.shape != shape for t in inputs):
        raise IRError(f"{name} operands {[t.shape for t in inputs]} are not one [*b, s, d] shape")
    return shape


def _probabilities(q, k, scale: float, causal: bool, lse=None):
    s = np.matmul(q, np.swapaxes(k, -1, -2)).astype(F32) * F32(scale)
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    if lse is None:
        top = s.max(-1, keepdims=True)
        lse = (top + np.log(np.exp(s - top).sum(-1, keepdims=True))).astype(F32)
    return np.exp(s - lse).astype(F32), lse


def _split_lse(interpret, lse, dtype):
    hi = interpret.store(lse, dtype)
    lo = interpret.store(lse - interpret.compute(hi, True), dtype)
    return hi, lo


def _forward_shape(inputs, attrs, graph):
    shape = _same("k.flash_attention", inputs)
    return (*shape[:-1], shape[-1] + 2), out_dtype(attrs)


def _forward_reference(node, args, graph):
    interpret, a = ref(), node.attrs
    cd = a["compute_dtype"]
    q, k, v = (load(t, cd) for t in args)
    p, lse = _probabilities(q, k, a["scale"], a["causal"])
    out = interpret.store(np.matmul(load(p, cd), v), node.dtype)
    hi, lo = _split_lse(interpret, lse, node.dtype)
    return np.concatenate([out, hi, lo], axis=-1)


def _forward_lower(lowering, node, out):
    a = node.attrs
    lowering.call(node, kernels().flash_attention_packed, out,
                  *(lowering.tile(n) for n in node.inputs), scale=a["scale"], causal=a["causal"],
                  compute_dtype=a["compute_dtype"])


def _backward_shape(inputs, attrs, graph):
    grad, q, k, v, o, lse = inputs
    shape = _same("k.flash_attention_backward", [grad, q, k, v, o])
    if lse.shape != (*shape[:-1], 2):
        raise IRError(f"k.flash_attention_backward lse {lse.shape} != {(*shape[:-1], 2)}")
    return (3, *rows_outside_heads(shape)), out_dtype(attrs)


def rows_outside_heads(shape: tuple[int, ...]) -> tuple[int, ...]:
    """[*outer, heads, s, d] -> [*outer, s, heads, d] (the backward's output layout)."""
    return shape if len(shape) < 3 else (*shape[:-3], shape[-2], shape[-3], shape[-1])


def _backward_reference(node, args, graph):
    interpret, a = ref(), node.attrs
    cd = a["compute_dtype"]
    grad, q, k, v, o = (load(t, cd) for t in args[:5])
    lse = interpret.compute(args[5], True).sum(-1, keepdims=True)
    p, _ = _probabilities(q, k, a["scale"], a["causal"], lse)
    dv = np.matmul(np.swapaxes(load(p, cd), -1, -2), grad)
    row = (grad * o).sum(-1, keepdims=True)
    ds = load(p * (np.matmul(grad, np.swapaxes(v, -1, -2)) - row), cd)
    dq = np.matmul(ds, k) * F32(a["scale"])
    dk = np.matmul(np.swapaxes(ds, -1, -2), q) * F32(a["scale"])
    grads = [interpret.store(t, node.dtype) for t in (dq, dk, dv)]
    return np.stack([np.swapaxes(t, -3, -2) if t.ndim >= 3 else t for t in grads])


def _backward_lower(lowering, node, out):
    a = node.attrs
    lowering.call(node, kernels().flash_attention_backward_packed, out,
                  *(lowering.tile(n) for n in node.inputs), scale=a["scale"],
                  causal=a["causal"], compute_dtype=a["compute_dtype"])


FLASH_ATTENTION = KernelOp(
    "k.flash_attention", ATTRS, _forward_shape, _forward_reference, _forward_lower, doc="""
operands (q, k, v: [*b, s, d]). out[..., :d] = softmax(scale * q k^T [causal]) v (fp32 softmax,
P in compute_dtype before P @ V); out[..., d], out[..., d + 1] = the rows' log-sum-exp of the
scaled scores as hi + lo. attrs: scale, causal, compute_dtype, dtype.
Kernel: ``flash_attention_packed(out, q, k, v, *, scale, causal, compute_dtype)``.""")

FLASH_ATTENTION_BACKWARD = KernelOp(
    "k.flash_attention_backward", ATTRS, _backward_shape, _backward_reference, _backward_lower,
    doc="""
operands (grad, q, k, v, out: [*b, s, d]; lse: [*b, s, 2] as hi, lo). With P rebuilt from lse:
out[0] = dq = scale * dS k, out[1] = dk = scale * dS^T q, out[2] = dv = P^T grad, where
dS = P * (grad v^T - rowsum(grad * out)), each as [*outer, s, heads, d] (axes -3, -2 swapped).
attrs: scale, causal, compute_dtype, dtype.
Kernel: ``flash_attention_backward_packed(out, grad, q, k, v, o, lse, *, scale, causal,
compute_dtype)``.""")

OPS = (FLASH_ATTENTION, FLASH_ATTENTION_BACKWARD)
