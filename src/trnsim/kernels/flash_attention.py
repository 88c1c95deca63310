"""Flash attention for training: the forward with its row log-sum-exp, and the fused backward.

Forward (`flash_attention`): `trnsim.kernels.attention` (online softmax over key chunks, causal
chunks skipped), which also writes each query row's log-sum-exp lse = scale * max + ln(sum) as
two parts in the output dtype (hi = round(lse), lo = round(lse - hi): about 16 significant bits
in bf16, exact in fp32), so the backward can rebuild the probabilities without the scores.

Backward (`flash_attention_backward`), per batch item (the last batch axis read as heads), with
P = exp(scale * q k^T - lse) rebuilt block by block and never written to HBM:

    dV = P^T dO      dP = dO V^T      dS = P * (dP - rowsum(dO * O))
    dQ = scale * dS K                 dK = scale * dS^T Q

The loops run as NKI's flash-attention backward orders them: key blocks of 128 outside, query
blocks of 128 inside. Q, dO (rows and d-major, both in the compute dtype), the row terms
-lse and rowsum(dO * O) and dQ's fp32 accumulator stay in SBUF for the whole sequence; per key
block, K and V are loaded once and transposed on TensorE, and dK, dV accumulate in PSUM over the
query blocks. Per block of 128 x 128: TensorE computes the scores (q on partitions), dP, dV += P^T
dO (P as the stationary operand, contracting over queries), dK += dS^T Q, transposes dS and
computes dS K for dQ; ScalarE computes P = exp(scale * s - lse) from PSUM in one pass; VectorE
forms dS = (dP - D) * P in one pass and adds the block's dQ into the accumulator. Under a causal
mask query blocks wholly before a key block are skipped (about half the blocks), and the blocks
on the diagonal add a 0 / -1e30 triangle to the scores before the exponential.

Limits: d <= 128; q, k, v, dO and O of one shape [*batch, s, d]; the query-side buffers (per
128 rows, Q and dO twice in the compute dtype and dQ in fp32: 99 KiB a partition at s = 8192,
d = 128 in bf16) must fit the kernel's SBUF budget, else LimitExceededError.
"""

from __future__ import annotations

import numpy as np

from trnsim.errors import InvalidArgumentError, LimitExceededError, UnsupportedError
from trnsim.kernels.attention import NEG, _HeadViews, attention
from trnsim.kernels.layout import (
    BANK_FP32,
    Evictor,
    P,
    has_gpsimd,
    hbm_strides,
    hbm_view,
    itemsize,
    kernel_scope,
    load_constant,
    operand_budget_bytes,
    tiles,
)
from trnsim.nki import isa as nisa
from trnsim.nki import language as nl
from trnsim.nki.tile import Tile


def flash_attention(out: Tile, lse: Tile, q: Tile, k: Tile, v: Tile, *, scale: float,
                    causal: bool, compute_dtype="bfloat16") -> None:
    """out = softmax(scale * q k^T [causal]) v; lse[..., 0:2] = its row log-sum-exp as (hi, lo)."""
    attention(out, q, k, v, scale=scale, mask_kind="causal" if causal else "none",
              compute_dtype=compute_dtype, lse=lse)


def flash_attention_packed(out: Tile, q: Tile, k: Tile, v: Tile, *, scale: float, causal: bool,
                           compute_dtype="bfloat16") -> None:
    """`flash_attention` into one [*batch, s, d + 2] output: out, then lse's two parts (the
    compiler's IR gives a node one output)."""
    d = q.shape[-1]
    flash_attention(out[..., 0:d], out[..., d:d + 2], q, k, v, scale=scale, causal=causal,
                    compute_dtype=compute_dtype)


