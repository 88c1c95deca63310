"""Kernel ops with fp32 statistics: ``k.attention``, ``k.softmax``, ``k.norm``."""

from __future__ import annotations

import numpy as np

from trnsim.compiler.errors import IRError
from trnsim.compiler.kernel_ops.record import F32, KernelOp, broadcast, kernels, load, out_dtype, ref

MASK_KINDS = ("none", "causal", "bias", "bool")


def _attention_shape(inputs, attrs, graph):
    q, k, v = inputs[:3]
    kd = k.shape[-2:][::-1] if attrs["k_transposed"] else k.shape[-2:]
    sq, sk, d, dv = attrs["sq"], attrs["sk"], attrs["d"], attrs["dv"]
    if q.shape[-2:] != (sq, d) or tuple(kd) != (sk, d) or v.shape[-2:] != (sk, dv):
        raise IRError(f"k.attention q {q.shape}, k {k.shape}, v {v.shape} do not fit "
                      f"sq={sq} sk={sk} d={d} dv={dv}")
    batch = broadcast(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    if tuple(attrs["batch"]) != batch:
        raise IRError(f"k.attention batch {attrs['batch']} != operands' {batch}")
    kind = attrs["mask_kind"]
    if kind not in MASK_KINDS:
        raise IRError(f"k.attention mask_kind {kind!r} not in {MASK_KINDS}")
    has_mask = kind in ("bias", "bool")
    if len(inputs) != 3 + has_mask:
        raise IRError(f"k.attention mask_kind {kind!r} with {len(inputs)} operands")
    if has_mask:
        broadcast(inputs[3].shape, (*batch, sq, sk))
    return (*batch, sq, dv), out_dtype(attrs)


def _attention_reference(node, args, graph):
    interpret, a = ref(), node.attrs
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
        s = s + interpret.compute(args[3], True)
    if keep is not None:
        s = np.where(keep, s, -np.inf)
    p = np.nan_to_num(interpret.softmax(s, -1), nan=0.0)
    return interpret.store(np.matmul(load(p, cd), v), node.dtype)


def _attention_lower(lowering, node, out):
    a, ins = node.attrs, node.inputs
    mask = lowering.tile(ins[3]) if len(ins) > 3 else None
    lowering.call(node, kernels().attention, out, *(lowering.tile(n) for n in ins[:3]),
                  scale=a["scale"], mask=mask, mask_kind=a["mask_kind"],
                  k_transposed=a["k_transposed"], compute_dtype=a["compute_dtype"])


ATTENTION = KernelOp(
    "k.attention", ("scale", "mask_kind", "k_transposed", "batch", "sq", "sk", "d", "dv",
                    "compute_dtype", "dtype"),
    _attention_shape, _attention_reference, _attention_lower, doc="""
operands (q[*b, sq, d], k[*b, sk, d] (or [*b, d, sk] if k_transposed), v[*b, sk, dv][, mask]).
out = softmax(q k^T * scale + mask) v with the softmax in fp32. attrs: scale, mask_kind ("none"
| "causal" (lower-triangular, no operand) | "bias" (additive float operand broadcastable to
[*b, sq, sk]) | "bool" (True keeps)), k_transposed, batch, sq, sk, d, dv, compute_dtype, dtype.
Kernel: ``attention(out, q, k, v, *, scale, mask=None, mask_kind="none", k_transposed=False,
compute_dtype="bfloat16")``; the last batch axis is read as heads. Head dim <= 128, keys <= 2048.""")


def _softmax_shape(inputs, attrs, graph):
    x = inputs[0]
    if not 0 <= attrs["axis"] < x.rank:
        raise IRError(f"k.softmax axis {attrs['axis']} out of range for {x.shape}")
    if (attrs["mask_kind"] == "bias") != (len(inputs) == 2):
        raise IRError("k.softmax mask operand and mask_kind disagree")
    if len(inputs) == 2 and broadcast(x.shape, inputs[1].shape) != x.shape:
        raise IRError(f"k.softmax mask {inputs[1].shape} does not broadcast to {x.shape}")
    return x.shape, out_dtype(attrs)


def _softmax_reference(node, args, graph):
    interpret, a = ref(), node.attrs
    x = interpret.compute(args[0], True)
    if a["scale"] != 1.0:
        x = x * F32(a["scale"])
    if a["mask_kind"] == "bias":
        x = x + interpret.compute(args[1], True)
    return interpret.store(interpret.softmax(x, a["axis"], a["log"], bool(a.get("safe", False))),
                           node.dtype)


def _softmax_lower(lowering, node, out):
    a, ins = node.attrs, node.inputs
    mask = lowering.tile(ins[1]) if len(ins) > 1 else None
    lowering.call(node, kernels().softmax, out, lowering.tile(ins[0]), axis=a["axis"],
                  scale=a["scale"], log=a["log"], mask=mask, safe=bool(a.get("safe", False)))


SOFTMAX = KernelOp(
    "k.softmax", ("axis", "scale", "log", "mask_kind", "dtype"),
    _softmax_shape, _softmax_reference, _softmax_lower, doc="""
operands (x[, mask]). softmax (or log_softmax if log) over `axis` of x * scale (+ mask).
attrs: axis (normalised), scale, log, mask_kind ("none" | "bias"), dtype; optional safe (rows
that are all -inf give zeros, as PyTorch's `_safe_softmax`).
Kernel: ``softmax(out, x, *, axis, scale=1.0, log=False, mask=None, safe=False)``.""")


def _norm_shape(inputs, attrs, graph):
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
    return x.shape, out_dtype(attrs)


def _norm_reference(node, args, graph):
    interpret, a = ref(), node.attrs
    x = interpret.compute(args[0], True)
    i = 1
    if a["residual"]:
        x = x + interpret.compute(args[1], True)
        i = 2
    w = args[i] if a["weight"] else None
    b = args[i + int(a["weight"])] if a["bias"] else None
    out = interpret.layer_norm(x, a["normalized"], a["eps"], w, b, rms=a["kind"] == "rms")
    return interpret.store(out, node.dtype)


def _norm_lower(lowering, node, out):
    a, ins = node.attrs, node.inputs
    rest = iter(ins[1:])
    residual = lowering.tile(next(rest)) if a["residual"] else None
    weight = lowering.tile(next(rest)) if a["weight"] else None
    bias = lowering.tile(next(rest)) if a["bias"] else None
    lowering.call(node, kernels().norm, out, lowering.tile(ins[0]), kind=a["kind"],
                  normalized=a["normalized"], eps=a["eps"], residual=residual, weight=weight,
                  bias=bias)


NORM = KernelOp(
    "k.norm", ("kind", "normalized", "eps", "residual", "weight", "bias", "dtype"),
    _norm_shape, _norm_reference, _norm_lower, doc="""
operands (x[, residual][, weight][, bias]). y = norm(x (+ residual)) (* weight) (+ bias) over
the trailing `normalized` axes; statistics in fp32. attrs: kind ("layer" | "rms"), normalized,
eps, residual, weight, bias (bools: which operands are present), dtype.
Kernel: ``norm(out, x, *, kind="layer"|"rms", normalized=1, eps, residual=None, weight=None,
bias=None)``.""")

OPS = (ATTENTION, SOFTMAX, NORM)
