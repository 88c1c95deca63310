"""k.matmul: out[*batch, m, n] = epilogue(A @ B + bias, extras), fp32 accumulation in PSUM.

Orientation. TensorE's stationary operand gives the output's partitions. With ``stationary="a"``
rows of A are stationary and B streams (out rows on partitions: stored as they come out). With
``stationary="b"`` the weights are stationary and A^T streams as the moving operand, computing
out^T: for M <= 512 (one moving tile) a matmul costs max(64, M) cycles per 128 output columns
instead of 512, so small-M (decode-like) products run up to 2x faster on TensorE; the out^T
blocks are transposed back on TensorE before the epilogue (`TransposedSink`). For M > 512 the
two orientations issue identical matmul cycles and "b" would only add the transposes back, so
the kernel holds A stationary regardless of the hint.

Batch. When B is shared by every batch item (a weight) and A/out fold into rows, the batch is
folded into M: one problem, weights streamed once. Items that each fit one TensorE pass
(attention's per-head products) move several per DMA (`trnsim.kernels.matmul_batched`).
Otherwise each batch item is its own problem, in its own scope so consecutive items overlap.

Int8 weights. An int8 B (weight-only quantization, `trnsim.compiler.passes.quantize`) moves
from HBM as int8, one byte a weight, and is converted to the compute dtype in SBUF (exact:
int8 values are bf16 values); its scale is the caller's epilogue.

Bias. Added to the accumulator before the epilogue: as a broadcast [128, n] tile (built once
with one TensorE ones-matmul per 512 columns, not a 128x larger DMA) added during eviction, or,
for out^T, as the per-partition bias operand of the ScalarE eviction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from trnsim.errors import InvalidArgumentError, UnsupportedError
from trnsim.kernels.layout import (
    BANK_FP32,
    Evictor,
    P,
    broadcast_row,
    broadcast_to_shape,
    ceil_div,
    fold_rows,
    hbm_strides,
    hbm_view,
    kernel_scope,
    load_block,
    tiles,
)
from trnsim.kernels.matmul_batched import grouped_matmul
from trnsim.kernels.matmul_engine import Engine
from trnsim.kernels.matmul_plan import NeedsKMajor, Operand
from trnsim.nki import isa as nisa
from trnsim.nki import language as nl
from trnsim.nki.tile import Tile

Epilogue = Callable[[Tile, Sequence[Tile]], Tile]
TRANSPOSED_MAX_M = BANK_FP32  # out^T needs all of M in one moving tile


def matmul(out: Tile, a: Tile, b: Tile, *, bias: Tile | None = None, extras: Sequence[Tile] = (),
           transpose_a: bool = False, transpose_b: bool = False, compute_dtype="bfloat16",
           stationary: str = "a", epilogue: Epilogue | None = None) -> None:
    """See the module docstring and the contract in `trnsim.kernels`."""
    if out.ndim < 2 or a.ndim < 2 or b.ndim < 2:
        raise InvalidArgumentError(f"matmul operands need rank >= 2: out {list(out.shape)}, "
                                   f"a {list(a.shape)}, b {list(b.shape)}")
    m, n = out.shape[-2:]
    batch = tuple(out.shape[:-2])
    a_mk = a.shape[-2:][::-1] if transpose_a else a.shape[-2:]
    b_kn = b.shape[-2:][::-1] if transpose_b else b.shape[-2:]
    if a_mk[0] != m or b_kn[1] != n or a_mk[1] != b_kn[0]:
        raise InvalidArgumentError(f"matmul shapes do not agree: a {list(a.shape)} (transposed "
                                   f"{transpose_a}) @ b {list(b.shape)} (transposed {transpose_b})"
                                   f" -> out {list(out.shape)}")
    if stationary not in ("a", "b"):
        raise InvalidArgumentError(f"matmul stationary must be 'a' or 'b'; got {stationary!r}")
    if a.dtype_spec.is_int or (b.dtype_spec.is_int and b.dtype_spec.name != "int8"):
        raise UnsupportedError(f"matmul of integer tensors ({a.dtype_spec.name} @ "
                               f"{b.dtype_spec.name}): TensorE multiplies floats and sums in fp32, "
                               f"exact only below 2^24, where PyTorch's integer matmul is exact; "
                               f"cast the operands to float")
    if bias is not None and tuple(bias.shape) != (n,):
        raise InvalidArgumentError(f"matmul bias {list(bias.shape)} must be [{n}]")
    with kernel_scope("matmul"):
        a_full = broadcast_to_shape(a, (*batch, *a.shape[-2:]))
        b_full = broadcast_to_shape(b, (*batch, *b.shape[-2:]))
        extras_full = [broadcast_to_shape(e, out.shape) for e in extras]
        shared_b = bool(batch) and all(s == 0 for s in hbm_strides(b_full)[:len(batch)])
        if batch and not (shared_b and not transpose_a) and grouped_matmul(
                out, a_full, b_full, extras_full, batch, transpose_a, transpose_b,
                compute_dtype, bias, epilogue):
            return
        pending: list[tuple[Tile, Tile]] = []
        problems = _problems(out, a_full, b_full, extras_full, batch, transpose_a, pending)
        rows = problems[0][0].shape[0]
        transposed = stationary == "b" and rows <= TRANSPOSED_MAX_M
        evictor = Evictor()
        bias_tile = None
        if bias is not None:
            bias_tile = (bias_columns(bias, evictor) if transposed
                         else broadcast_row(bias, evictor))
        reserved = bias_tile.dtype_spec.itemsize * bias_tile.shape[-1] if bias_tile is not None \
            else 0
        for out2d, a2d, b2d, extras2d in problems:
            with kernel_scope("matmul problem"):
                if transposed:
                    lhs, rhs = Operand.of(b2d, not transpose_b), Operand.of(a2d, transpose_a)
                    sink = TransposedSink(out2d, bias_tile, extras2d, epilogue, evictor)
                    banks = 2
                else:
                    lhs, rhs = Operand.of(a2d, transpose_a), Operand.of(b2d, not transpose_b)
                    sink = NaturalSink(out2d, bias_tile, extras2d, epilogue, evictor)
                    banks = 2
                out_bytes = out2d.dtype_spec.itemsize
                make = partial(Engine, sink=sink, compute_dtype=compute_dtype,
                               max_acc_banks=banks, evictor=evictor, out_bytes=out_bytes,
                               reserved_bytes=reserved)
                try:
                    engine = make(lhs, rhs)
                except NeedsKMajor:  # rows too long, or re-streamed: transpose them in HBM once
                    lhs, rhs = _fewest_k_major(make, lhs, rhs)
                    engine = make(lhs, rhs)
                if banks == 4 and _streams_rows(engine):
                    engine = Engine(lhs, rhs, sink, compute_dtype=compute_dtype, max_acc_banks=2,
                                    evictor=evictor, out_bytes=out_bytes,
                                    reserved_bytes=reserved)
                engine.run()
                sink.finish()
        for target, staged in pending:
            from trnsim.kernels.elementwise import copy

            copy(target, staged)


def _streams_rows(engine: Engine) -> bool:
    """Whether the streamed operand needs TensorE transposes inside the main loop (PSUM room)."""
    streamed = engine.rhs if engine.plan.streamed == "rhs" else engine.lhs
    return not streamed.k_major


def _problems(out: Tile, a: Tile, b: Tile, extras: list[Tile], batch: tuple[int, ...],
              transpose_a: bool, pending: list[tuple[Tile, Tile]]
              ) -> list[tuple[Tile, Tile, Tile, list[Tile]]]:
    """(out, a, b, extras) 2-D problems: the batch folded into rows when B is shared. Outputs
    computed into a staging tensor are listed in `pending` as (out, staged) for a copy."""
    if not batch:
        return [(out, a, b, extras)]
    shared_b = all(s == 0 for s in hbm_strides(b)[:len(batch)])
    if shared_b and not transpose_a:
        # one problem with the batch folded into m (weights streamed once); an operand whose
        # rows do not step uniformly is first made dense in an internal HBM tensor
        a_rows = fold_rows(a) or fold_rows(_dense(a))
        extra_rows = [fold_rows(e) or fold_rows(_dense(e)) for e in extras]
        out_rows = fold_rows(out)
        if out_rows is None:
            staged = nl.ndarray(tuple(out.shape), dtype=out.dtype, buffer=nl.hbm)
            pending.append((out, staged))
            out_rows = fold_rows(staged)
        return [(out_rows, a_rows, b[(0,) * len(batch)], extra_rows)]
    problems = []
    for index in np.ndindex(*batch):
        key = tuple(int(i) for i in index)
        problems.append((out[key], a[key], b[key], [e[key] for e in extras]))
    return problems


def _fewest_k_major(make: Callable[[Operand, Operand], Engine], lhs: Operand,
                    rhs: Operand) -> tuple[Operand, Operand]:
    """(lhs, rhs) with as few operands rewritten K-major in HBM as the plan accepts. The plan
    refuses rows for one operand (too long to stage, or re-streamed once per super-block of the
    other); the other, read once, still reaches SBUF as rows through TensorE transposes, which
    costs less than an HBM round trip of its bytes (2048 x 8192 @ [3584, 8192]^T: 6.2 -> 3.2 ms,
    the weight's 59 MB no longer written back and read again). Each choice is tried on a
    stand-in view (planning emits nothing); only the chosen operands are rewritten."""
    choices = [(True, False), (False, True), (True, True)]
    for left, right in choices:
        if (left and lhs.k_major) or (right and rhs.k_major):
            continue
        try:
            make(_stand_in(lhs) if left else lhs, _stand_in(rhs) if right else rhs)
        except NeedsKMajor:
            continue
        return (_k_major(lhs) if left else lhs), (_k_major(rhs) if right else rhs)
    return _k_major(lhs), _k_major(rhs)


def _stand_in(operand: Operand) -> Operand:
    """`operand` as the plan sees its K-major rewrite (shapes only; nothing is emitted)."""
    width, k = operand.matrix.shape
    steps = hbm_strides(operand.matrix)
    return Operand(hbm_view(operand.matrix, (k, width), (steps[1], steps[0])), True)


def _k_major(operand: Operand) -> Operand:
    """A row-major operand rewritten K-major into an internal HBM tensor (TensorE transposes,
    `copy`), for contractions too long to stream as rows through SBUF."""
    if operand.k_major:
        return operand
    from trnsim.kernels.elementwise import copy

    width, k = operand.matrix.shape
    target = nl.ndarray((k, width), dtype=operand.matrix.dtype, buffer=nl.hbm)
    steps = hbm_strides(operand.matrix)
    copy(target, hbm_view(operand.matrix, (k, width), (steps[1], steps[0])))
    return Operand(target, True)


def _dense(t: Tile) -> Tile:
    """A dense copy of an HBM view in an internal HBM tensor."""
    from trnsim.kernels.elementwise import copy

    dense = nl.ndarray(tuple(t.shape), dtype=t.dtype, buffer=nl.hbm)
    copy(dense, t)
    return dense


def bias_columns(bias: Tile, evictor: Evictor) -> Tile:
    """bias [n] as SBUF [128, ceil(n/128)] fp32: column t holds bias[t*128 : t*128+128].

    Loaded as contiguous rows of 128 and transposed on TensorE (a direct column load would cost
    one DMA descriptor per element)."""
    n = bias.shape[0]
    n_tiles = ceil_div(n, P)
    columns = nl.ndarray((P, n_tiles), dtype=nl.float32, buffer=nl.sbuf)
    step = hbm_strides(bias)[0]
    for t0, tn in tiles(n_tiles, P):
        with kernel_scope("bias columns"):
            rows = nl.ndarray((tn, P), dtype=nl.float32, buffer=nl.sbuf)
            full = min(tn, n // P - t0)
            if full < tn:
                rows[...] = nisa.memset((tn, P), 0.0, nl.float32)
            if full > 0:
                rows[0:full, :] = nl.load(hbm_view(bias, (full, P), (P * step, step),
                                                   offset=t0 * P * step))
            if full < tn:
                rest = n - (t0 + full) * P
                rows[full:full + 1, 0:rest] = nl.load(
                    hbm_view(bias, (1, rest), (0, step), offset=(t0 + full) * P * step))
            ps = nl.ndarray((P, P), dtype=nl.float32, buffer=nl.psum)
            ps[:, 0:tn] = nisa.nc_transpose(rows)
            evictor.copy(columns[:, t0:t0 + tn], ps[:, 0:tn])
    return columns


def load_extras(extras: Sequence[Tile], r0: int, rows: int, c0: int, cols: int) -> list[Tile]:
    """[rows, cols] SBUF blocks of the epilogue operands (each already broadcast to out)."""
    blocks = []
    for extra in extras:
        block = nl.ndarray((rows, cols), dtype=extra.dtype, buffer=nl.sbuf)
        load_block(block, extra[r0:r0 + rows, c0:c0 + cols])
        blocks.append(block)
    return blocks


def finish_block(out: Tile, value: Tile, extras: Sequence[Tile], epilogue: Epilogue | None,
                 r0: int, c0: int, evictor: Evictor) -> None:
    """Apply the epilogue to one accumulator block (PSUM or SBUF fp32), cast, store to HBM."""
    rows, cols = value.shape
    stage = nl.ndarray((rows, cols), dtype=out.dtype, buffer=nl.sbuf)
    if epilogue is not None:
        stage[...] = epilogue(value, load_extras(extras, r0, rows, c0, cols))
    else:
        evictor.copy(stage, value)
    nl.store(out[r0:r0 + rows, c0:c0 + cols], value=stage)


class NaturalSink:
    """Accumulator blocks [rows of out, cols of out]: bias add, epilogue and store per block."""

    def __init__(self, out: Tile, bias: Tile | None, extras: Sequence[Tile],
                 epilogue: Epilogue | None, evictor: Evictor) -> None:
        self.out, self.bias, self.extras = out, bias, extras
        self.epilogue, self.evictor = epilogue, evictor

    def __call__(self, acc: Tile, r0: int, c0: int) -> None:
        rows, cols = acc.shape
        value = acc
        if self.bias is not None:
            biased = nl.add(acc, self.bias[0:rows, c0:c0 + cols], dtype=nl.float32)
            if self.epilogue is None:  # one VectorE pass: add, cast, write the staging tile
                stage = nl.ndarray((rows, cols), dtype=self.out.dtype, buffer=nl.sbuf)
                stage[...] = biased
                nl.store(self.out[r0:r0 + rows, c0:c0 + cols], value=stage)
                return
            value = nl.ndarray((rows, cols), dtype=nl.float32, buffer=nl.sbuf)
            value[...] = biased
        finish_block(self.out, value, self.extras, self.epilogue, r0, c0, self.evictor)

    def finish(self) -> None:
        return None


GROUP = BANK_FP32  # out columns gathered before the epilogue in the transposed orientation


class TransposedSink:
    """Accumulator blocks of out^T [128 columns of out, M rows of out].

    Each block is evicted (with the bias as ScalarE's per-partition operand), transposed back on
    TensorE in 128x128 pieces, and gathered into [M, 512] SBUF groups (two, alternating); a full
    group gets the epilogue and is stored with 2 KiB+ rows.
    """

    def __init__(self, out: Tile, bias_columns: Tile | None, extras: Sequence[Tile],
                 epilogue: Epilogue | None, evictor: Evictor) -> None:
        self.out, self.bias, self.extras = out, bias_columns, extras
        self.epilogue, self.evictor = epilogue, evictor
        self.m, self.n = out.shape
        self.m_blocks = tiles(self.m, P)
        self.groups = [nl.ndarray((P, len(self.m_blocks), GROUP), dtype=nl.float32,
                                  buffer=nl.sbuf) for _ in range(2)]
        self.filled: dict[int, int] = {}

    def __call__(self, acc: Tile, n0: int, m0: int) -> None:
        """acc = out^T[n0:n0+rows, m0:m0+width]; a block may cover part of M (a streamed block
        narrowed to fit SBUF), starting on a 128-row boundary of out."""
        if m0 % P:
            raise InvalidArgumentError(f"transposed matmul block starts at row {m0} of out, "
                                       f"not a multiple of {P}")
        n_rows, width = acc.shape
        acc_t = nl.ndarray((n_rows, width), dtype=nl.float32, buffer=nl.sbuf)
        if self.bias is not None:
            t = n0 // P
            acc_t[...] = nisa.activation(op="identity", data=acc, bias=self.bias[0:n_rows, t:t + 1])
        else:
            self.evictor.copy(acc_t, acc)
        g, slot = divmod(n0, GROUP)
        group = self.groups[g % 2]
        blocks = [(j, mb0, mr) for j, (mb0, mr) in enumerate(self.m_blocks)
                  if m0 <= mb0 < m0 + width]
        for b0 in range(0, len(blocks), 4):  # one PSUM bank holds four 128 x 128 transposes
            part = blocks[b0:b0 + 4]
            bank = nl.ndarray((P, 4, P), dtype=nl.float32, buffer=nl.psum)
            for i, (_, mb0, mr) in enumerate(part):
                bank[0:mr, i, 0:n_rows] = nisa.nc_transpose(acc_t[:, mb0 - m0:mb0 - m0 + mr])
            full = [i for i, (_, _, mr) in enumerate(part) if mr == P]
            if full:  # consecutive full blocks: one copy
                j0 = part[full[0]][0]
                self.evictor.copy(group[:, j0:j0 + len(full), slot:slot + n_rows],
                                  bank[:, 0:len(full), 0:n_rows])
            for i, (j, _, mr) in enumerate(part):
                if mr < P:
                    self.evictor.copy(group[0:mr, j, slot:slot + n_rows], bank[0:mr, i, 0:n_rows])
        self.filled[g] = self.filled.get(g, 0) + n_rows * width
        if self.filled[g] == min(GROUP, self.n - g * GROUP) * self.m:
            self._flush(g)

    def _flush(self, g: int) -> None:
        group = self.groups[g % 2]
        width = min(GROUP, self.n - g * GROUP)
        for j, (mb0, mr) in enumerate(self.m_blocks):
            with kernel_scope("transposed group"):
                finish_block(self.out, group[0:mr, j, 0:width], self.extras, self.epilogue, mb0,
                             g * GROUP, self.evictor)

    def finish(self) -> None:
        pending = [g for g, count in self.filled.items()
                   if count != min(GROUP, self.n - g * GROUP) * self.m]
        if pending:
            raise InvalidArgumentError(f"transposed matmul: column groups {pending} incomplete")
