"""The tiling engine behind matmul: PSUM accumulation of stationary.T @ moving over K.

TensorE computes ``psum[m, n] (+)= stationary[k, m]^T @ moving[k, n]`` for k <= 128 partitions,
m <= 128 and n <= 512 (one PSUM bank of fp32). The engine computes ``acc = L @ R`` for a 2-D
problem: L is [rows, K] (its rows become the output's partitions: the stationary side), R is
[K, cols] (streamed through the array: the moving side). Each operand reaches SBUF K-major
([128, KT, width], the contraction axis on partitions): straight from HBM if stored K-major, else
as rows through TensorE transposes. Every output block is accumulated over all of K in PSUM and
handed to a *sink* (bias, epilogue, store) exactly once.

What the engine decides is data movement (`trnsim.kernels.matmul_plan.choose_plan`):

- One operand is **resident** (loaded once, kept), the other **streamed** in blocks, each loaded
  once and used by every tile of the resident side before it is dropped; the smaller operand is
  resident when it fits, so each HBM byte is read once. When neither fits, the moving side is
  split into super-blocks that do (the stationary side is re-streamed once per super-block).
- The simulator's DMA engines serve transfers first come, first served in program order (as a
  hardware queue does), so loads are emitted **just in time**: a resident operand's pieces right
  before their first use, a streamed block at the top of its iteration. The DMA engines then
  move bytes in the order TensorE consumes them and the first matmul waits for little data.
- When TensorE bounds the kernel and L is many row tiles, R is resident and the first four row
  tiles accumulate against R K tile by K tile while R arrives (`_first_pass`): TensorE works
  from the first K tile instead of idling until all of R has landed.
- A streamed K-major operand is read in wide DMA blocks (>= 4 KiB per partition per descriptor
  where the shape allows). When all accumulators of a block fit in PSUM at once (few stationary
  tiles, e.g. 128 tokens) the block is streamed in K chunks through small rotating buffers
  ("k-streaming"). Row tiles are software-pipelined (`StagedLoader`): DMA two tiles ahead,
  TensorE transposes one tile ahead, so transposes never wait for their DMA in TensorE's
  in-order stream.
- **Interleaved K tiles.** K tile t may hold any 128 rows of K as long as both operands agree.
  With ``interleave``, partition p of tile t holds row ``p * KT + t``: a K-major block spanning
  whole rows is then one contiguous run per partition across K tiles (runs of chunk x width
  instead of width elements), and the row-major side reads its columns with stride KT before
  transposing them. Used when a whole-row block would otherwise give runs under 4 KiB.
- Buffers rotate (ring allocation, or explicit rotation for pipelined ones): loads of block i+1
  overlap the matmuls of block i. Accumulators take at most `max_acc_banks` PSUM banks (4 when
  k-streaming); the next block gets other banks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from trnsim.kernels.layout import (
    BANK_FP32,
    DMA_PIECE_BYTES,
    Evictor,
    P,
    ceil_div,
    kernel_scope,
    operand_budget_bytes,
    tiles,
)
from trnsim.kernels.matmul_plan import (
    K_STREAM_BANKS,
    MAX_BLOCK,
    KTiling,
    Operand,
    choose_plan,
    round_up,
)
from trnsim.nki import isa as nisa
from trnsim.nki import language as nl
from trnsim.nki.stamp import stamped_range
from trnsim.nki.tile import Tile
from trnsim.nki.trace import current_trace
from trnsim.numerics import dtype as as_dtype

Sink = Callable[[Tile, int, int], None]  # sink(acc [rows, cols] in PSUM, row0, col0)


# Engines an int8 weight block's conversion to the compute dtype alternates between: both read
# and write SBUF at one element per lane per cycle; GpSimd, the third engine that can copy, runs
# far fewer lanes (hardware reference: 16 fp32 per cycle), so it is left out.
DEQUANTIZE_ENGINES = (nisa.vector_engine, nisa.scalar_engine)


def core_of_trace():
    return current_trace().core


class Engine:
    """Runs one plan: emits loads, transposes and matmuls and calls the sink per output block."""

    def __init__(self, lhs: Operand, rhs: Operand, sink: Sink, *, compute_dtype,
                 max_acc_banks: int = 2, evictor: Evictor | None = None,
                 out_bytes: int = 4, reserved_bytes: int = 0) -> None:
        """`reserved_bytes`: SBUF bytes per partition the caller holds for the whole kernel
        (a broadcast bias): the plan's operand buffers shrink (smaller blocks) to leave them."""
        if lhs.k != rhs.k:
            raise ValueError(f"contraction sizes differ: {lhs.k} vs {rhs.k}")
        self.lhs, self.rhs, self.sink = lhs, rhs, sink
        self.dtype = compute_dtype
        self.k = lhs.k
        self.kt = ceil_div(self.k, P)
        self.rows, self.cols = lhs.width, rhs.width
        self.max_acc_banks = max_acc_banks
        self.evictor = evictor or Evictor()
        self.compute_bytes = as_dtype(compute_dtype).itemsize
        self.conversions = 0  # int8 blocks dequantized so far (`loaded`)
        core = core_of_trace()
        self.plan = choose_plan(self.rows, self.cols, self.k, lhs, rhs, self.compute_bytes,
                                max_acc_banks, self._compute_bound(core, out_bytes),
                                operand_budget_bytes(core) - reserved_bytes)
        self.tiling = KTiling(self.k, self.plan.interleave)

    def _compute_bound(self, core, out_bytes: int) -> bool:
        """TensorE time (matmuls and the transposes of rows) against DMA time (bytes)."""
        rows, cols, k = self.rows, self.cols, self.k
        rate = 1.0 if self.compute_bytes <= 2 else 0.25
        cycles = ceil_div(rows, P) * self.kt * cols / rate
        for operand in (self.lhs, self.rhs):
            if not operand.k_major:
                cycles += ceil_div(operand.width, P) * self.kt * 160
        tensor_ns = cycles / core.tensor.clock_hz * 1e9
        moved = (rows * k * self.lhs.matrix.dtype_spec.itemsize
                 + k * cols * self.rhs.matrix.dtype_spec.itemsize + rows * cols * out_bytes)
        dma_ns = moved / core.dma.bytes_per_s * 1e9
        return tensor_ns >= dma_ns

    # --- loading ---------------------------------------------------------------------------------
    def load(self, dst: Tile, operand: Operand, start: int, count: int,
             k_tiles: tuple[int, int] | None = None) -> None:
        """dst [128, t1-t0, count] <- K tiles t0..t1 of columns start..start+count, K-major."""
        t0, t1 = k_tiles or (0, self.kt)
        tiling = self.tiling
        if operand.k_major:
            view = operand.columns(start, count)
            # at least DMA_PIECE_BYTES per partition a DMA (K tiles of 1536 B: three, not
            # two), so each of its engines moves the 32 KiB the performance guide calls ideal
            # and no per-transfer overhead is paid; an int8 weight's K tiles move half the bytes
            moved = min(self.compute_bytes, operand.matrix.dtype_spec.itemsize)
            per_dma = ceil_div(DMA_PIECE_BYTES, max(1, count * moved))
            full = min(t1, tiling.full)
            for a in stamped_range(t0, full, per_dma):
                n = min(per_dma, full - a)
                dst[:, a - t0:a - t0 + n, :] = self.loaded(tiling.kmajor_view(view, a, n))
            if t1 > tiling.full:
                rest = tiling.rows(tiling.full)
                dst[0:rest, tiling.full - t0, :] = self.loaded(tiling.rest_view(view))
            return
        for r0, rr in tiles(count, P):
            with kernel_scope("rows to K-major"):
                rows = nl.ndarray((P, self.k), dtype=self.dtype, buffer=nl.sbuf)
                rows[0:rr, :] = self.loaded(operand.columns(start + r0, rr))
                self.transpose(dst[:, :, r0:r0 + rr], rows[0:rr, :], t0, t1)

    def loaded(self, view: Tile) -> Tile:
        """An HBM operand block loaded into SBUF for TensorE. An int8 weight (weight-only
        quantization) is DMAed as int8, one byte an element, then converted to the compute
        dtype on chip (the dequantization; its scale is applied at eviction), blocks alternating
        between VectorE and ScalarE as independent copies can; anything else is cast by the DMA
        as it lands."""
        if view.dtype_spec.name != "int8" or as_dtype(self.dtype).name == "int8":
            return nl.load(view)
        self.conversions += 1
        engine = DEQUANTIZE_ENGINES[self.conversions % len(DEQUANTIZE_ENGINES)]
        return nisa.tensor_copy(nl.load(view), dtype=self.dtype, engine=engine)

    def transpose(self, dst: Tile, rows: Tile, t0: int = 0, t1: int | None = None) -> None:
        """dst [128, t1-t0, R] = K tiles t0..t1 of SBUF rows [R, K], four per PSUM bank."""
        count = rows.shape[0]
        tiling = self.tiling
        t1 = self.kt if t1 is None else t1
        groups = [(a, min(4, tiling.full - a)) for a in range(t0, min(t1, tiling.full), 4)]
        if t1 > tiling.full:
            groups.append((tiling.full, 1))
        for a, n in groups:
            kr = tiling.rows(a)
            with kernel_scope("transpose bank"):
                bank = nl.ndarray((P, 4, P), dtype=nl.float32, buffer=nl.psum)
                for j in range(n):
                    bank[0:kr, j, 0:count] = nisa.nc_transpose(tiling.row_columns(rows, a + j))
                self.evictor.copy(dst[0:kr, a - t0:a - t0 + n, :], bank[0:kr, 0:n, 0:count])

    # --- the loops -------------------------------------------------------------------------------
    def run(self) -> None:
        if self.plan.streamed == "rhs":
            self._stream_rhs()
        else:
            for s0, sw in tiles(self.cols, self.plan.super_block):
                with kernel_scope("super block"):
                    self._stream_lhs(s0, sw)

    def _banks(self, acc: Tile, rhs: Tile) -> list[tuple[Tile, Tile]]:
        """(accumulator, moving operand) per PSUM bank of acc [rows, cols]: the bank's columns of
        acc and of the K-major rhs [128, KT, cols]. Sliced once per output block, outside its
        K loop: each traced K tile then indexes one view per operand (`_matmuls`)."""
        rows, cols = acc.shape
        if cols <= BANK_FP32:
            return [(acc[0:rows, 0:cols], rhs)]
        return [(acc[0:rows, c0:c0 + cw], rhs[:, :, c0:c0 + cw]) for c0, cw in tiles(cols,
                                                                                    BANK_FP32)]

    def _k_range(self, t0: int, t1: int) -> Iterator[int]:
        """K tiles t0..t1 for a K loop whose body is `_matmuls(..., t, t1)`, stamped. Stamping
        traces a loop's last iteration again (it may differ: a partial K tile), so when K tile
        t1 - 1 is full the loop runs one iteration past it, for which `_matmuls` emits nothing:
        that iteration is the traced last one and every full K tile past the first few is
        stamped (one traced K tile fewer per output block)."""
        return stamped_range(t0, t1 + 1 if t1 <= self.tiling.full else t1)

    def _matmuls(self, banks: list[tuple[Tile, Tile]], lhs: Tile, lhs_at: int, rhs_at: int,
                 t: int, stop: int) -> None:
        """acc (+)= K tile `t` ^T @ K tile `t`, one matmul per PSUM bank (`_banks`): the
        stationary side is index `lhs_at` of lhs [128, KT', rows] and the moving side index
        `rhs_at` of each bank's moving operand (their buffers may hold K from a chunk on).
        Nothing for t == stop, the iteration `_k_range` adds past the last K tile."""
        if t == stop:
            return
        kr = self.tiling.rows(t)
        stationary = lhs[:, lhs_at, :]
        if kr < P:  # a partial K tile: its first kr partitions
            stationary = stationary[0:kr, 0:stationary.shape[1]]
        for acc, rhs in banks:
            moving = rhs[:, rhs_at, :]
            if kr < P:
                moving = moving[0:kr, 0:moving.shape[1]]
            acc += nisa.nc_matmul(stationary, moving)

    def _accumulate(self, lhs_t: Tile, rhs_t: Tile, row0: int, col0: int) -> None:
        """One output block over all of K, then its sink (temporaries freed after)."""
        rows, cols = lhs_t.shape[2], rhs_t.shape[2]
        with kernel_scope("output block"):
            acc = nl.zeros((rows, round_up(cols, BANK_FP32)), dtype=nl.float32, buffer=nl.psum)
            view = acc[:, 0:cols]
            _k_loop(self._matmuls, [(self._banks(view, rhs_t), lhs_t, 0, 0)],
                    self._k_range(0, self.kt), self.kt)
            self.sink(view, row0, col0)

    def _resident(self, operand: Operand, width: int, start: int, group: int) -> StagedLoader:
        """A resident K-major buffer for columns start..start+width, loaded unit by unit on
        first use (a unit: 128 rows to transpose, or a K-major block of DMA width)."""
        buffer = nl.ndarray((P, self.kt, width), dtype=self.dtype, buffer=nl.sbuf)
        unit = min(MAX_BLOCK, max(group, P)) if operand.k_major else P
        units = tiles(width, unit)
        return StagedLoader(self, operand, [(start + u0, uw) for u0, uw in units],
                            lambda i: buffer[:, :, units[i][0]:units[i][0] + units[i][1]],
                            buffer=buffer, unit=unit)

    def _streamed(self, operand: Operand, units: list[tuple[int, int]], width: int,
                  count: int = 2, stages: int = 3) -> StagedLoader:
        """`count` rotating K-major block buffers, one unit (block) each."""
        buffers = [nl.ndarray((P, self.kt, width), dtype=self.dtype, buffer=nl.sbuf)
                   for _ in range(count)]
        return StagedLoader(self, operand, units,
                            lambda i: buffers[i % count][:, :, 0:units[i][1]], buffer=None,
                            unit=width, stages=stages)

    def _fitting_block(self, block: int, count: int) -> int:
        """The planned streamed block width, halved (down to 128) while `count` buffers of it do
        not fit in SBUF's free ranges: other tiles may have split the space the plan counted."""
        sbuf = current_trace().sbuf
        while block > P and not sbuf.fits([self.kt * block * self.compute_bytes] * count,
                                          max(4, self.compute_bytes)):
            block = max(P, round_up(block // 2, P))
        return block

    def _stream_rhs(self) -> None:
        """L resident (loaded on first use), R streamed in column blocks."""
        plan = self.plan
        lhs = self._resident(self.lhs, self.rows, 0, self.rows)
        row_tiles = tiles(self.rows, P)
        blocks = tiles(self.cols, plan.block)
        if plan.k_chunk < self.kt:
            for b in nl.affine_range(len(blocks)):
                c0, cw = blocks[b]
                self._k_streamed([(r0, rr, lhs.buffer[:, :, r0:r0 + rr], c0, cw, None)
                                  for r0, rr in row_tiles], lhs.ensure_columns, "rhs", c0, cw)
            return
        block = self._fitting_block(plan.block, 2)
        blocks = tiles(self.cols, block)
        rhs = self._streamed(self.rhs, blocks, block)
        few_rows = len(row_tiles) <= K_STREAM_BANKS
        if few_rows:  # all row tiles accumulate together, K tile by K tile, per 512 columns
            for r0, rr in row_tiles:
                lhs.ensure_columns(r0, rr)
            for b, (c0, cw) in enumerate(blocks):
                with kernel_scope("column block"):
                    rhs.ensure(b)
                    block = rhs.destination(b)
                    width = BANK_FP32 * (K_STREAM_BANKS // len(row_tiles))
                    for g0, gw in tiles(cw, width):
                        self._k_outer([(lhs.buffer[:, :, r0:r0 + rr], r0) for r0, rr in row_tiles],
                                      block[:, :, g0:g0 + gw], c0 + g0)
            return
        lhs.ensure(0, lookahead=False)  # first row tile, then the first block, then the rest
        rhs.ensure(0, lookahead=False)
        for b, (c0, cw) in enumerate(blocks):
            with kernel_scope("column block"):
                for i, (r0, rr) in enumerate(row_tiles):
                    lhs.ensure_columns(r0, rr)
                    if i == 0:
                        rhs.ensure(b)
                    block = rhs.destination(b)
                    for g0, gw in tiles(cw, plan.col_group):
                        self._accumulate(lhs.buffer[:, :, r0:r0 + rr], block[:, :, g0:g0 + gw],
                                         r0, c0 + g0)

    def _stream_lhs(self, s0: int, sw: int) -> None:
        """R columns s0..s0+sw resident (loaded on first use), L streamed in row blocks."""
        plan = self.plan
        rhs = self._resident(self.rhs, sw, s0, plan.col_group)
        groups = tiles(sw, plan.col_group)
        blocks = tiles(self.rows, plan.block)
        if plan.k_chunk < self.kt:
            for b in nl.affine_range(len(blocks)):
                r0, rw = blocks[b]
                self._k_streamed([(r0 + t0, tr, None, s0 + g0, gw, rhs.buffer[:, :, g0:g0 + gw])
                                  for t0, tr in tiles(rw, P) for g0, gw in groups],
                                 _shifted(rhs.ensure_columns, s0), "lhs", r0, rw)
            return
        first = plan.first_rows if len(blocks) > 1 else 0
        lhs = self._streamed(self.lhs, blocks, plan.block, count=max(2, first),
                             stages=plan.stages)
        if first:
            self._first_pass(lhs, rhs, first, s0, sw)
        else:
            lhs.ensure(0, lookahead=False)  # the first row block, then what it multiplies
            for g0, gw in groups:
                rhs.ensure_columns(g0, gw)
        for b in range(first, len(blocks)):
            r0, rw = blocks[b]
            with kernel_scope("row block"):
                lhs.ensure(b)
                block = lhs.destination(b)
                for t0, tr in tiles(rw, P):
                    for g0, gw in groups:
                        rhs.ensure_columns(g0, gw)
                        self._accumulate(block[:, :, t0:t0 + tr], rhs.buffer[:, :, g0:g0 + gw],
                                         r0 + t0, s0 + g0)

    def _k_outer(self, lhs_views: list[tuple[Tile, int]], rhs_view: Tile, col0: int) -> None:
        """Several row tiles against one column group, K tile by K tile: the matmuls of K tile
        t wait only for that tile's data."""
        cols = rhs_view.shape[2]
        with kernel_scope("k-outer group"):
            accs = _accumulators([(view.shape[2], cols) for view, _ in lhs_views])
            work = [(self._banks(acc, rhs_view), view, 0, 0)
                    for acc, (view, _) in zip(accs, lhs_views, strict=True)]
            _k_loop(self._matmuls, work, self._k_range(0, self.kt), self.kt)
            for acc, (_, row0) in zip(accs, lhs_views, strict=True):
                with kernel_scope("output block"):
                    self.sink(acc, row0, col0)

    def _first_pass(self, lhs: StagedLoader, rhs: StagedLoader, first: int, s0: int,
                    sw: int) -> None:
        """While R arrives (K tile by K tile, group by group), the first `first` row tiles of L
        accumulate against it in K order: TensorE works on R as it lands instead of waiting for
        all of it behind a single row tile."""
        for b in range(first):
            lhs.ensure(b, lookahead=False)
        rows = [(lhs.destination(b), lhs.units[b][0]) for b in range(first)]
        for g0, gw in tiles(sw, BANK_FP32):
            rhs.ensure_columns(g0, gw)
            self._k_outer(rows, rhs.buffer[:, :, g0:g0 + gw], s0 + g0)

    def _k_streamed(self, items, ensure, streamed: str, b0: int, bw: int) -> None:
        """One streamed block in K chunks: every accumulator of the block lives in PSUM while
        the chunks pass. `items` lists (row0, rows, lhs view | None, col0, cols, rhs view |
        None); the streamed side's view comes from the chunk buffer."""
        plan = self.plan
        for r0, rr, _, c0, cw, _ in items:  # the resident side first (transposes use PSUM)
            if streamed == "rhs":
                ensure(r0, rr)
            else:
                ensure(c0, cw)
        accs = _accumulators([(rr, cw) for _, rr, _, _, cw, _ in items])
        resident = [] if streamed == "rhs" else [self._banks(acc, item[5])
                                                 for acc, item in zip(accs, items, strict=True)]
        for kc in nl.affine_range(ceil_div(self.kt, plan.k_chunk)):
            t0 = kc * plan.k_chunk
            t1 = min(self.kt, t0 + plan.k_chunk)
            chunk = nl.ndarray((P, plan.k_chunk, plan.block), dtype=self.dtype, buffer=nl.sbuf)
            operand = self.rhs if streamed == "rhs" else self.lhs
            self.load(chunk[:, 0:t1 - t0, 0:bw], operand, b0, bw, k_tiles=(t0, t1))
            work = self._chunk_operands(items, accs, resident, chunk, streamed, b0, t0)
            _k_loop(self._matmuls, work, self._k_range(t0, t1), t1)
        for acc, (r0, _, _, c0, _, _) in zip(accs, items, strict=True):
            with kernel_scope("output block"):
                self.sink(acc, r0, c0)

    def _chunk_operands(self, items, accs: list[Tile], resident: list, chunk: Tile,
                        streamed: str, b0: int, t0: int
                        ) -> list[tuple[list[tuple[Tile, Tile]], Tile, int, int]]:
        """(banks, lhs [128, KT', rows], lhs K-index shift, rhs K-index shift) of each item of
        `_k_streamed` for the chunk buffer holding K tiles t0..: the streamed side's views come
        from the chunk (K tile t at t - t0), the resident side's (`resident`: banks of the
        resident rhs, empty when rhs streams) are K tile t of the whole operand."""
        if streamed == "rhs":  # lhs resident
            return [(self._banks(acc, chunk[:, :, c0 - b0:c0 - b0 + cw]), lhs_view, 0, t0)
                    for acc, (_, _, lhs_view, c0, cw, _) in zip(accs, items, strict=True)]
        return [(banks, chunk[:, :, r0 - b0:r0 - b0 + rr], t0, 0)
                for banks, (r0, rr, _, _, _, _) in zip(resident, items, strict=True)]


def _k_loop(matmuls: Callable, work: list, k_range: Iterator[int], stop: int) -> None:
    """A K loop (`Engine._k_range`, stamped): per K tile t, ``matmuls(banks, lhs, t - lhs
    shift, t - rhs shift, t, stop)`` (`Engine._matmuls`) for each (banks, lhs, lhs shift, rhs
    shift) of `work`, in order. Functions of their own so that the loop's frame holds only these
    few locals, alike from the first iteration on: stamping screens the frame's objects once per
    recorded iteration (`trnsim.nki.stamp`; an engine's whole attribute dict in a method's
    frame) and needs them equal in the iterations it takes as a template (an inner loop's
    variables, unbound before the first iteration, would cost one traced iteration more)."""
    for t in k_range:
        _k_tile(matmuls, work, t, stop)


def _k_tile(matmuls: Callable, work: list, t: int, stop: int) -> None:
    """K tile `t` of `_k_loop`."""
    for banks, lhs, lhs_shift, rhs_shift in work:
        matmuls(banks, lhs, t - lhs_shift, t - rhs_shift, t, stop)


def _shifted(ensure: Callable[[int, int], None], start: int) -> Callable[[int, int], None]:
    """ensure(c0, cw) for absolute columns, given one that takes columns relative to start."""
    return lambda c0, cw: ensure(c0 - start, cw)


def _accumulators(shapes: list[tuple[int, int]]) -> list[Tile]:
    """PSUM accumulators [rows, cols]; ones narrower than a bank share banks (whole-bank tiles
    keep the PSUM ring bank-aligned, and no accumulator straddles a bank)."""
    accs: list[Tile] = []
    bank, used = None, BANK_FP32
    for rows, cols in shapes:
        if cols >= BANK_FP32:
            acc = nl.zeros((P, round_up(cols, BANK_FP32)), dtype=nl.float32, buffer=nl.psum)
            accs.append(acc[0:rows, 0:cols])
            continue
        if used + cols > BANK_FP32:
            bank, used = nl.zeros((P, BANK_FP32), dtype=nl.float32, buffer=nl.psum), 0
        accs.append(bank[0:rows, used:used + cols])
        used += cols
    return accs


class StagedLoader:
    """Loads units (column ranges) of one operand into K-major SBUF views, software-pipelined.

    K-major operands are DMAed straight into place, `FETCH_AHEAD_KMAJOR` unit ahead of use.
    Row-major operands are DMAed into rotating staging tiles two units ahead of use and
    transposed one unit ahead: TensorE runs in program order, so the transposes of unit u+1 sit
    before the matmuls of unit u and never wait for their DMA, and their PSUM evictions overlap
    those matmuls.
    """

    def __init__(self, engine: Engine, operand: Operand, units: list[tuple[int, int]],
                 destination: Callable[[int], Tile], *, buffer: Tile | None, unit: int,
                 stages: int = 3) -> None:
        self.stages = stages
        self.engine, self.operand, self.units = engine, operand, units
        self.destination, self.buffer, self.unit = destination, buffer, unit
        self.fetched = 0  # units [0, fetched) have their DMA issued
        self.finished = 0  # units [0, finished) are in place
        self.staging: list[Tile] = []
        if not operand.k_major:
            pieces = ceil_div(max(count for _, count in units), P)
            # no more slots than units: a resident operand of one row tile needs one, not three
            # (each slot is a whole K of rows: 32 KiB per partition at K = 16384 in bf16)
            self.staging = [nl.ndarray((P, pieces, engine.k), dtype=engine.dtype, buffer=nl.sbuf)
                            for _ in range(min(self.stages, len(units)))]

    def ensure_columns(self, c0: int, cw: int) -> None:
        """Make the units covering columns c0..c0+cw (relative to the loader) ready."""
        self.ensure(ceil_div(c0 + cw, self.unit) - 1)

    def ensure(self, u: int, *, lookahead: bool = True) -> None:
        """Make unit u ready; with `lookahead`, also start the units after it (see class)."""
        fetch = (1 if self.operand.k_major else self.stages - 1) if lookahead else 0
        finish = 1 if lookahead and self.staging else 0
        for v in range(self.fetched, min(u + 1 + fetch, len(self.units))):
            while self.staging and self.finished <= v - self.stages:
                self._finish(self.finished)  # unit v's staging slot still holds that unit
            self._fetch(v)
        for v in range(self.finished, min(u + 1 + finish, len(self.units))):
            self._finish(v)

    def _fetch(self, v: int) -> None:
        start, count = self.units[v]
        self.fetched = v + 1
        if self.operand.k_major:
            self.engine.load(self.destination(v), self.operand, start, count)
            return
        stage = self.staging[v % self.stages]
        for i, (r0, rr) in enumerate(tiles(count, P)):
            stage[0:rr, i, :] = self.engine.loaded(self.operand.columns(start + r0, rr))

    def _finish(self, v: int) -> None:
        self.finished = v + 1
        if not self.staging:
            return
        _, count = self.units[v]
        stage, dst = self.staging[v % self.stages], self.destination(v)
        for i, (r0, rr) in enumerate(tiles(count, P)):
            self.engine.transpose(dst[:, :, r0:r0 + rr], stage[0:rr, i, :])
