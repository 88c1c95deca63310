"""Data-movement plans for the matmul engine: operands as stored, K tiling, residency choice.

`choose_plan` decides, for ``acc = L @ R`` with L [rows, K] (stationary side) and R [K, cols]
(moving side), which operand stays resident in SBUF, how wide the streamed operand's DMA blocks
are, whether they stream in K chunks, and whether K tiles are interleaved; see
`trnsim.kernels.matmul_engine` for the reasons. Budgets are SBUF bytes per partition.
"""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.errors import UnsupportedError
from trnsim.kernels.layout import (
    BANK_FP32,
    DMA_PIECE_BYTES,
    EFFICIENT_RUN_BYTES,
    KERNEL_HEADROOM_BYTES,
    P,
    ceil_div,
    hbm_strides,
    hbm_view,
)
from trnsim.nki.tile import Tile


class NeedsKMajor(UnsupportedError):
    """The plan cannot (or should not) stream a row-major operand: store it K-major first."""


MAX_BLOCK = 2048  # widest streamed block: 2048 bf16 columns = 4 KiB per descriptor
RESIDENT_SHARE = 5 / 8  # of the operand budget, what a resident operand may take (80 of 128 KiB)
# PSUM banks all accumulators of a k-streamed block may take (the ring alternates two such sets)
K_STREAM_BANKS = 4


@dataclass(frozen=True)
class Operand:
    """One matmul operand as stored in HBM: `matrix` is [K, width] if `k_major` else [width, K]."""

    matrix: Tile
    k_major: bool

    @staticmethod
    def of(matrix: Tile, k_major: bool) -> Operand:
        """The operand read the way its bytes lie: a "K-major" view whose K axis is the
        contiguous one (a transposed weight, say) is really rows, and vice versa; reading it
        as declared would cost one DMA descriptor per element."""
        inner, outer = hbm_strides(matrix)[1], hbm_strides(matrix)[0]
        if inner != 1 and outer == 1 and matrix.shape[0] > 1:
            flipped = hbm_view(matrix, matrix.shape[::-1], (inner, outer))
            return Operand(flipped, not k_major)
        return Operand(matrix, k_major)

    @property
    def width(self) -> int:
        return self.matrix.shape[1] if self.k_major else self.matrix.shape[0]

    @property
    def k(self) -> int:
        return self.matrix.shape[0] if self.k_major else self.matrix.shape[1]

    def columns(self, start: int, count: int) -> Tile:
        """The [K, count] (K-major) or [count, K] (rows) view of columns start..start+count."""
        if self.k_major:
            return self.matrix[:, start:start + count]
        return self.matrix[start:start + count, :]


@dataclass(frozen=True)
class KTiling:
    """Which rows of K each 128-partition K tile holds (see "Interleaved K tiles")."""

    k: int
    interleave: bool

    @property
    def full(self) -> int:
        return self.k // P

    @property
    def count(self) -> int:
        return ceil_div(self.k, P)

    def rows(self, t: int) -> int:
        return P if t < self.full else self.k - self.full * P

    def kmajor_view(self, matrix: Tile, t0: int, n: int) -> Tile:
        """HBM [128, n, W] view of full K tiles t0..t0+n of a K-major [K, W] matrix."""
        rs, cs = hbm_strides(matrix)
        width = matrix.shape[1]
        if self.interleave:
            return hbm_view(matrix, (P, n, width), (self.full * rs, rs, cs), offset=t0 * rs)
        return hbm_view(matrix, (P, n, width), (rs, P * rs, cs), offset=t0 * P * rs)

    def rest_view(self, matrix: Tile) -> Tile:
        return matrix[self.full * P:self.k, :]

    def row_columns(self, rows: Tile, t: int) -> Tile:
        """The [R, rows(t)] columns of SBUF rows [R, K] that form K tile t."""
        if t >= self.full:
            return rows[:, self.full * P:self.k]
        if self.interleave:
            return rows[:, t:self.full * P:self.full]
        return rows[:, t * P:(t + 1) * P]