def flash_attention_backward_packed(out: Tile, grad: Tile, q: Tile, k: Tile, v: Tile, o: Tile,
                                    lse: Tile, *, scale: float, causal: bool,
                                    compute_dtype="bfloat16") -> None:
    """`flash_attention_backward` into one output: dq, dk, dv, each stored with its rows
    outside its heads ([3, *outer, s, heads, d] for [*outer, heads, s, d] operands; [3, s, d]
    without a batch), as a projection's output is laid out, so a row of every head is one run."""
    flash_attention_backward(*(heads_major(out[i]) for i in range(3)), grad, q, k, v, o, lse,
                             scale=scale, causal=causal, compute_dtype=compute_dtype)


def heads_major(t: Tile) -> Tile:
    """A [*outer, s, heads, d] view as [*outer, heads, s, d] (a 2-D view as it is)."""
    if t.ndim < 3:
        return t
    shape, steps = list(t.shape), list(hbm_strides(t))
    shape[-3], shape[-2] = shape[-2], shape[-3]
    steps[-3], steps[-2] = steps[-2], steps[-3]
    return hbm_view(t, tuple(shape), tuple(steps))


def flash_attention_backward(dq: Tile, dk: Tile, dv: Tile, grad: Tile, q: Tile, k: Tile,
                             v: Tile, out: Tile, lse: Tile, *, scale: float, causal: bool,
                             compute_dtype="bfloat16") -> None:
    """See the module docstring."""
    shape = tuple(q.shape)
    for name, t in (("k", k), ("v", v), ("grad", grad), ("out", out), ("dq", dq), ("dk", dk),
                    ("dv", dv)):
        if tuple(t.shape) != shape:
            raise InvalidArgumentError(f"flash_attention_backward: {name} {list(t.shape)} is "
                                       f"not shaped like q {list(shape)}")
    if tuple(lse.shape) != (*shape[:-1], 2):
        raise InvalidArgumentError(f"flash_attention_backward: lse {list(lse.shape)} is not "
                                   f"{[*shape[:-1], 2]}")
    s, d = shape[-2:]
    if d > P:
        raise UnsupportedError(f"flash_attention_backward with head dim {d} > {P}")
    size = itemsize(compute_dtype)
    # per partition: Q and dO as rows and d-major, dQ's fp32 accumulator, -lse and rowsum(dO*O)
    need = len(tiles(s, P)) * (2 * d * size + 2 * P * size + 4 * d + 8)
    # what one key block holds (K, V rows and d-major, P, dS, dS^T, the masked scores, output
    # rows), twice: the next block's loads overlap this one
    budget = operand_budget_bytes() - 2 * (9 * P * size + 4 * P)
    if need > budget:
        raise LimitExceededError("flash_attention_backward SBUF bytes per partition for the "
                                 "query side", need, budget, context=f"seq {s}, head dim {d}")
    batch = shape[:-2]
    heads = batch[-1] if batch else 1
    group = max(1, min(heads, budget // max(need, 1)))
    with kernel_scope("flash attention backward"):
        kernel = _Backward(s, d, float(scale), causal, compute_dtype)
        for index in np.ndindex(*batch[:-1]):
            for h0, hn in tiles(heads, group):
                with kernel_scope("batch item"):
                    kernel.item([_heads(t, index, h0, hn, bool(batch))
                                 for t in (dq, dk, dv, grad, q, k, v, out, lse)], hn)


def _heads(t: Tile, index: tuple[int, ...], h0: int, hn: int, has_batch: bool) -> Tile:
    """Heads h0..h0+hn of batch item `index` of a [*outer, heads, s, x] view as [hn, s, x]."""
    if not has_batch:
        return hbm_view(t, (1, *t.shape), (0, *hbm_strides(t)))
    view = t[index] if index else t
    return view[h0:h0 + hn]


class _Backward:
    def __init__(self, s: int, d: int, scale: float, causal: bool, dtype) -> None:
        self.s, self.d, self.scale, self.causal, self.dtype = s, d, scale, causal, dtype
        self.blocks = tiles(s, P)
        self.evictor = Evictor()
        self.triangle = self._triangle() if causal else None

    def _triangle(self) -> Tile:
        """0 where a key is at or before the query (same offset on both axes), NEG after."""
        tri = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.sbuf)
        if has_gpsimd():
            i_q, i_k = nl.mgrid[0:P, 0:P]
            zeros = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.sbuf)
            zeros[...] = nisa.memset((P, P), 0.0, nl.float32)
            tri[...] = nisa.affine_select(i_q - i_k >= 0, zeros, NEG)
        else:
            keep = np.arange(P)[:, None] >= np.arange(P)[None, :]
            load_constant(tri, np.where(keep, 0.0, NEG), "flash_bwd_causal")
        return tri

    def _rows(self, view3: Tile, t: int, hn: int, dtype=None) -> Tile:
        """Rows of block t of every head of an HBM [hn, s, x] view, as [rows, hn, x] (one DMA:
        a row of all heads is one run when heads are adjacent, as in a fused projection)."""
        r0, rn = self.blocks[t]
        rows = nl.ndarray((P, hn, view3.shape[-1]), dtype=dtype or self.dtype, buffer=nl.sbuf)
        rows[0:rn] = nl.load(_HeadViews.rows(view3, r0, rn))
        return rows

    def _transpose(self, dst: Tile, rows: list[tuple[Tile, int, int]]) -> None:
        """dst[0:d, c0:c0+rn] = rows^T for each (rows [rn, d], c0, rn), four to a PSUM bank."""
        d = self.d
        for g in range(0, len(rows), 4):
            group = rows[g:g + 4]
            with kernel_scope("transposes"):
                bank = nl.ndarray((P, 4, P), dtype=nl.float32, buffer=nl.psum)
                for j, (src, _, rn) in enumerate(group):
                    bank[0:d, j, 0:rn] = nisa.nc_transpose(src[0:rn, 0:d])
                for j, (_, c0, rn) in enumerate(group):
                    self.evictor.copy(dst[0:d, c0:c0 + rn], bank[0:d, j, 0:rn])

    def item(self, views: list[Tile], hn: int) -> None:
        """All of `hn` heads of one batch item ([hn, s, x] views): the query side of every head
        stays in SBUF, and each key block is loaded for all heads at once."""
        dq, dk, dv, grad, q, k, v, out, lse = views
        s, d, nq = self.s, self.d, len(self.blocks)
        q_rows = nl.ndarray((P, nq, hn, d), dtype=self.dtype, buffer=nl.sbuf)
        g_rows = nl.ndarray((P, nq, hn, d), dtype=self.dtype, buffer=nl.sbuf)
        q_t = nl.ndarray((P, hn, s), dtype=self.dtype, buffer=nl.sbuf)
        g_t = nl.ndarray((P, hn, s), dtype=self.dtype, buffer=nl.sbuf)
        neg_lse = nl.ndarray((P, hn, nq), dtype=nl.float32, buffer=nl.sbuf)
        row_term = nl.ndarray((P, hn, nq), dtype=nl.float32, buffer=nl.sbuf)
        dq_acc = nl.ndarray((P, nq, hn, d), dtype=nl.float32, buffer=nl.sbuf)
        for t, (q0, qr) in enumerate(self.blocks):
            with kernel_scope("query rows"):
                q_rows[0:qr, t, :, :] = nl.load(_HeadViews.rows(q, q0, qr))
                g_rows[0:qr, t, :, :] = nl.load(_HeadViews.rows(grad, q0, qr))
                o_rows = self._rows(out, t, hn)
                parts = self._rows(lse, t, hn, nl.float32)
                total = nisa.tensor_reduce(np.add, parts[0:qr], axis=(2,))
                neg_lse[0:qr, :, t] = nisa.tensor_scalar(total, np.multiply, -1.0)
                prod = nisa.tensor_tensor(g_rows[0:qr, t, :, :], o_rows[0:qr], np.multiply,
                                          dtype=nl.float32)
                row_term[0:qr, :, t] = nisa.tensor_reduce(np.add, prod, axis=(2,))
        for h in range(hn):
            for g0 in range(0, nq, 4):
                group = range(g0, min(nq, g0 + 4))
                self._transpose(q_t[:, h, :], [(q_rows[:, t, h, :], *self.blocks[t])
                                               for t in group])
                self._transpose(g_t[:, h, :], [(g_rows[:, t, h, :], *self.blocks[t])
                                               for t in group])
        started: set[tuple[int, int]] = set()  # (query block, head) with dQ accumulated
        side = (q_rows, g_rows, q_t, g_t, neg_lse, row_term, dq_acc, started)
        for kt, (k0, kr) in enumerate(self.blocks):
            with kernel_scope("key block"):
                k_rows = self._rows(k, kt, hn)
                v_rows = self._rows(v, kt, hn)
                grads = [nl.ndarray((P, hn, d), dtype=t.dtype, buffer=nl.sbuf) for t in (dk, dv)]
                for h in range(hn):
                    with kernel_scope("head"):
                        self._key_block(h, k0, kr, k_rows, v_rows, grads, side)
                for rows, target in zip(grads, (dk, dv), strict=True):
                    nl.store(_HeadViews.rows(target, k0, kr), value=rows[0:kr])
        for t, (q0, qr) in enumerate(self.blocks):
            with kernel_scope("dq rows"):
                rows = nl.ndarray((P, hn, d), dtype=dq.dtype, buffer=nl.sbuf)
                for h in range(hn):
                    if (t, h) not in started:  # no key reaches these queries (never if causal)
                        rows[0:qr, h, :] = nisa.memset((qr, d), 0.0, dq.dtype)
                        continue
                    rows[0:qr, h, :] = nisa.tensor_scalar(dq_acc[0:qr, t, h, :], np.multiply,
                                                          self.scale, dtype=dq.dtype)
                nl.store(_HeadViews.rows(dq, q0, qr), value=rows[0:qr])

    def _key_block(self, h, k0, kr, k_rows, v_rows, grads, side) -> None:
        """One key block of head h against every query block that sees it, software-pipelined
        over the query blocks in three stages (each engine runs its instructions in program
        order, so step i emits stage A of block i, B of block i-1 and C of block i-2: TensorE's
        products of one block never wait on the exponentials or dS of the block before)."""
        d = self.d
        if 2 * d > BANK_FP32:
            raise UnsupportedError(f"flash_attention_backward with head dim {d}")
        k_t = nl.ndarray((P, P), dtype=self.dtype, buffer=nl.sbuf)
        v_t = nl.ndarray((P, P), dtype=self.dtype, buffer=nl.sbuf)
        self._transpose(k_t, [(k_rows[:, h, :], 0, kr)])
        self._transpose(v_t, [(v_rows[:, h, :], 0, kr)])
        acc = nl.zeros((P, BANK_FP32), dtype=nl.float32, buffer=nl.psum)
        dk_acc, dv_acc = acc[:, 0:d], acc[:, d:2 * d]
        wanted = [(t, q0, qr) for t, (q0, qr) in enumerate(self.blocks)
                  if not self.causal or q0 + qr - 1 >= k0]
        sets = [_BlockBuffers(self.dtype, d) for _ in range(min(3, len(wanted)))]
        keys = (h, k0, kr, k_t, v_t, k_rows)
        for i in range(len(wanted) + 2):
            if i < len(wanted):
                self._stage_scores(sets[i % 3], *wanted[i], keys, side)
            if 0 <= i - 1 < len(wanted):
                self._stage_key_grads(sets[(i - 1) % 3], *wanted[i - 1], keys, side, dk_acc,
                                      dv_acc)
            if 0 <= i - 2 < len(wanted):
                self._stage_query_grad(sets[(i - 2) % 3], *wanted[i - 2], keys, side)
        dk_rows, dv_rows = grads
        if not wanted:
            for rows in grads:
                rows[0:kr, h, :] = nisa.memset((kr, d), 0.0, rows.dtype)
            return
        dk_rows[0:kr, h, :] = nisa.tensor_scalar(dk_acc[0:kr, :], np.multiply, self.scale,
                                                 dtype=dk_rows.dtype)
        dv_rows[0:kr, h, :] = nisa.tensor_copy(dv_acc[0:kr, :], dtype=dv_rows.dtype)

    def _stage_scores(self, b, t, q0, qr, keys, side) -> None:
        """A: scores and dP (TensorE), P = exp(scale * s - lse) (ScalarE), dS (VectorE)."""
        d = self.d
        h, k0, kr, k_t, v_t, _ = keys
        _, _, q_t, g_t, neg_lse, row_term, _, _ = side
        b.scores[0:qr, 0:kr] = nisa.nc_matmul(q_t[0:d, h, q0:q0 + qr], k_t[0:d, 0:kr])
        source = b.scores
        if self.causal and k0 + kr - 1 > q0:  # the block crosses the diagonal
            if q0 != k0:
                raise UnsupportedError("flash_attention_backward: causal blocks off the 128-row "
                                       "grid")
            b.masked[0:qr, 0:kr] = nisa.scalar_tensor_tensor(
                data=self.triangle[0:qr, 0:kr], op0=np.multiply, operand0=1.0 / self.scale,
                op1=np.add, operand1=b.scores[0:qr, 0:kr])
            source = b.masked
        b.dp[0:qr, 0:kr] = nisa.nc_matmul(g_t[0:d, h, q0:q0 + qr], v_t[0:d, 0:kr])
        b.probs[0:qr, 0:kr] = nisa.activation(op=nl.exp, data=source[0:qr, 0:kr],
                                              scale=self.scale, bias=neg_lse[0:qr, h, t:t + 1])
        b.ds[0:qr, 0:kr] = nisa.scalar_tensor_tensor(
            data=b.dp[0:qr, 0:kr], op0=np.subtract, operand0=row_term[0:qr, h, t:t + 1],
            op1=np.multiply, operand1=b.probs[0:qr, 0:kr])

    def _stage_key_grads(self, b, t, q0, qr, keys, side, dk_acc, dv_acc) -> None:
        """B: dV += P^T dO and dK += dS^T Q into PSUM, dS transposed (TensorE), evicted."""
        h, _, kr = keys[:3]
        q_rows, g_rows = side[:2]
        dv_acc[0:kr, :] += nisa.nc_matmul(b.probs[0:qr, 0:kr], g_rows[0:qr, t, h, :])
        dk_acc[0:kr, :] += nisa.nc_matmul(b.ds[0:qr, 0:kr], q_rows[0:qr, t, h, :])
        b.bank[0:kr, 0:qr] = nisa.nc_transpose(b.ds[0:qr, 0:kr])
        self.evictor.copy(b.ds_t[0:kr, 0:qr], b.bank[0:kr, 0:qr], engine="scalar")

    def _stage_query_grad(self, b, t, q0, qr, keys, side) -> None:
        """C: this block's dS K (TensorE) added into dQ's fp32 accumulator (VectorE)."""
        h, _, kr, _, _, k_rows = keys
        dq_acc, started = side[6:]
        b.dq[0:qr, :] = nisa.nc_matmul(b.ds_t[0:kr, 0:qr], k_rows[0:kr, h, 0:self.d])
        if (t, h) not in started:
            dq_acc[0:qr, t, h, :] = nisa.tensor_copy(b.dq[0:qr, :])
            started.add((t, h))
        else:
            dq_acc[0:qr, t, h, :] = nisa.tensor_tensor(dq_acc[0:qr, t, h, :], b.dq[0:qr, :],
                                                       np.add)


class _BlockBuffers:
    """One query block's on-chip tiles in the pipeline (three sets rotate)."""

    def __init__(self, dtype, d: int) -> None:
        self.scores = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.psum)
        self.dp = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.psum)
        self.bank = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.psum)
        self.dq = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.psum)
        self.masked = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.sbuf)
        self.probs = nl.ndarray((P, P), dtype=dtype, buffer=nl.sbuf)
        self.ds = nl.ndarray((P, P), dtype=dtype, buffer=nl.sbuf)
        self.ds_t = nl.ndarray((P, P), dtype=dtype, buffer=nl.sbuf)
