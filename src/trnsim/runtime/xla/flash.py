"""Scaled dot-product attention on the lazy device as NeuronX Distributed trains it: one fused
flash-attention forward and one fused backward, never the [sq, sk] scores.

NxD's training models call the NKI flash-attention kernels through a custom autograd function
(forward saves the row logsumexp, backward recomputes the probabilities block by block). Here
`F.scaled_dot_product_attention` on a lazy tensor is that function: a kernel registered for
PyTorch's AutogradPrivateUse1 key (the lazy device's autograd key) records two ops,
``trnsim::flash_attention`` (out, lse) and ``trnsim::flash_attention_backward`` (dq, dk, dv),
which the compiler lowers to trnsim's flash-attention kernels (`trnsim.kernels.flash_attention`).

When: always when the call matches what the fused kernels compute: no mask or the causal one,
no dropout, a head dim of at most 128 and self-attention lengths (sq == sk); grouped K/V
(`enable_gqa`) is repeated to the query heads first, as Hugging Face's `repeat_kv` does. The
fused kernels never read or write more HBM than the composite (which writes the scores and
probabilities and reads them back, 2-3 passes of sq * sk elements per head each way), so there
is no length below which the composite is the better choice to model. Any other call (a padding
mask, attention dropout, cross-attention) takes PyTorch's math composite as before: matmul,
softmax and their backward as separate kernels.

The values computed on the host are this module's fp32 reference (`_forward`, `_backward`),
rounded to the operands' dtype as the device writes them; the log-sum-exp is kept as two
parts ([..., 2], hi + lo), as the kernels store it.
"""

from __future__ import annotations

import torch

from trnsim.kernels.layout import P as MAX_HEAD_DIM  # the kernels contract d in one partition tile

_LIBRARY = None


def _scores(q: torch.Tensor, k: torch.Tensor, scale: float, causal: bool) -> torch.Tensor:
    s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    if causal:
        sq, sk = s.shape[-2:]
        keep = torch.ones(sq, sk, dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return s


def _forward(q, k, v, scale: float, causal: bool):
    """(out, lse as [..., 2] parts hi + lo): hi is lse rounded to bf16 and lo the exact rest,
    so the parts keep about 16 significant bits even where the device stores them as bf16."""
    s = _scores(q, k, scale, causal)
    lse = torch.logsumexp(s, dim=-1, keepdim=True)
    out = torch.matmul(torch.exp(s - lse), v.float())
    hi = lse.to(torch.bfloat16).float()
    return out.to(q.dtype), torch.cat([hi, lse - hi], dim=-1)


def _backward(grad, q, k, v, out, lse, scale: float, causal: bool):
    p = torch.exp(_scores(q, k, scale, causal) - lse.float().sum(-1, keepdim=True))
    g = grad.float()
    dv = torch.matmul(p.transpose(-1, -2), g)
    dp = torch.matmul(g, v.float().transpose(-1, -2))
    row = (g * out.float()).sum(-1, keepdim=True)
    ds = p * (dp - row)
    dq = torch.matmul(ds, k.float()) * scale
    dk = torch.matmul(ds.transpose(-1, -2), q.float()) * scale
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def fused_applies(q, k, v, attn_mask, dropout_p: float) -> bool:
    """Whether this call is one the fused kernels compute (module docstring)."""
    return (attn_mask is None and dropout_p == 0.0 and q.dim() >= 3
            and q.shape[:-1] == k.shape[:-1] == v.shape[:-1] and q.shape[-1] == k.shape[-1]
            and v.shape[-1] == q.shape[-1] and q.shape[-1] <= MAX_HEAD_DIM
            and q.is_floating_point())


def register() -> None:
    """Define the two ops and route lazy tensors' SDPA through them (once per process)."""
    global _LIBRARY
    if _LIBRARY is not None:
        return
    _LIBRARY = torch.library.Library("trnsim", "DEF")
    _LIBRARY.define("flash_attention(Tensor q, Tensor k, Tensor v, float scale, bool causal) "
                    "-> (Tensor, Tensor)")
    _LIBRARY.define("flash_attention_backward(Tensor grad, Tensor q, Tensor k, Tensor v, "
                    "Tensor out, Tensor lse, float scale, bool causal) -> (Tensor, Tensor, Tensor)")
    for key in ("CPU", "Meta"):
        _LIBRARY.impl("flash_attention", _forward, key)
        _LIBRARY.impl("flash_attention_backward", _backward, key)
    _LIBRARY.impl("flash_attention", _autograd_forward, "Autograd")
    aten_impl = torch.library.Library("aten", "IMPL")
    aten_impl.impl("scaled_dot_product_attention", _sdpa, "AutogradPrivateUse1")
    _LIBRARY.aten_impl = aten_impl  # keep the registration alive


class _Flash(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, scale: float, causal: bool):
        with torch._C._AutoDispatchBelowAutograd():
            out, lse = torch.ops.trnsim.flash_attention(q, k, v, scale, causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.scale, ctx.causal = scale, causal
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad, _grad_lse):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = torch.ops.trnsim.flash_attention_backward(
            grad, q, k, v, out, lse, ctx.scale, ctx.causal)
        return dq, dk, dv, None, None


def _autograd_forward(q, k, v, scale: float, causal: bool):
    return _Flash.apply(q, k, v, scale, causal)


def _sdpa(query, key, value, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False,
          *, scale: float | None = None, enable_gqa: bool = False):
    if enable_gqa and query.dim() >= 3 and key.dim() == query.dim() \
            and key.shape[-3] != query.shape[-3] and query.shape[-3] % key.shape[-3] == 0:
        # grouped K/V: each K/V head repeated for its query heads, as Hugging Face's repeat_kv
        # spells it (the gradients of the copies are summed by repeat_interleave's backward)
        groups = query.shape[-3] // key.shape[-3]
        key, value = (t.repeat_interleave(groups, dim=-3) for t in (key, value))
    if not fused_applies(query, key, value, attn_mask, dropout_p):
        return torch.ops.aten._scaled_dot_product_attention_math(
            query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale,
            enable_gqa=enable_gqa)[0]
    scale = float(scale) if scale is not None else query.shape[-1] ** -0.5
    return torch.ops.trnsim.flash_attention(query, key, value, scale, bool(is_causal))[0]