@dataclass(frozen=True)
class Plan:
    """How the engine moves data (see the module docstring)."""

    streamed: str  # "rhs": L resident, R streamed (column blocks outer); "lhs": the reverse
    block: int  # streamed block width (columns of the streamed operand)
    k_chunk: int  # K tiles per streamed buffer; == KT means whole-K blocks
    super_block: int  # R columns resident at once (== cols unless neither operand fits)
    col_group: int  # output columns per accumulation group (multiple of 512)
    interleave: bool
    first_rows: int = 0  # row tiles of the first pass over a resident R (0: none)
    stages: int = 3  # staging buffers of a streamed row-major operand (fetch-ahead + 1)


RESIDENT_STAGES = 3  # staging buffers of a resident row-major operand (`StagedLoader`'s default)


def choose_plan(rows: int, cols: int, k: int, lhs: Operand, rhs: Operand, compute_bytes: int,
                max_acc_banks: int, compute_bound: bool, budget: int) -> Plan:
    """Pick residency, block widths, K chunking and K tiling for ``[rows, K] @ [K, cols]``.

    `compute_bound`: TensorE, not DMA, is expected to bound the kernel; then a start that gets
    TensorE going early (R resident, first pass) beats one that orders DMA best. `budget`: SBUF
    bytes per partition for operand buffers (`layout.operand_budget_bytes`)."""
    resident_cap = int(budget * RESIDENT_SHARE)
    kt = ceil_div(k, P)
    lhs_bytes, rhs_bytes = kt * rows * compute_bytes, kt * cols * compute_bytes
    group = min(ceil_div(cols, BANK_FP32), max_acc_banks) * BANK_FP32
    # R resident with L streamed row tile by row tile starts TensorE on the first rows while R
    # is still arriving (`Engine._first_pass`); prefer it when L is many row tiles of rows
    first_pass = (compute_bound and not lhs.k_major and ceil_div(rows, P) > K_STREAM_BANKS
                  and kt > 1 and rhs_bytes <= resident_cap)
    if lhs_bytes <= resident_cap and not first_pass and (
            lhs_bytes <= rhs_bytes or rhs_bytes > resident_cap):
        # L stored as rows reaches SBUF through `RESIDENT_STAGES` staging tiles of whole rows of K
        # (`StagedLoader`); the kernel headroom holds them, and what overflows it is taken
        # from R's buffers. A K long enough (a vocabulary) leaves R no room: L is then
        # transposed to K-major in HBM once and loaded with no staging at all.
        staging = 0 if lhs.k_major else RESIDENT_STAGES * k * compute_bytes
        rhs_budget = budget - lhs_bytes - max(0, staging - KERNEL_HEADROOM_BYTES)
        if rhs_budget < 2 * P * compute_bytes:
            raise NeedsKMajor(f"matmul rows of K = {k} staged beside a resident operand: "
                              f"{staging} bytes per partition of staging leave no SBUF room")
        block, chunk = _stream_shape(rhs, kt, ceil_div(rows, P) * BANK_FP32, compute_bytes,
                                     rhs_budget, cols, BANK_FP32)
        group = min(group, block) if chunk == kt else block
        return Plan("rhs", block, chunk, cols, group, _interleave(rhs, block, chunk, kt,
                                                               compute_bytes))
    super_block = cols
    resident_budget = resident_cap
    first_rows, stages = 0, 3
    if not lhs.k_major:  # rows streamed 128 at a time: block and staging buffers (StagedLoader)
        first_rows, stages, buffers = _row_buffers(rows, kt, compute_bytes, cols, budget)
        resident_budget = min(resident_budget, budget - buffers * kt * P
                              * compute_bytes)
    if rhs_bytes > resident_budget:
        fitting = resident_budget // (kt * compute_bytes)
        # whole PSUM banks when at least one fits; a contraction as long as a vocabulary
        # (K = 30522: 239 K tiles) leaves room for fewer columns, in whole 128-column tiles
        super_block = (fitting // BANK_FP32 * BANK_FP32 if fitting >= BANK_FP32
                       else max(P, fitting // P * P))
        if not lhs.k_major and super_block < cols:
            raise NeedsKMajor("L would be re-streamed, and re-transposed, once per R super-block")
    resident = kt * min(super_block, cols) * compute_bytes
    width = min(super_block, cols)
    acc_columns = width if width < BANK_FP32 else round_up(width, BANK_FP32)
    block, chunk = _stream_shape(lhs, kt, acc_columns, compute_bytes,
                                 budget - resident, rows, P)
    return Plan("lhs", block, chunk, super_block, group,
                _interleave(lhs, block, chunk, kt, compute_bytes), first_rows, stages)


def _row_buffers(rows: int, kt: int, compute_bytes: int, cols: int,
                 budget: int) -> tuple[int, int, int]:
    """(first-pass row tiles, staging stages, row-sized buffers) for streaming L as rows: the
    deepest configuration whose buffers leave room for at least a 512-column resident R."""
    unit = kt * P * compute_bytes  # one 128-row tile, K-major or staged
    room = budget - kt * min(cols, BANK_FP32) * compute_bytes
    first = min(K_STREAM_BANKS, ceil_div(rows, P)) if ceil_div(rows, P) > 1 and kt > 1 else 0
    for first_rows, stages in ((first, 3), (0, 3), (0, 2)):
        buffers = max(2, first_rows) + stages
        if buffers * unit <= room:
            return first_rows, stages, buffers
    raise NeedsKMajor(f"matmul streaming rows of K = {kt * P}: {5 * unit} bytes per "
                           f"partition of row buffers do not fit SBUF; store that operand "
                           f"K-major (transposed) or split K")


def _stream_shape(operand: Operand, kt: int, acc_columns: int, compute_bytes: int, budget: int,
                  width: int, tile_width: int) -> tuple[int, int]:
    """(block width, K tiles per buffer) of the streamed operand.

    `acc_columns` is the fp32 PSUM columns the accumulators of one block need per `tile_width`
    columns of the streamed operand (accumulators narrower than a bank share one). Rows (not
    K-major) are transposed 128 at a time and streamed in whole-K blocks. A K-major operand is
    read in wide blocks: whole-K blocks if two fit the budget, else K chunks when the block's
    accumulators all fit in `K_STREAM_BANKS` PSUM banks at once.
    """
    if not operand.k_major:
        if tile_width == P:
            return min(P, width), kt
        # 128-row pieces: two K-major block buffers and three staging buffers per piece
        pieces = min(4, budget // (5 * kt * P * compute_bytes))
        if pieces < 1:
            raise NeedsKMajor(f"matmul streaming rows of K = {kt * P}: the row buffers do "
                                   f"not fit SBUF; store that operand K-major or split K")
        return min(pieces * P, width), kt
    whole = MAX_BLOCK
    while whole > P and 2 * kt * whole * compute_bytes > budget:
        whole //= 2
    chunked = 0
    if acc_columns <= K_STREAM_BANKS * BANK_FP32:
        chunked = min(MAX_BLOCK, (K_STREAM_BANKS * BANK_FP32 // acc_columns) * tile_width)
    if chunked > whole and kt > 1:
        block = min(chunked, round_up(width, tile_width))
        # K tiles per buffer: a DMA-sized piece, but two buffers (the ring) within the budget
        fit = budget // (2 * block * compute_bytes)
        if fit >= 1:
            return block, max(1, min(kt, DMA_PIECE_BYTES * 4 // (block * compute_bytes), fit))
    return min(whole, round_up(width, P)), kt


def _interleave(operand: Operand, block: int, chunk: int, kt: int, compute_bytes: int) -> bool:
    """Interleave K tiles when a streamed K-major block spans whole, short rows."""
    if not operand.k_major or operand.k // P < 2:
        return False
    whole_rows = block >= operand.width and hbm_strides(operand.matrix)[0] == operand.width \
        and hbm_strides(operand.matrix)[1] == 1
    return whole_rows and operand.width * compute_bytes < EFFICIENT_RUN_BYTES


def round_up(value: int, multiple: int) -> int:
    return ceil_div(value, multiple) * multiple
