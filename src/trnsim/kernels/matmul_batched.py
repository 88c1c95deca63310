"""Batched matmuls of small problems, several batch items per DMA.

Attention's products (per head: [128, 64] @ [64, 128] scores, [128, 128] @ [128, 64] values and
their gradients) are hundreds of problems that each fit one TensorE pass: k <= 128 contraction
partitions, m <= 128 stationary columns, n <= 512 moving columns (one PSUM bank). Run one at a
time, every item pays a DMA per operand and one for its result, and the kernel is bound by the
DMA engines' fixed cost per transfer rather than by bytes or TensorE. When the items of each
operand step uniformly through HBM (a batch stride), a group of items moves in one DMA:
[partitions, items, free] into SBUF, and one [m, items, n] store of the results. Per item, an
operand stored as rows (its contraction axis contiguous) is transposed on TensorE (four per
PSUM bank), then one matmul, the bias / epilogue on its PSUM block, and the cast into the
group's output tile.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod

from trnsim.kernels.layout import (
    BANK_FP32,
    Evictor,
    P,
    _merge_uniform,
    broadcast_row,
    hbm_strides,
    hbm_view,
    kernel_scope,
    tiles,
)
from trnsim.nki import isa as nisa
from trnsim.nki import language as nl
from trnsim.nki.tile import Tile
from trnsim.numerics import dtype as as_dtype

# SBUF bytes per partition one group's tiles may take (operands, their transposes, extras and
# the output): groups rotate, so two are in flight; 24 KiB each stays inside the headroom a
# kernel leaves (`layout.KERNEL_HEADROOM_BYTES`).
GROUP_SBUF_BYTES = 24 * 1024
# Contractions up to this many 128-partition tiles are grouped (accumulated in PSUM per item):
# attention's products over a sequence a little past 128 (ViT's 197 tokens)
MAX_K_TILES = 4


@dataclass(frozen=True)
class Batched:
    """A tensor's items as [count, rows, cols] with strides (batch, row, col)."""

    tile: Tile
    count: int
    strides: tuple[int, int, int]
    shape: tuple[int, int]

    @staticmethod
    def of(tile: Tile, batch: int, transposed: bool = False) -> Batched | None:
        """`tile` [*batch, r, c] as items (the [c, r] view of each when `transposed`), or None
        when its batch axes do not step uniformly."""
        strides = hbm_strides(tile)
        folded = _merge_uniform(tile.shape[:batch], strides[:batch])
        if folded is None:
            return None
        (r, c), (rs, cs) = tile.shape[batch:], strides[batch:]
        if transposed:
            r, c, rs, cs = c, r, cs, rs
        return Batched(tile, folded[0], (folded[1], rs, cs), (r, c))

    def group(self, g0: int, count: int, rows_on_partitions: bool) -> Tile:
        """HBM view of items g0..g0+count as [partitions, count, free]: rows on partitions, or
        (not `rows_on_partitions`) the columns."""
        bs, rs, cs = self.strides
        r, c = self.shape
        if rows_on_partitions:
            return hbm_view(self.tile, (r, count, c), (rs, bs, cs), offset=g0 * bs)
        return hbm_view(self.tile, (c, count, r), (cs, bs, rs), offset=g0 * bs)


