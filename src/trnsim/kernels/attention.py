"""k.attention: out = softmax(q k^T * scale + mask) v, fused on chip (scores never reach HBM).

Layout (per batch item, the last batch axis read as heads, everything for 128 queries at a time):

- Q and K arrive as rows [s, heads, d] (one DMA for all heads: a row of all heads is usually one
  contiguous run, e.g. a slice of a fused QKV projection) and go through TensorE transposes to
  d-major: for d = 64, one 128x128 transpose turns two heads, whose d rows then sit on partitions
  0-63 and 64-127 (``heads_per_pack``); the score matmul of each head contracts over its own
  partition range (allowed starts 0/64 on NeuronCore-v2).
- scores[q, k] = Q^T[d, q]^T @ K^T[d, k] into PSUM; `group` heads share one bank (4 for s=128).
- softmax along the free axis: one VectorE max per head, ScalarE exp(scale * s - scale * max)
  with the row sum accumulated by the same instruction, one reciprocal per group. With a mask,
  one VectorE pass computes ``scale * s + mask_bias`` into SBUF first (mask_bias: 0 / -1e30 for
  bool and causal masks, the additive mask clamped at -1e30 otherwise); rows with nothing kept
  output 0, as the reference does.
- P (unnormalised, compute dtype) is transposed on TensorE, 128 keys at a time, four per PSUM
  bank, and O = P^T[k, q]^T @ V[k, dv] accumulates over key tiles; the 1/sum scaling is applied
  when O leaves PSUM (one pass), and all heads of the 128 queries are stored with one DMA.
- Buffers allocated inside loop iterations rotate (trace ring allocator): the next batch item's
  K/V loads and transposes overlap this one's softmax.

A few queries (at most `FEW_QUERIES`, a decode step) over at least `FEW_QUERIES_MIN_KEYS` keys
without a mask: keys on partitions instead (shorter, the path above's pipelining across heads
wins: 8 heads of 4 queries over 513 keys take 31 us there and 38 us here, over 1025 keys 62 and
54 us). scores^T[k, q] per key tile, so the softmax's passes use all 128 lanes, P^T is P @ V's
stationary operand as it stands (no transposes), the row maximum crosses partitions by a
transpose and comes back by a ones-row matmul, and the row sums are P @ 1 beside P @ V.
Without a mask K and V rows are loaded interleaved (key order is free), in 8-row runs.

Long sequences:

- Keys beyond 2048 (the scores of 128 queries for one head fill 4 PSUM banks) are taken in
  chunks of 2048 with an online softmax: each chunk's row maximum, row sum and unnormalised
  P @ V are merged into running ones (rescaled by exp(old max - new max)), and the output is
  divided by the final sum once. Under a causal mask, keys after a query block's last query are
  skipped (whole chunks, and the tail of the chunk the diagonal crosses).
- K^T, V and Q of the heads in flight stay in SBUF for the whole sequence; when they would take
  more than half the kernel's SBUF budget, heads are taken a few at a time (each group reads
  its own slice of Q, K and V once).
- When one head does not fit (about 14K keys at d = 128 in bf16 on NeuronCore-v2), K and V are
  streamed: per group of `STREAM_QUERY_BLOCKS` query blocks, one pass over the keys a segment
  (a multiple of 2048 keys, two segments' room so loads run ahead) at a time, each query
  block's chunks merged into its own running softmax, as flash attention orders its loops.
  A few queries (a decode step) take each segment with keys on partitions and merge per head.

Limits: d <= 128.
"""

from __future__ import annotations

import numpy as np

from trnsim.errors import InvalidArgumentError, LimitExceededError, UnsupportedError
from trnsim.kernels.layout import (
    BANK_FP32,
    Evictor,
    P,
    broadcast_to_shape,
    ceil_div,
    has_gpsimd,
    hbm_strides,
    hbm_view,
    kernel_scope,
    load_constant,
    operand_budget_bytes,
    tiles,
)
from trnsim.nki import isa as nisa
from trnsim.nki import language as nl
from trnsim.nki.stamp import stamped_range
from trnsim.nki.tile import Tile
from trnsim.numerics import dtype as as_dtype

NEG = -1.0e30  # the additive value of a masked-out score
MAX_KEYS = 4 * BANK_FP32  # scores of one head for 128 queries must fit in 4 PSUM banks
MASK_KINDS = ("none", "causal", "bias", "bool")
FEW_QUERIES = 32  # query blocks up to this many rows take keys on partitions (decode steps)...
FEW_QUERIES_MIN_KEYS = 1024  # ...over this many keys (below, per-head step latency dominates)
INTERLEAVE_TILES = 8  # key tiles per interleaved K/V load (runs of 8 rows: 1 KiB at d=64, bf16)
# query blocks that share one pass over streamed K/V: K and V are read from HBM once per this
# many blocks; their Q and running softmax state (about 1.3 KiB a block at d = 128) stay in SBUF
STREAM_QUERY_BLOCKS = 16
# key tiles per run of probability transposes (`_values_product`): the PSUM banks they rotate
# through (4 when a group's scores hold the other 4 of 8) and the evictor's two engines repeat
# within a run, so consecutive runs emit alike, up to tile names and offsets
TRANSPOSE_RUN = 4


def attention(out: Tile, q: Tile, k: Tile, v: Tile, *, scale: float, mask: Tile | None = None,
              mask_kind: str = "none", k_transposed: bool = False,
              compute_dtype="bfloat16", lse: Tile | None = None) -> None:
    """See the module docstring and the contract in `trnsim.kernels`. With `lse` ([*batch, sq,
    2]), each query row's log-sum-exp of the scaled scores is also written, as two parts
    (hi, lo) in lse's dtype (`trnsim.kernels.flash_attention`'s backward reads it)."""
    batch = tuple(out.shape[:-2])
    sq, dv = out.shape[-2:]
    d = q.shape[-1]
    sk = k.shape[-1] if k_transposed else k.shape[-2]
    kd = k.shape[-2] if k_transposed else k.shape[-1]
    if q.shape[-2] != sq or kd != d or v.shape[-2:] != (sk, dv):
        raise InvalidArgumentError(f"attention shapes do not agree: q {list(q.shape)}, k "
                                   f"{list(k.shape)} (transposed {k_transposed}), v "
                                   f"{list(v.shape)}, out {list(out.shape)}")
    if mask_kind not in MASK_KINDS:
        raise InvalidArgumentError(f"attention mask_kind {mask_kind!r} not in {MASK_KINDS}")
    if (mask is not None) != (mask_kind in ("bias", "bool")):
        raise InvalidArgumentError(f"attention mask_kind {mask_kind!r} with mask "
                                   f"{'given' if mask is not None else 'missing'}")
    if d > P:
        raise UnsupportedError(f"attention with head dim {d} > {P} (scores would need several "
                               f"contraction tiles) is not implemented")
    with kernel_scope("attention"):
        heads = batch[-1] if batch else 1
        outer = batch[:-1] if batch else ()
        mask_heads = 0 if mask is None else (
            heads if batch and hbm_strides(broadcast_to_shape(mask, (*batch, sq, sk)))[-3] else 1)
        chunk, segment, superblock = _plan(heads, sq, sk, d, dv, compute_dtype, out.dtype,
                                           mask_heads)
        if lse is not None and (tuple(lse.shape) != (*batch, sq, 2) or mask is not None):
            raise InvalidArgumentError(f"attention lse {list(lse.shape)}: wanted "
                                       f"{[*batch, sq, 2]}, without a mask operand")
        kernels = [_Attention(_HeadViews(out, q, k, v, mask, batch, sq, sk, d, dv, k_transposed,
                                         (h0, hn), lse),
                              hn, sq, sk, d, dv, float(scale), mask_kind, compute_dtype,
                              k_transposed, segment, superblock)
                   for h0, hn in tiles(heads, chunk)]
        for index in (np.ndindex(*outer) if outer else [()]):
            for kernel in kernels:
                kernel.batch_item(tuple(int(i) for i in index))


