"""Flash attention's forward (out and row log-sum-exp) and fused backward against torch.autograd."""

import numpy as np
import pytest
import torch

from tests.kernels.conftest import as_dtype
from tests.kernels.harness import ArraySpec, run
from trnsim.errors import LimitExceededError
from trnsim.kernels.flash_attention import (
    flash_attention_backward_packed as _backward_packed,
)
from trnsim.kernels.flash_attention import flash_attention_packed as _forward_packed


def _autograd(q, k, v, grad, scale, causal):
    tq, tk, tv = (torch.tensor(np.asarray(t, np.float64), requires_grad=True) for t in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal,
                                                           scale=scale)
    s = (tq @ tk.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    lse = torch.logsumexp(s, -1)
    out.backward(torch.tensor(np.asarray(grad, np.float64)))
    return (out.detach().numpy(), lse.detach().numpy(),
            *(t.grad.numpy() for t in (tq, tk, tv)))


def _close(got, want, rtol):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    scale = max(1e-6, float(np.abs(want).max()))
    err = float(np.abs(got - want).max())
    assert err <= rtol * scale, f"max error {err:.3g} > {rtol:g} x {scale:.3g}"


CASES = [  # batch (last axis: heads), seq, head dim, causal, dtype
    ((1, 2), 128, 64, False, "float32"),
    ((1, 2), 256, 64, True, "float32"),
    ((2, 3), 200, 32, True, "float32"),  # a ragged last block
    ((1, 4), 384, 128, True, "bfloat16"),
    ((1, 2), 256, 64, False, "bfloat16"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-s{c[1]}-d{c[2]}-"
                         f"{'causal' if c[3] else 'full'}-{c[4]}")
def test_flash_attention_gradients_match_autograd(rng, case):
    batch, s, d, causal, dtype = case
    scale = d ** -0.5
    q, k, v, grad = (as_dtype(rng.standard_normal((*batch, s, d)), dtype) for _ in range(4))
    out, lse, dq, dk, dv = _autograd(q, k, v, grad, scale, causal)
    fwd = run(_forward_packed, [q, k, v], (*batch, s, d + 2), dtype, scale=scale, causal=causal,
              compute_dtype=dtype).output.astype(np.float32)
    # fp32: the engines' fp32 arithmetic; bf16: operands and P rounded to bf16 (2^-8)
    tight = dtype == "float32"
    _close(fwd[..., 0:d], out, 1e-4 if tight else 2e-2)
    _close(fwd[..., d] + fwd[..., d + 1], lse, 1e-5 if tight else 1e-3)
    packed = run(_backward_packed, [grad, q, k, v, as_dtype(out, dtype),
                                    as_dtype(fwd[..., d:d + 2], dtype)],
                 (3, *batch[:-1], s, batch[-1], d), dtype, scale=scale, causal=causal,
                 compute_dtype=dtype).output.astype(np.float32)
    for got, want in zip(packed, (dq, dk, dv), strict=True):  # rows stored outside heads
        got = np.swapaxes(got, -3, -2)
        _close(got, want, 1e-4 if tight else 4e-2)


def test_flash_backward_skips_masked_blocks():
    """Causal: the key blocks after a query block are never computed (about half the work)."""
    def matmuls(causal):
        rng = np.random.default_rng(1)
        ins = [rng.standard_normal((1, 1, 512, 64)).astype(np.float32) for _ in range(5)]
        lse = np.zeros((1, 1, 512, 2), np.float32)
        result = run(_backward_packed, [*ins, lse], (3, 1, 512, 1, 64), "float32",
                     scale=0.125, causal=causal, compute_dtype="bfloat16", mode="timing")
        return sum(1 for i in result.program.instructions if i.OPCODE == "MultiplyMoving")

    full, causal = matmuls(False), matmuls(True)
    # 4 x 4 blocks of 5 matmuls (S, dV, dP, dK, dQ) and the transposes; causal keeps 10 blocks
    assert causal < 0.75 * full


def test_flash_backward_refuses_sequences_whose_query_side_overflows_sbuf():
    spec = ArraySpec((1, 1, 65536, 128), "bfloat16")
    with pytest.raises(LimitExceededError, match="query side"):
        run(_backward_packed, [spec] * 5 + [ArraySpec((1, 1, 65536, 2), "bfloat16")],
            (3, 1, 65536, 1, 128), "bfloat16", scale=0.1, causal=True, mode="timing")