def grouped_matmul(out: Tile, a: Tile, b: Tile, extras: Sequence[Tile], batch: tuple[int, ...],
                   transpose_a: bool, transpose_b: bool, compute_dtype, bias: Tile | None,
                   epilogue) -> bool:
    """out[i] = epilogue(a[i] @ b[i] + bias, extras[i]) for every batch item, items grouped per
    DMA (module docstring). Returns False, having emitted nothing, when the problem is not one
    it handles: items larger than one TensorE pass, or operands whose items or inner axes do
    not step in a way one DMA can read."""
    nb = len(batch)
    m, n = out.shape[-2:]
    lhs = Batched.of(a, nb, transpose_a)  # items [m, k]
    rhs = Batched.of(b, nb, transpose_b)  # items [k, n]
    res = Batched.of(out, nb)
    ext = [Batched.of(e, nb) for e in extras]
    if lhs is None or rhs is None or res is None or any(e is None for e in ext):
        if nb < 2:
            return False
        # batch axes that do not step as one ([batch, heads] of a [b, s, h, d] tensor read
        # as [b, h, s, d]): the leading axis is looped, the rest grouped per DMA. Every index
        # has the same strides, so the first index decides for all (nothing is emitted when
        # it declines)
        for i in range(batch[0]):
            done = grouped_matmul(out[i], a[i], b[i], [e[i] for e in extras], batch[1:],
                                  transpose_a, transpose_b, compute_dtype, bias, epilogue)
            if not done:
                return False
        return True
    if res.strides[2] != 1 and res.strides[1] == 1 and bias is None:
        # items written transposed (a key's gradient into a [b, s, h, d] tensor): out^T =
        # B^T @ A^T, whose items are rows in place (element-wise epilogues commute with it)
        return grouped_matmul(_swapped(out), b, a, [_swapped(e) for e in extras], batch,
                              not transpose_b, not transpose_a, compute_dtype, None, epilogue)
    k = lhs.shape[1]
    count = prod(batch)
    if count < 2 or k > MAX_K_TILES * P or n > BANK_FP32 or res.strides[2] != 1 \
            or any(e.strides[2] != 1 for e in ext):
        return False
    if m > P:  # rows past one stationary tile (ViT's 197 tokens): one grouped pass per 128
        # rows; every pass meets the same conditions, so the first decides for all
        for r0, rr in tiles(m, P):
            rows = _rows(r0, rr, nb)
            a_rows_of = a[(*rows[:nb], slice(None), rows[nb])] if transpose_a else a[rows]
            if not grouped_matmul(out[rows], a_rows_of, b, [e[rows] for e in extras], batch,
                                  transpose_a, transpose_b, compute_dtype, bias, epilogue):
                return False
        return True
    if rhs.strides[2] != 1 and n > P:  # B's items transposed on TensorE, at most 128 columns
        # at a time: one grouped pass per 128 columns of the result
        for c0, cw in tiles(n, P):
            cols = (*(slice(None),) * (nb + 1), slice(c0, c0 + cw))
            b_cols = b[cols] if not transpose_b else b[(*cols[:nb], slice(c0, c0 + cw))]
            if not grouped_matmul(out[cols], a, b_cols, [e[cols] for e in extras], batch,
                                  transpose_a, transpose_b, compute_dtype,
                                  bias[c0:c0 + cw] if bias is not None else None, epilogue):
                return False
        return True
    # the stationary side wants [k, m] (k on partitions): K-major items ([m, k] stepping by 1
    # along m) load as they are, rows (k contiguous) are transposed; the moving side wants
    # [k, n]: rows of n load as they are, items with k contiguous are transposed
    a_rows = lhs.strides[2] == 1
    b_rows = rhs.strides[2] != 1
    if (not a_rows and lhs.strides[1] != 1) or (b_rows and (rhs.strides[1] != 1 or n > P)):
        return False
    # a contraction past 128 partitions accumulates its 128-row parts in PSUM
    parts = tiles(k, P)
    lhs_parts = [Batched.of(_k_part(a, nb, k0, kw, not transpose_a), nb, transpose_a)
                 for k0, kw in parts]
    rhs_parts = [Batched.of(_k_part(b, nb, k0, kw, transpose_b), nb, transpose_b)
                 for k0, kw in parts]
    cbytes = as_dtype(compute_dtype).itemsize
    per_item = (len(parts) * (cbytes * (m + (P if a_rows else 0)) + cbytes * (n + (P if b_rows
                                                                               else 0)))
                + out.dtype_spec.itemsize * n + sum(e.tile.dtype_spec.itemsize * n for e in ext))
    group = max(1, min(count, GROUP_SBUF_BYTES // per_item))
    evictor = Evictor()
    bias_tile = broadcast_row(bias, evictor) if bias is not None else None
    with kernel_scope("grouped matmul"):
        for g0, gn in tiles(count, group):
            with kernel_scope("matmul group"):
                _group(lhs_parts, rhs_parts, res, ext, g0, gn, (m, n), a_rows, b_rows,
                       compute_dtype, bias_tile, epilogue, evictor)
    return True


def _swapped(tile: Tile) -> Tile:
    """`tile` [*batch, r, c] viewed as [*batch, c, r]."""
    strides = hbm_strides(tile)
    return hbm_view(tile, (*tile.shape[:-2], tile.shape[-1], tile.shape[-2]),
                    (*strides[:-2], strides[-1], strides[-2]))


def _rows(r0: int, rr: int, nb: int) -> tuple:
    """Index of rows r0..r0+rr of every item of a [*batch, r, c] tile."""
    return (*(slice(None),) * nb, slice(r0, r0 + rr))


def _k_part(t: Tile, nb: int, k0: int, kw: int, k_last: bool) -> Tile:
    """Contraction indices k0..k0+kw of operand `t` [*batch, r, c], k its last axis or not."""
    index = (*(slice(None),) * nb, slice(None), slice(k0, k0 + kw)) if k_last else \
        (*(slice(None),) * nb, slice(k0, k0 + kw))
    return t[index]


def _group(lhs_parts: list[Batched], rhs_parts: list[Batched], res: Batched, ext: list[Batched],
           g0: int, gn: int, mn: tuple[int, int], a_rows: bool, b_rows: bool, compute_dtype,
           bias_tile: Tile | None, epilogue, evictor: Evictor) -> None:
    m, n = mn
    pairs = [(_operand(lhs, g0, gn, a_rows, a_rows, (lhs.shape[1], m), compute_dtype, evictor),
              _operand(rhs, g0, gn, b_rows, not b_rows, (rhs.shape[0], n), compute_dtype,
                       evictor), lhs.shape[1]) for lhs, rhs in zip(lhs_parts, rhs_parts,
                                                                    strict=True)]
    blocks = []
    for e in ext:
        block = nl.ndarray((m, gn, n), dtype=e.tile.dtype, buffer=nl.sbuf)
        block[...] = nl.load(e.group(g0, gn, True))
        blocks.append(block)
    stage = nl.ndarray((m, gn, n), dtype=res.tile.dtype, buffer=nl.sbuf)
    for i in range(gn):
        with kernel_scope("matmul item"):
            acc = nl.ndarray((P, BANK_FP32), dtype=nl.float32, buffer=nl.psum)
            for j, (a_t, b_t, k) in enumerate(pairs):
                product = nisa.nc_matmul(a_t[0:k, i, 0:m], b_t[0:k, i, 0:n])
                if j == 0:
                    acc[0:m, 0:n] = product
                else:
                    acc[0:m, 0:n] += product
            value = acc[0:m, 0:n]
            if bias_tile is not None:
                biased = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.sbuf)
                biased[...] = nl.add(value, bias_tile[0:m, 0:n], dtype=nl.float32)
                value = biased
            if epilogue is not None:
                stage[0:m, i, 0:n] = epilogue(value, [block[0:m, i, 0:n] for block in blocks])
            else:
                evictor.copy(stage[0:m, i, 0:n], value)
    nl.store(res.group(g0, gn, True), value=stage)


def _operand(items: Batched, g0: int, gn: int, transpose: bool, rows_on_partitions: bool,
             shape: tuple[int, int], compute_dtype, evictor: Evictor) -> Tile:
    """Items g0..g0+gn of one operand as SBUF [k, gn, width] (`shape` = (k, width)): loaded
    that way in one DMA, or (`transpose`: k is the contiguous axis) loaded as [width, gn, k] in
    one DMA and transposed on TensorE, four items per PSUM bank. `rows_on_partitions`: which
    axis of the items the loaded tile puts on partitions."""
    k, width = shape
    view = items.group(g0, gn, rows_on_partitions)
    if not transpose:
        kmajor = nl.ndarray((k, gn, width), dtype=compute_dtype, buffer=nl.sbuf)
        kmajor[...] = nl.load(view)
        return kmajor
    rows = nl.ndarray((width, gn, k), dtype=compute_dtype, buffer=nl.sbuf)
    rows[...] = nl.load(view)
    kmajor = nl.ndarray((k, gn, width), dtype=compute_dtype, buffer=nl.sbuf)
    for b0, bn in tiles(gn, 4):
        with kernel_scope("transpose bank"):
            bank = nl.ndarray((P, 4, P), dtype=nl.float32, buffer=nl.psum)
            for j in range(bn):
                bank[0:k, j, 0:width] = nisa.nc_transpose(rows[0:width, b0 + j, 0:k])
            evictor.copy(kmajor[0:k, b0:b0 + bn, 0:width], bank[0:k, 0:bn, 0:width])
    return kmajor