def _plan(heads: int, sq: int, sk: int, d: int, dv: int, compute_dtype, out_dtype,
          mask_heads: int) -> tuple[int, int | None, int]:
    """(heads in flight, key segment, query blocks per K/V pass).

    K^T, V and Q of the heads in flight stay in SBUF for the whole sequence unless that takes
    more than half the operand budget (the other half is the chunks' scores, probabilities and
    masks); then heads are taken a few at a time. When even one head does not fit, K and V are
    streamed (segment is not None): one transpose pack of heads, `STREAM_QUERY_BLOCKS` query
    blocks at a time, each pass over the keys loading `segment` keys at a time, room for two
    segments so the next one's loads overlap this one's work. `mask_heads`: 0 without a mask,
    1 for one shared by the heads, else the head count."""
    item, out_item = as_dtype(compute_dtype).itemsize, as_dtype(out_dtype).itemsize
    per_pack = _heads_per_pack(d)
    mask_bytes = 12 * min(sk, MAX_KEYS)  # fp32 raw and scaled values, two bf16 parts

    def key_bytes(n: int) -> float:  # one head's K^T (shared by its pack) and V
        return n * item / per_pack + ceil_div(n, P) * dv * item

    per_head = (key_bytes(sk) + ceil_div(sq, P) * d * item + dv * out_item + P * item / per_pack
                + (mask_bytes if mask_heads > 1 else 0))
    limit = operand_budget_bytes() // 2 - (mask_bytes if mask_heads == 1 else 0)
    blocks = ceil_div(sq, P)
    if heads * per_head <= limit:
        return heads, None, blocks
    fit = int(limit // per_head)
    if fit >= 1:
        return (fit // per_pack * per_pack if fit >= per_pack else fit), None, blocks
    hn = min(heads, per_pack)
    superblock = min(blocks, STREAM_QUERY_BLOCKS)
    # per query block and head: Q rows, Q^T, the running max, sum and output, the result
    block_bytes = d * item + P * item / per_pack + (dv + 2) * 4 + dv * out_item
    room = (limit - hn * (superblock * block_bytes + (mask_bytes if mask_heads > 1 else 0))) / 2
    segment = int(room // (hn * key_bytes(P) / P)) // MAX_KEYS * MAX_KEYS
    if segment < MAX_KEYS:
        raise LimitExceededError(
            "attention SBUF bytes per partition for one K/V segment", int(hn * key_bytes(MAX_KEYS)),
            int(room), context=f"{sk} keys, {sq} queries, head dim {d}")
    return hn, min(segment, ceil_div(sk, MAX_KEYS) * MAX_KEYS), superblock


def _heads_per_pack(d: int) -> int:
    """Heads whose d rows share one 128-partition transpose (start partitions 0/64 on v2)."""
    return P // d if d in (32, 64) else 1


class _HeadViews:
    """HBM views per outer batch index as [heads, s, x] (x = d, dv, or sk)."""

    def __init__(self, out, q, k, v, mask, batch, sq, sk, d, dv, k_transposed,
                 head_range: tuple[int, int] | None = None, lse: Tile | None = None) -> None:
        def full(t: Tile, tail: tuple[int, ...]) -> Tile:
            view = broadcast_to_shape(t, (*batch, *tail))
            if not batch:  # one head: add a head axis of size 1
                steps = hbm_strides(view)
                view = hbm_view(view, (1, *tail), (0, *steps))
            elif head_range is not None and head_range != (0, batch[-1]):
                h0, hn = head_range
                shape, steps = list(view.shape), hbm_strides(view)
                shape[len(batch) - 1] = hn
                view = hbm_view(view, tuple(shape), steps, offset=h0 * steps[len(batch) - 1])
            return view

        self.out = full(out, (sq, dv))
        self.q = full(q, (sq, d))
        self.k = full(k, (d, sk) if k_transposed else (sk, d))
        self.v = full(v, (sk, dv))
        self.mask = full(mask, (sq, sk)) if mask is not None else None
        self.lse = full(lse, (sq, 2)) if lse is not None else None

    @staticmethod
    def at(view: Tile, index: tuple[int, ...]) -> Tile:
        return view[index] if index else view

    @staticmethod
    def rows(view3: Tile, s0: int, count: int) -> Tile:
        """A [heads, s, x] view's rows s0..s0+count as [count, heads, x] (heads inner)."""
        hs, ss, xs = hbm_strides(view3)
        heads, _, x = view3.shape
        return hbm_view(view3, (count, heads, x), (ss, hs, xs), offset=s0 * ss)

    @staticmethod
    def interleaved(view3: Tile, per_partition: int, t0: int, count: int) -> Tile:
        """Key tiles t0..t0+count of the interleaved order as [P, count, heads, x]: tile t holds
        rows p * per_partition + t on partition p, so each partition reads one run of `count`
        consecutive rows per head."""
        hs, ss, xs = hbm_strides(view3)
        heads, _, x = view3.shape
        return hbm_view(view3, (P, count, heads, x), (per_partition * ss, ss, hs, xs),
                        offset=t0 * ss)


class _Attention:
    def __init__(self, views: _HeadViews, heads: int, sq: int, sk: int, d: int, dv: int,
                 scale: float, mask_kind: str, compute_dtype, k_transposed: bool,
                 segment: int | None = None, superblock: int = 1) -> None:
        self.views, self.heads, self.sq, self.sk, self.d, self.dv = views, heads, sq, sk, d, dv
        self.segment, self.superblock = segment, superblock  # K/V streamed when segment is set
        self.scale, self.mask_kind, self.dtype = scale, mask_kind, compute_dtype
        self.k_transposed = k_transposed
        self.evictor = Evictor()
        self.heads_per_pack = _heads_per_pack(d)
        self.packs = ceil_div(heads, self.heads_per_pack)
        # K or V shared by every head (grouped-query attention's broadcast view): loaded and
        # transposed once, for one pack, instead of once per head
        self.k_shared = heads > 1 and hbm_strides(views.k)[-3] == 0
        self.v_shared = heads > 1 and hbm_strides(views.v)[-3] == 0
        self.key_tiles = tiles(sk, P)
        self.chunks = tiles(sk, MAX_KEYS)  # one pass up to 2048 keys; more: online softmax
        # Without a mask the keys' order does not matter (softmax and P @ V sum over them), so
        # K and V rows are taken interleaved: key tile t < n holds rows p * n + t on partition
        # p, and INTERLEAVE_TILES tiles load with one DMA whose runs are that many rows long
        # (a 128-byte row of d = 64 in bf16 alone costs a descriptor each); the rows past
        # 128 * n form the last tile, in order.
        self.interleave = mask_kind == "none" and not k_transposed
        self.group = max(1, min(heads, BANK_FP32 // sk, BANK_FP32 // dv))
        # masks are added on TensorE in a dtype that holds NEG: fp16 would turn it into -inf
        # (and 0 * inf = NaN in the identity matmul), fp8 into NaN; bf16 has fp32's range
        self.mask_dtype = compute_dtype if _holds_neg(compute_dtype) else nl.bfloat16
        self.constants = _Constants(self.mask_dtype) if mask_kind != "none" else None

    # --- per batch item: K^T and V for all heads, then 128 queries at a time ------------------
    def batch_item(self, index: tuple[int, ...]) -> None:
        if self.segment is not None:
            self._streamed_item(index)
            return
        v = self.views
        with kernel_scope("batch item"):  # freed at the end: the next item's buffers rotate
            blocks = tiles(self.sq, P)
            q_rows = nl.ndarray((P, len(blocks), self.heads, self.d), dtype=self.dtype,
                                buffer=nl.sbuf)
            for b, (q0, qr) in enumerate(blocks):  # queries first: the first scores need them
                q_rows[0:qr, b, :, :] = nl.load(_HeadViews.rows(_HeadViews.at(v.q, index), q0,
                                                                qr))
            k_t = self._keys_transposed(_HeadViews.at(v.k, index), self.key_tiles)
            values = self._values(_HeadViews.at(v.v, index), self.key_tiles)
            for b, (q0, qr) in enumerate(blocks):
                with kernel_scope("query block"):
                    self._query_block(index, q0, qr, q_rows[:, b, :, :], k_t, values)

    def _values(self, v_view: Tile, key_tiles: list[tuple[int, int]]) -> Tile:
        """V rows of `key_tiles` (of a [heads, keys, dv] view) as [keys on partitions, heads,
        tiles, dv] in the compute dtype (a head's tiles adjacent: see `_load_groups`)."""
        v_heads = 1 if self.v_shared else self.heads
        values = nl.ndarray((P, v_heads, len(key_tiles), self.dv), dtype=self.dtype,
                            buffer=nl.sbuf)
        for t0, count, rows in self._key_row_groups(v_view, key_tiles):
            self._load_groups(values, rows, t0, count, v_heads, key_tiles[t0][1])
        return values

    @staticmethod
    def _load_groups(dst: Tile, rows: Tile, t0: int, count: int, heads: int, kr: int) -> None:
        """dst [P, heads, tiles, x] <- one `_key_row_groups` load. Interleaved tiles move one
        DMA per head: each partition's share is then one run of `count` consecutive rows on
        both sides (a load of all heads at once breaks it into one row per head and tile), and
        each head's DMA depends only on writes to that head's rows (a decode step's new key,
        written into the cache just before, delays only the group holding it)."""
        if not count:
            dst[0:kr, :, t0, :] = nl.load(rows[:, 0:heads, :])
            return
        for h in range(heads):
            dst[:, h, t0:t0 + count, :] = nl.load(rows[:, :, h, :])

    def _streamed_item(self, index: tuple[int, ...]) -> None:
        """Keys past what SBUF holds for one head: per group of query blocks, one pass over the
        keys, `segment` keys of K^T and V at a time, each query block's chunks merged into its
        own running softmax (flash attention's loop order: K and V are read once per group of
        query blocks)."""
        v = self.views
        q_view, k_view, v_view = (_HeadViews.at(t, index) for t in (v.q, v.k, v.v))
        blocks = tiles(self.sq, P)
        causal = self.mask_kind == "causal"
        for b0, bn in tiles(len(blocks), self.superblock):
            mine = blocks[b0:b0 + bn]
            with kernel_scope("query blocks"):
                # the chunk buffers live across segments: allocated per segment, PSUM's 4-bank
                # scores would land between other tiles and fragment the ring
                buffers = (psum_tile(self.group, MAX_KEYS),
                           [_SoftmaxState(self.group, MAX_KEYS, self.dtype) for _ in range(2)])
                q_t = nl.ndarray((P, bn, self.packs, P), dtype=self.dtype, buffer=nl.sbuf)
                for j, (q0, qr) in enumerate(mine):
                    rows = nl.ndarray((P, self.heads, self.d), dtype=self.dtype, buffer=nl.sbuf)
                    rows[0:qr] = nl.load(_HeadViews.rows(q_view, q0, qr))
                    self._transpose_rows(q_t[:, j, :, :], rows, qr)
                runs = [_RunningSoftmax(self.heads, self.dv) for _ in mine]
                ones = self._ones()
                last_query = mine[-1][0] + mine[-1][1] - 1
                for s0, sn in tiles(self.sk, self.segment):
                    if causal and s0 > last_query:  # keys after every query of these blocks
                        break
                    with kernel_scope("key segment"):
                        key_tiles = tiles(sn, P)
                        k_t = self._keys_transposed(
                            self._segment(k_view, s0, sn, self.k_transposed), key_tiles)
                        values = self._values(self._segment(v_view, s0, sn), key_tiles)
                        for j, (q0, qr) in enumerate(mine):
                            if self._keys_on_partitions(qr, len(key_tiles)):
                                self._few_queries_segment(qr, q_t[:, j, :, :], k_t, values,
                                                          key_tiles, runs[j], buffers[1][0],
                                                          ones)
                                continue
                            chunks = [(s0 + c0, cw) for c0, cw in tiles(sn, MAX_KEYS)]
                            if causal:
                                chunks = [(k0, min(kw, q0 + qr - k0)) for k0, kw in chunks
                                          if k0 < q0 + qr]
                            self._online_chunks(index, q0, qr, q_t[:, j, :, :], k_t, values,
                                                chunks, runs[j], s0, buffers)
                for j, (q0, qr) in enumerate(mine):
                    result = nl.ndarray((P, self.heads, self.dv), dtype=v.out.dtype,
                                        buffer=nl.sbuf)
                    runs[j].finish(qr, result, drop_empty_rows=self.mask_kind in ("bias", "bool"))
                    nl.store(_HeadViews.rows(_HeadViews.at(v.out, index), q0, qr),
                             value=result[0:qr])
                    if v.lse is not None:
                        self._store_lse(index, q0, qr, runs[j].log_sum_exp(qr))

    @staticmethod
    def _segment(view3: Tile, s0: int, sn: int, keys_last: bool = False) -> Tile:
        """Keys s0..s0+sn of a [heads, keys, x] view ([heads, d, keys] with `keys_last`)."""
        return view3[:, :, s0:s0 + sn] if keys_last else view3[:, s0:s0 + sn, :]

    def _transpose_rows(self, dst: Tile, rows: Tile, count: int, packs: int | None = None
                        ) -> None:
        """dst [pack rows, packs, count] = per pack, rows [count, pack heads * d] transposed."""
        width = self.heads_per_pack * self.d
        packs = packs or self.packs
        for p0 in range(0, packs, 4):
            n = min(4, packs - p0)
            with kernel_scope("transpose bank"):
                bank = nl.ndarray((P, 4, P), dtype=nl.float32, buffer=nl.psum)
                for j in range(n):
                    h0 = (p0 + j) * self.heads_per_pack
                    hn = min(self.heads_per_pack, self.heads - h0)
                    bank[0:hn * self.d, j, 0:count] = nisa.nc_transpose(
                        rows[0:count, h0:h0 + hn, :])
                self.evictor.copy(dst[0:width, p0:p0 + n, 0:count], bank[0:width, 0:n, 0:count])

    def _keys_transposed(self, k_view: Tile, key_tiles: list[tuple[int, int]]) -> Tile:
        """K^T of `key_tiles` for all heads: [pack heads * d (partitions), packs, keys] in the
        compute dtype (one pack when every head shares K: a head's scores read its pack slot of
        pack 0)."""
        packs = 1 if self.k_shared else self.packs
        heads = min(self.heads, self.heads_per_pack) if self.k_shared else self.heads
        keys = key_tiles[-1][0] + key_tiles[-1][1]
        k_t = nl.ndarray((P, packs, keys), dtype=self.dtype, buffer=nl.sbuf)
        if self.k_transposed:  # stored [heads, d, sk]: already d-major
            for h in range(heads):
                p, j = divmod(h, self.heads_per_pack)
                k_t[j * self.d:(j + 1) * self.d, p, :] = nl.load(k_view[h])
            return k_t
        for t0, count, view in self._key_row_groups(k_view, key_tiles):
            with kernel_scope("key rows"):
                rows = nl.ndarray((P, heads, max(count, 1), self.d), dtype=self.dtype,
                                  buffer=nl.sbuf)
                self._load_groups(rows, view, 0, count, heads, key_tiles[t0][1])
                for j in range(max(count, 1)):
                    k0, kr = key_tiles[t0 + j]
                    self._transpose_rows(k_t[:, :, k0:k0 + kr], rows[:, :, j, :], kr, packs)
        return k_t

    def _key_row_groups(self, view3: Tile, key_tiles: list[tuple[int, int]]):
        """(first key tile, tiles, HBM view) per load of K or V rows: interleaved groups as
        [P, tiles, heads, x], or (count 0) one tile's rows in order as [rows, heads, x]."""
        keys = key_tiles[-1][0] + key_tiles[-1][1]
        n = keys // P if self.interleave and keys >= 2 * P else 0  # tiles taken interleaved
        for t0, count in (tiles(n, INTERLEAVE_TILES) if n else []):
            yield t0, count, _HeadViews.interleaved(view3, n, t0, count)
        for t, (k0, kr) in enumerate(key_tiles):
            if t >= n:
                yield t, 0, _HeadViews.rows(view3, k0, kr)

    # --- 128 queries ---------------------------------------------------------------------------
    def _query_block(self, index, q0: int, qr: int, q_rows: Tile, k_t: Tile,
                     values: Tile) -> None:
        """Scores, softmax and P @ V for all heads of 128 queries, software-pipelined over head
        groups: TensorE computes the scores of group i while VectorE finds the row maxima of
        group i-1, ScalarE exponentiates group i-2 and TensorE transposes and multiplies group
        i-3."""
        if self._keys_on_partitions(qr):
            self._few_queries_block(index, q0, qr, q_rows, k_t, values)
            return
        if len(self.chunks) > 1:
            self._online_query_block(index, q0, qr, q_rows, k_t, values)
            return
        v = self.views
        q_t = nl.ndarray((P, self.packs, P), dtype=self.dtype, buffer=nl.sbuf)
        self._transpose_rows(q_t, q_rows, qr)
        mask = self._mask_terms(index, q0, qr)
        result = nl.ndarray((P, self.heads, self.dv), dtype=v.out.dtype, buffer=nl.sbuf)
        totals = nl.ndarray((P, self.heads), dtype=nl.float32, buffer=nl.sbuf) \
            if v.lse is not None else None
        groups = tiles(self.heads, self.group)
        # a group's scores are read two steps after they are written: three PSUM buffers
        # when they fit (1-2 banks each), else one group at a time (keys over 1024)
        depth = 3 if ceil_div(self.group * self.sk, BANK_FP32) <= 2 else 1
        lag = 1 if depth == 3 else 0
        scores = [psum_tile(self.group, self.sk) for _ in range(depth)]
        rotating = [_SoftmaxState(self.group, self.sk, self.dtype) for _ in range(3)]
        # stage k of head group i is emitted at step i + k * lag: engines run in program order,
        # so each engine's stream interleaves groups and none waits on the engine before it
        for i in range(len(groups) + 3):
            if i < len(groups):
                self._scores(groups[i], qr, q_t, k_t, scores[i % depth], mask)
            if 0 <= i - lag < len(groups):
                j = i - lag
                self._row_max(groups[j][1], qr, scores[j % depth], rotating[j % 3])
            if 0 <= i - 2 * lag < len(groups):
                j = i - 2 * lag
                self._exponentials(groups[j][1], qr, rotating[j % 3])
            if 0 <= i - 3 * lag < len(groups):
                j = i - 3 * lag
                with kernel_scope("weighted values"):
                    self._weighted_values(*groups[j], qr, rotating[j % 3].probs, values,
                                          rotating[j % 3].inverse, result)
                    if totals is not None:
                        state, (h0, hn) = rotating[j % 3], groups[j]
                        totals[0:qr, h0:h0 + hn] = nisa.tensor_tensor(
                            nisa.activation(op=nl.log, data=state.sums[0:qr, 0:hn]),
                            state.neg_max[0:qr, 0:hn], np.subtract)
        nl.store(_HeadViews.rows(_HeadViews.at(v.out, index), q0, qr), value=result[0:qr])
        if totals is not None:
            self._store_lse(index, q0, qr, totals)

    def _online_query_block(self, index, q0: int, qr: int, q_rows: Tile, k_t: Tile,
                            values: Tile) -> None:
        """128 queries against more keys than PSUM holds: per chunk of 2048 keys and head group,
        scores, row max, exponentials and the unnormalised P @ V, merged into a running max,
        sum and output (fp32, SBUF); one division at the end."""
        v = self.views
        q_t = nl.ndarray((P, self.packs, P), dtype=self.dtype, buffer=nl.sbuf)
        self._transpose_rows(q_t, q_rows, qr)
        run = _RunningSoftmax(self.heads, self.dv)
        chunks = self.chunks
        if self.mask_kind == "causal":  # keys after the last query are masked for every query
            chunks = [(k0, min(kw, q0 + qr - k0)) for k0, kw in chunks if k0 < q0 + qr]
        self._online_chunks(index, q0, qr, q_t, k_t, values, chunks, run)
        result = nl.ndarray((P, self.heads, self.dv), dtype=v.out.dtype, buffer=nl.sbuf)
        run.finish(qr, result, drop_empty_rows=self.mask_kind in ("bias", "bool"))
        nl.store(_HeadViews.rows(_HeadViews.at(v.out, index), q0, qr), value=result[0:qr])
        if v.lse is not None:
            self._store_lse(index, q0, qr, run.log_sum_exp(qr))

    def _online_chunks(self, index, q0: int, qr: int, q_t: Tile, k_t: Tile, values: Tile,
                       chunks: list[tuple[int, int]], run: _RunningSoftmax, base: int = 0,
                       buffers: tuple[Tile, list[_SoftmaxState]] | None = None) -> None:
        """Merge key chunks (absolute positions; k_t and values hold keys from `base`) into the
        running softmax of 128 queries, software-pipelined by one step: TensorE computes step
        i's scores (once step i-1's exponentials have read the shared PSUM buffer) before
        transposing step i-1's probabilities, so VectorE's row max of step i overlaps that
        work. `buffers`: the PSUM scores and two softmax states, if the caller holds them."""
        scores, states = buffers or (psum_tile(self.group, MAX_KEYS),
                                     [_SoftmaxState(self.group, MAX_KEYS, self.dtype)
                                      for _ in range(2)])
        pending: tuple | None = None
        step = 0
        for c, (k0, kw) in enumerate(chunks):
            with kernel_scope("key chunk"):
                mask = self._mask_terms(index, q0, qr, (k0, kw))
                for h0, hn in tiles(self.heads, self.group):
                    state = states[step % 2]
                    step += 1
                    chunk_scores = scores[:, :, 0:kw]
                    self._scores((h0, hn), qr, q_t, k_t, chunk_scores, mask, (k0, kw), base)
                    self._row_max(hn, qr, chunk_scores, state)
                    self._exponentials(hn, qr, state, kw, normalise=False)
                    if pending is not None:
                        self._merge_chunk(run, values, qr, *pending)
                    pending = (c == 0 and not run.started, h0, hn, k0 - base, kw, state)
        if pending is not None:
            self._merge_chunk(run, values, qr, *pending)
        run.started = run.started or bool(chunks)

    def _store_lse(self, index, q0: int, qr: int, totals: Tile) -> None:
        """Store the rows' log-sum-exp (fp32 [128, heads]) as (hi, lo) parts."""
        view = self.views.lse
        parts = nl.ndarray((P, self.heads, 2), dtype=view.dtype, buffer=nl.sbuf)
        parts[0:qr, :, 0] = nisa.tensor_copy(totals[0:qr])
        parts[0:qr, :, 1] = nisa.tensor_tensor(totals[0:qr], parts[0:qr, :, 0], np.subtract)
        nl.store(_HeadViews.rows(_HeadViews.at(view, index), q0, qr), value=parts[0:qr])

    def _keys_on_partitions(self, qr: int, key_tiles: int | None = None) -> bool:
        """Whether a query block is few enough queries (a decode step) to take keys on partitions:
        without a mask, with a positive scale, all its transposed scores (over all keys, or
        over `key_tiles` of a K/V segment) in 4 PSUM banks."""
        key_tiles = key_tiles or len(self.key_tiles)
        return (self.views.lse is None and qr <= FEW_QUERIES and self.sk >= FEW_QUERIES_MIN_KEYS
                and self.scale > 0 and self.mask_kind == "none"
                and key_tiles * qr <= 4 * BANK_FP32)

    def _few_queries_block(self, index, q0: int, qr: int, q_rows: Tile, k_t: Tile,
                           values: Tile) -> None:
        """A few queries against many keys, per head, with keys on partitions (`_few_queries_head`),
        each head's output divided by its row sums."""
        v = self.views
        q_t = nl.ndarray((P, self.packs, P), dtype=self.dtype, buffer=nl.sbuf)
        self._transpose_rows(q_t, q_rows, qr)
        ones = self._ones()
        result = nl.ndarray((P, self.heads, self.dv), dtype=v.out.dtype, buffer=nl.sbuf)
        for h in range(self.heads):
            with kernel_scope("head"):
                acc, _ = self._few_queries_head(h, qr, q_t, k_t, values, self.key_tiles, ones)
                inverse = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
                inverse[0:qr] = nisa.reciprocal(acc[0:qr, 0, self.dv:self.dv + 1])
                result[0:qr, h, :] = nisa.tensor_tensor(
                    acc[0:qr, 0, 0:self.dv], inverse.ap([[1, qr], [0, self.dv]]), np.multiply)
        nl.store(_HeadViews.rows(_HeadViews.at(v.out, index), q0, qr), value=result[0:qr])

    def _ones(self) -> Tile:
        ones = nl.ndarray((P, 1), dtype=self.dtype, buffer=nl.sbuf)
        ones[...] = nisa.memset((P, 1), 1.0, self.dtype)
        return ones

    def _few_queries_head(self, h: int, qr: int, q_t: Tile, k_t: Tile, values: Tile,
                          key_tiles: list[tuple[int, int]], ones: Tile) -> tuple[Tile, Tile]:
        """One head's unnormalised output of a few queries over `key_tiles` (of k_t and values),
        keys on partitions: scores^T[k, q] = K^T[d, k]^T @ Q^T[d, q] per key tile, so softmax
        and P @ V run on all 128 lanes (queries on partitions would leave all but a few idle)
        and P^T is already P @ V's stationary operand. The row maximum is a free-axis reduce, a
        transpose and a reduce; it comes back to every partition through a ones-row matmul;
        the sums ride along P @ V as P @ 1. Returns (PSUM [qr, 1, dv + 1]: P @ V, then the row
        sum; the row maximum of the unscaled scores as subtracted, [qr, 1] in the compute
        dtype)."""
        d = self.d
        count = len(key_tiles)
        p, j = divmod(h, self.heads_per_pack)
        kp = 0 if self.k_shared else p
        scores = psum_tile(count, qr)
        for t, (k0, kr) in enumerate(key_tiles):
            scores[0:kr, t, 0:qr] = nisa.nc_matmul(k_t[j * d:(j + 1) * d, kp, k0:k0 + kr],
                                                   q_t[j * d:(j + 1) * d, p, 0:qr])
        # SBUF copy; a last tile's missing rows hold NEG (their exponentials are 0)
        s = nl.ndarray((P, count, qr), dtype=nl.float32, buffer=nl.sbuf)
        last = key_tiles[-1][1]
        full = count if last == P else count - 1
        s[:, 0:full, :] = nisa.tensor_copy(scores[:, 0:full, 0:qr])
        if last < P:
            s[:, count - 1, :] = nisa.memset((P, qr), NEG, nl.float32)
            s[0:last, count - 1, :] = nisa.tensor_copy(scores[0:last, count - 1, 0:qr])
        # the row maximum of each query: over tiles, then over partitions
        lane_max = nl.ndarray((P, qr), dtype=nl.float32, buffer=nl.sbuf)
        lane_max[...] = nisa.tensor_reduce(  # over the key tiles (8 or more)
            np.max, s.ap([[count * qr, P], [1, qr], [qr, count]]), axis=(2,))
        flipped = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.psum)
        flipped[0:qr, :] = nisa.nc_transpose(lane_max[:, 0:qr])
        row_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        row_max[0:qr] = nisa.tensor_reduce(np.max, flipped[0:qr, :], axis=(1,), keepdims=True)
        row = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.psum)
        row[0:1, 0:qr] = nisa.nc_transpose(row_max[0:qr, 0:1])
        neg_row = nl.ndarray((1, P), dtype=self.dtype, buffer=nl.sbuf)
        neg_row[0:1, 0:qr] = nisa.tensor_scalar(row[0:1, 0:qr], np.multiply, -1.0)
        spread = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.psum)
        spread[:, 0:qr] = nisa.nc_matmul(ones.ap([[1, 1], [0, P]]), neg_row[0:1, 0:qr])
        # P^T = exp(scale * (s - max)): keys on partitions
        shifted = nl.ndarray((P, count, qr), dtype=nl.float32, buffer=nl.sbuf)
        shifted[...] = nisa.tensor_tensor(s, spread.ap([[P, P], [0, count], [1, qr]]), np.add)
        probs_t = nl.ndarray((P, count, qr), dtype=self.dtype, buffer=nl.sbuf)
        probs_t[...] = nisa.activation(op=nl.exp, data=shifted, scale=self.scale)
        acc = psum_tile(1, self.dv + 1, zeros=True)
        vh = 0 if self.v_shared else h
        for t, (_, kr) in enumerate(key_tiles):
            acc[0:qr, 0, 0:self.dv] += nisa.nc_matmul(probs_t[0:kr, t, 0:qr],
                                                      values[0:kr, vh, t, :])
            acc[0:qr, 0, self.dv:self.dv + 1] += nisa.nc_matmul(probs_t[0:kr, t, 0:qr],
                                                                ones[0:kr, 0:1])
        used_max = nl.ndarray((P, 1), dtype=self.dtype, buffer=nl.sbuf)
        used_max[0:qr] = nisa.tensor_copy(row_max[0:qr])  # rounded as neg_row was
        return acc, used_max

    def _few_queries_segment(self, qr: int, q_t: Tile, k_t: Tile, values: Tile,
                             key_tiles: list[tuple[int, int]], run: _RunningSoftmax,
                             state: _SoftmaxState, ones: Tile) -> None:
        """Each head of a few queries over one K/V segment, keys on partitions, merged into
        the running softmax."""
        for h in range(self.heads):
            with kernel_scope("head"):
                acc, used_max = self._few_queries_head(h, qr, q_t, k_t, values, key_tiles, ones)
                state.neg_max[0:qr, 0:1] = nisa.tensor_scalar(used_max[0:qr], np.multiply,
                                                              -self.scale, dtype=nl.float32)
                state.sums[0:qr, 0:1] = nisa.tensor_copy(acc[0:qr, 0, self.dv:self.dv + 1])
                run.merge(not run.started, h, 1, qr, state, acc[:, :, 0:self.dv])
                run.started = run.started or h == self.heads - 1

    def _merge_chunk(self, run: _RunningSoftmax, values: Tile, qr: int, first: bool, h0: int,
                     hn: int, k0: int, kw: int, state: _SoftmaxState) -> None:
        with kernel_scope("weighted values"):
            acc = self._values_product(h0, hn, qr, state.probs, values, k0, kw)
            run.merge(first, h0, hn, qr, state, acc)

    def _scores(self, group: tuple[int, int], qr: int, q_t: Tile, k_t: Tile, scores: Tile,
                mask: _MaskTerms | None, keys: tuple[int, int] | None = None, base: int = 0
                ) -> None:
        """scores[:, g, :] = Q_h K_h^T (+ mask / scale) for the heads of the group (fp32 PSUM);
        `keys` are absolute positions, k_t holds keys from `base`.

        The mask is added on TensorE, accumulated into the same PSUM bank: a row shared by all
        queries as ones[1, q]^T @ row[1, k], a full [q, k] mask as identity^T @ mask. In bf16 as
        a high and a low part (~16 significant bits); TensorE has the slack, VectorE does not."""
        h0, hn = group
        d = self.d
        k0, kw = keys or (0, self.sk)
        chunks = tiles(kw, BANK_FP32)
        for g in range(hn):
            p, j = divmod(h0 + g, self.heads_per_pack)
            kp = 0 if self.k_shared else p
            stationary = q_t[j * d:(j + 1) * d, p, 0:qr]
            for i in stamped_range(_past_full(chunks, BANK_FP32)):  # (a call: no branch)
                _score_chunk(scores[0:qr, g, :], stationary, k_t[j * d:(j + 1) * d, kp, :],
                             k0 - base, chunks, i, mask, h0 + g)

    def _row_max(self, hn: int, qr: int, scores: Tile, state: _SoftmaxState) -> None:
        """state.row_max = the row maximum of scale * scores (as a maximum or minimum of the
        unscaled scores); state.neg_max = its negation, the bias of the exponentials."""
        extreme = np.max if self.scale >= 0 else np.min
        for g in range(hn):
            state.row_max[0:qr, g:g + 1] = nisa.tensor_reduce(extreme, scores[0:qr, g, :],
                                                              axis=(1,), keepdims=True)
        state.neg_max[0:qr, 0:hn] = nisa.tensor_scalar(state.row_max[0:qr, 0:hn], np.multiply,
                                                       -self.scale)
        state.source = scores

    def _exponentials(self, hn: int, qr: int, state: _SoftmaxState, width: int | None = None,
                      normalise: bool = True) -> None:
        """probs = exp(act_scale * source + neg_max) (compute dtype) with the row sums
        accumulated by the same ScalarE instructions; inverse = 1 / sum (0 if nothing kept)
        unless `normalise` is off (a key chunk: the sums are merged first)."""
        width = width or self.sk
        for g in range(hn):
            state.probs[0:qr, g, 0:width] = nisa.activation(
                op=nl.exp, data=state.source[0:qr, g, 0:width], scale=self.scale,
                bias=state.neg_max[0:qr, g:g + 1], reduce_op=nl.add,
                reduce_res=state.sums[0:qr, g:g + 1], reduce_cmd=nisa.reduce_cmd.reset_reduce)
        if not normalise:
            return
        state.inverse[0:qr, 0:hn] = nisa.reciprocal(state.sums[0:qr, 0:hn])
        if self.mask_kind in ("bias", "bool"):  # rows with every key masked give 0
            kept = nisa.tensor_scalar(state.neg_max[0:qr, 0:hn], np.less, -NEG / 2,
                                      dtype=nl.float32)
            state.inverse[0:qr, 0:hn] = nl.multiply(state.inverse[0:qr, 0:hn], kept)

    def _weighted_values(self, h0: int, hn: int, qr: int, probs: Tile, values: Tile,
                         inverse: Tile, result: Tile) -> None:
        """result[:, heads] = (P^T)^T @ V / sum, transposing P on TensorE per 128 keys."""
        acc = self._values_product(h0, hn, qr, probs, values, 0, self.sk)
        result[0:qr, h0:h0 + hn, :] = nisa.tensor_tensor(
            acc[0:qr, 0:hn, :], inverse.ap([[1, qr], [1, hn], [0, self.dv]]), np.multiply)

    def _values_product(self, h0: int, hn: int, qr: int, probs: Tile, values: Tile, k0: int,
                        kw: int) -> Tile:
        """PSUM [128, group, dv] = P[:, keys k0..k0+kw] @ V[those keys] for the group's heads,
        unnormalised; `probs` holds the chunk's keys from column 0, `values` every key tile."""
        key_tiles = tiles(kw, P)
        first_tile = k0 // P  # chunks start on a key tile (2048 is a multiple of 128)
        probs_t = nl.ndarray((P, len(key_tiles), self.group, P), dtype=self.dtype, buffer=nl.sbuf)
        # runs of full key tiles as one loop `stamped_range` may replay (its body a call: no
        # scope, no branch), the last iteration the rest (a partial tile, possibly nothing).
        # The evictor's engines are chosen from its turn before the loop (a stamped run does
        # not advance it), then the turn is moved past every copy
        full = len(key_tiles) - (key_tiles[-1][1] < P)
        runs, turn, banks = full // TRANSPOSE_RUN, self.evictor.turn, len(tiles(hn, 4))
        for r in stamped_range(runs + 1):
            self._probability_transposes(hn, qr, probs, probs_t, key_tiles, r, runs, turn)
        self.evictor.turn = turn + len(key_tiles) * banks
        acc = psum_tile(self.group, self.dv, zeros=True)
        for g in range(hn):
            head = 0 if self.v_shared else h0 + g
            for t in stamped_range(_past_full(key_tiles, P)):  # (a call: no branch)
                _value_tile(acc[0:qr, g, :], probs_t[:, :, g, 0:qr], values[:, head, :, :],
                            key_tiles, t, first_tile)
        return acc

    def _probability_transposes(self, hn: int, qr: int, probs: Tile, probs_t: Tile,
                                key_tiles: list[tuple[int, int]], run: int, runs: int,
                                turn: int) -> None:
        """probs_t[:, t] = P[:, key tile t]^T, through PSUM banks, for the key tiles of run
        `run` of `TRANSPOSE_RUN` full tiles (of `runs`), or for the rest after the last run;
        evictions alternate engines from the evictor's `turn` before the first run."""
        t0 = run * TRANSPOSE_RUN
        t1 = len(key_tiles) if run == runs else t0 + TRANSPOSE_RUN
        groups = tiles(hn, 4)
        for t in range(t0, t1):
            c0, kr = key_tiles[t]
            for b, (g0, gn) in enumerate(groups):
                with kernel_scope("probability transposes"):
                    bank = nl.ndarray((P, 4, P), dtype=nl.float32, buffer=nl.psum)
                    for j in range(gn):
                        bank[0:kr, j, 0:qr] = nisa.nc_transpose(probs[0:qr, g0 + j, c0:c0 + kr])
                    engine = "scalar" if (turn + t * len(groups) + b) % 2 == 0 else "vector"
                    self.evictor.copy(probs_t[0:kr, t, g0:g0 + gn, 0:qr],
                                      bank[0:kr, 0:gn, 0:qr], engine)

    # --- masks ---------------------------------------------------------------------------------
    def _mask_terms(self, index, q0: int, qr: int, keys: tuple[int, int] | None = None
                    ) -> _MaskTerms | None:
        """The mask of 128 queries (and keys k0..k0+kw) as what TensorE adds to the scores
        (mask / scale in bf16 parts), or None. Masked-out entries become NEG; a shared row is
        loaded once."""
        if self.mask_kind == "none":
            return None
        if self.scale == 0:
            raise UnsupportedError("attention with a mask and scale 0")
        k0, kw = keys or (0, self.sk)
        if self.mask_kind == "causal":
            high = nl.ndarray((P, 1, kw), dtype=self.mask_dtype, buffer=nl.sbuf)
            if has_gpsimd():
                i_q, i_k = nl.mgrid[0:P, 0:kw]
                zeros = nl.ndarray((P, kw), dtype=self.mask_dtype, buffer=nl.sbuf)
                zeros[...] = nisa.memset((P, kw), 0.0, self.mask_dtype)
                high[:, 0, :] = nisa.affine_select(q0 - k0 + i_q - i_k >= 0, zeros,
                                                   NEG / self.scale)
            else:
                keep = q0 - k0 + np.arange(P)[:, None] - np.arange(kw)[None, :] >= 0
                load_constant(high[:, 0, :], np.where(keep, 0.0, NEG / self.scale),
                              f"causal_mask.q{q0}.k{kw}.s{self.scale:.6g}"
                              + (f".from{k0}" if k0 else ""))
            return _MaskTerms(self.constants, [high], shared_rows=False, per_head=False)
        view = _HeadViews.at(self.views.mask, index)
        per_head = hbm_strides(view)[0] != 0
        shared_rows = hbm_strides(view)[1] == 0
        heads, rows = (self.heads if per_head else 1), (1 if shared_rows else qr)
        if keys is not None:
            view = view[:, :, k0:k0 + kw]
        raw = nl.ndarray((P, heads, kw), dtype=nl.float32, buffer=nl.sbuf)
        source = _HeadViews.rows(view[0:heads], 0 if shared_rows else q0, rows)
        if hbm_strides(source)[2] == 0 and kw > 1:
            # one value per query broadcast along the keys: a DMA would read each element as
            # its own descriptor (rows x keys of them); load the column, broadcast on chip
            column = nl.ndarray((P, heads, 1), dtype=nl.float32, buffer=nl.sbuf)
            column[0:rows] = nl.load(source[:, :, 0:1])
            raw[0:rows] = nisa.tensor_copy(column.ap([[1, rows], [1, heads], [0, kw]]))
        else:
            raw[0:rows] = nl.load(source)
        value = nl.ndarray((P, heads, kw), dtype=nl.float32, buffer=nl.sbuf)
        if self.mask_kind == "bool":  # keep -> 0, drop -> NEG (exact in bf16: one part)
            value[0:rows] = nisa.tensor_scalar(raw[0:rows], np.not_equal, 0.0, op1=np.subtract,
                                               operand1=1.0, dtype=nl.float32)
            high = nl.ndarray((P, heads, kw), dtype=self.mask_dtype, buffer=nl.sbuf)
            high[0:rows] = nisa.tensor_scalar(value[0:rows], np.multiply, -NEG / self.scale)
            return _MaskTerms(self.constants, [high], shared_rows, per_head)
        value[0:rows] = nisa.tensor_scalar(raw[0:rows], np.maximum, NEG, op1=np.multiply,
                                           operand1=1.0 / self.scale)
        high = nl.ndarray((P, heads, kw), dtype=self.mask_dtype, buffer=nl.sbuf)
        high[0:rows] = nisa.tensor_copy(value[0:rows])
        low = nl.ndarray((P, heads, kw), dtype=self.mask_dtype, buffer=nl.sbuf)
        low[0:rows] = nisa.tensor_tensor(value[0:rows], high[0:rows], np.subtract)
        return _MaskTerms(self.constants, [high, low], shared_rows, per_head)


def _past_full(pieces: list[tuple[int, int]], full: int) -> int:
    """Iterations of a stamped loop over `pieces` (`tiles(n, full)`): one more when the last
    piece is full, an iteration that emits nothing (`_score_chunk`, `_value_tile`), so that
    the iteration stamping traces last (`trnsim.nki.stamp`) is that empty one and every full
    piece past the first few is stamped (as `matmul_engine.Engine._k_range` does)."""
    return len(pieces) + (pieces[-1][1] == full)


def _score_chunk(scores: Tile, stationary: Tile, k_t: Tile, start: int,
                 chunks: list[tuple[int, int]], i: int, mask: _MaskTerms | None,
                 head: int) -> None:
    """scores[:, chunk i] = Q_h K_h^T (+ mask) for one head (`_Attention._scores`; scores
    [qr, keys], k_t [d, keys from `start` on]); nothing past the last chunk."""
    if i == len(chunks):
        return
    c0, cw = chunks[i]
    view = scores[:, c0:c0 + cw]
    view[...] = nisa.nc_matmul(stationary, k_t[:, start + c0:start + c0 + cw])
    if mask is not None:
        mask.accumulate(view, head, c0, cw)


def _value_tile(acc: Tile, probs_t: Tile, values: Tile, key_tiles: list[tuple[int, int]],
                t: int, first_tile: int) -> None:
    """acc += P^T[key tile t]^T @ V[key tile t] for one head (`_Attention._values_product`;
    probs_t [keys, tiles, qr], values [keys, tiles, dv]); nothing past the last key tile."""
    if t == len(key_tiles):
        return
    kr = key_tiles[t][1]
    acc[...] += nisa.nc_matmul(probs_t[0:kr, t, :], values[0:kr, first_tile + t, :])


def _holds_neg(dtype) -> bool:
    return as_dtype(dtype).max > -NEG


class _Constants:
    """Stationary operands for adding masks on TensorE: a ones row and an identity."""

    def __init__(self, dtype) -> None:
        self.ones = nl.ndarray((1, P), dtype=dtype, buffer=nl.sbuf)
        self.ones[...] = nisa.memset((1, P), 1.0, dtype)
        self.identity = nl.ndarray((P, P), dtype=dtype, buffer=nl.sbuf)
        if not has_gpsimd():
            load_constant(self.identity, np.eye(P), "identity")
            return
        ones = nl.ndarray((P, P), dtype=dtype, buffer=nl.sbuf)
        ones[...] = nisa.memset((P, P), 1.0, dtype)
        i_p, i_f = nl.mgrid[0:P, 0:P]
        self.identity[...] = nisa.affine_select(i_p - i_f == 0, ones, 0.0)


class _MaskTerms:
    """mask / scale as bf16 parts ([rows, heads, sk] tiles) and how to add them to scores."""

    def __init__(self, constants: _Constants, parts: list[Tile], shared_rows: bool,
                 per_head: bool) -> None:
        self.constants, self.parts = constants, parts
        self.shared_rows, self.per_head = shared_rows, per_head

    def accumulate(self, scores: Tile, head: int, c0: int, cw: int) -> None:
        qr = scores.shape[0]
        h = head if self.per_head else 0
        for part in self.parts:
            if self.shared_rows:
                scores[...] += nisa.nc_matmul(self.constants.ones[0:1, 0:qr],
                                              part[0:1, h, c0:c0 + cw])
            else:
                scores[...] += nisa.nc_matmul(self.constants.identity[0:qr, 0:qr],
                                              part[0:qr, h, c0:c0 + cw])


class _SoftmaxState:
    """The SBUF buffers one head group's softmax passes between its pipeline stages."""

    def __init__(self, group: int, sk: int, dtype) -> None:
        self.row_max = nl.ndarray((P, group), dtype=nl.float32, buffer=nl.sbuf)
        self.neg_max = nl.ndarray((P, group), dtype=nl.float32, buffer=nl.sbuf)
        self.sums = nl.ndarray((P, group), dtype=nl.float32, buffer=nl.sbuf)
        self.inverse = nl.ndarray((P, group), dtype=nl.float32, buffer=nl.sbuf)
        self.probs = nl.ndarray((P, group, sk), dtype=dtype, buffer=nl.sbuf)
        self.source: Tile | None = None


class _RunningSoftmax:
    """Online softmax across key chunks for all heads of 128 queries (fp32, SBUF): the running
    row maximum m, sum l and unnormalised output o. A chunk with maximum m_c, sum l_c and output
    o_c merges as m' = max(m, m_c), l = l e^(m - m') + l_c e^(m_c - m'), likewise o."""

    def __init__(self, heads: int, dv: int) -> None:
        self.dv = dv
        self.row_max = nl.ndarray((P, heads), dtype=nl.float32, buffer=nl.sbuf)
        self.sums = nl.ndarray((P, heads), dtype=nl.float32, buffer=nl.sbuf)
        self.out = nl.ndarray((P, heads, dv), dtype=nl.float32, buffer=nl.sbuf)
        self.started = False  # a chunk has been merged (the first one is copied, not merged)

    def merge(self, first: bool, h0: int, hn: int, qr: int, chunk: _SoftmaxState,
              acc: Tile) -> None:
        heads = slice(h0, h0 + hn)
        chunk_max = nisa.tensor_scalar(chunk.neg_max[0:qr, 0:hn], np.multiply, -1.0)
        if first:
            self.row_max[0:qr, heads] = nisa.tensor_copy(chunk_max)
            self.sums[0:qr, heads] = nisa.tensor_copy(chunk.sums[0:qr, 0:hn])
            self.out[0:qr, heads, :] = nisa.tensor_copy(acc[0:qr, 0:hn, :])
            return
        new_max = nisa.tensor_tensor(self.row_max[0:qr, heads], chunk_max, np.maximum)
        old_weight = nl.ndarray((P, hn), dtype=nl.float32, buffer=nl.sbuf)
        new_weight = nl.ndarray((P, hn), dtype=nl.float32, buffer=nl.sbuf)
        old_weight[0:qr] = nisa.activation(op=nl.exp, data=nisa.tensor_tensor(
            self.row_max[0:qr, heads], new_max, np.subtract))
        new_weight[0:qr] = nisa.activation(op=nl.exp, data=nisa.tensor_tensor(
            chunk_max, new_max, np.subtract))
        self.sums[0:qr, heads] = nisa.tensor_tensor(
            nisa.tensor_tensor(self.sums[0:qr, heads], old_weight[0:qr], np.multiply),
            nisa.tensor_tensor(chunk.sums[0:qr, 0:hn], new_weight[0:qr], np.multiply), np.add)
        spread = [[1, qr], [1, hn], [0, self.dv]]
        self.out[0:qr, heads, :] = nisa.tensor_tensor(
            nisa.tensor_tensor(self.out[0:qr, heads, :], old_weight.ap(spread), np.multiply),
            nisa.tensor_tensor(acc[0:qr, 0:hn, :], new_weight.ap(spread), np.multiply), np.add)
        self.row_max[0:qr, heads] = nisa.tensor_copy(new_max)

    def log_sum_exp(self, qr: int) -> Tile:
        """m + ln(l) per row and head (fp32), the scaled scores' log-sum-exp."""
        total = nl.ndarray((P, self.sums.shape[1]), dtype=nl.float32, buffer=nl.sbuf)
        total[0:qr] = nisa.tensor_tensor(nisa.activation(op=nl.log, data=self.sums[0:qr]),
                                         self.row_max[0:qr], np.add)
        return total

    def finish(self, qr: int, result: Tile, drop_empty_rows: bool) -> None:
        """result = o / l; rows with every key masked out (m still at NEG) give 0."""
        heads = self.sums.shape[1]
        inverse = nl.ndarray((P, heads), dtype=nl.float32, buffer=nl.sbuf)
        inverse[0:qr] = nisa.reciprocal(self.sums[0:qr])
        if drop_empty_rows:
            kept = nisa.tensor_scalar(self.row_max[0:qr], np.greater, NEG / 2, dtype=nl.float32)
            inverse[0:qr] = nl.multiply(inverse[0:qr], kept)
        result[0:qr] = nisa.tensor_tensor(self.out[0:qr],
                                          inverse.ap([[1, qr], [1, heads], [0, self.dv]]),
                                          np.multiply)


def psum_tile(count: int, width: int, zeros: bool = False) -> Tile:
    """A [128, count, width] fp32 PSUM view over whole banks (keeps the PSUM ring bank-aligned;
    width <= 512 never straddles a bank when count * width <= 512). With `zeros`, the first
    matmul into each part starts a fresh accumulation."""
    banks = ceil_div(count * width, BANK_FP32)
    make = nl.zeros if zeros else nl.ndarray
    tile = make((P, banks * BANK_FP32), dtype=nl.float32, buffer=nl.psum)
    return tile.ap([[1, P], [width, count], [1, width]])
