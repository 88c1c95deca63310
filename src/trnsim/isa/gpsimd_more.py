"""GpSimd instructions of the current NKI ISA: in-partition gather, segment bounds, non-zero
indices and top-k.

GpSimd is eight cores, each wired to 16 SBUF partitions (hardware.md section 1); `nonzero_with_count`
and `topk` work per 16-partition group. Costs: topk is the one documented formula (4n + K cycles);
the others are ASSUMPTIONS costed like a GpSimd streaming op over their output plus the index
instructions' fixed overhead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from trnsim.errors import InvalidArgumentError, UnsupportedError
from trnsim.isa.access import AccessPattern, Memory
from trnsim.isa.instruction import (
    Cost,
    Engine,
    ExecutionState,
    Instruction,
    SrcToDst,
    cycles_to_ns,
    streaming_cost,
)

GROUP = 16  # SBUF partitions per GpSimd core


def _sbuf_only(instruction: Instruction, *aps: AccessPattern) -> None:
    for ap in aps:
        if ap.memory is not Memory.SBUF:
            instruction.fail(InvalidArgumentError(f"{instruction.name}: {ap.describe()} must be in SBUF"))


@dataclass(frozen=True, kw_only=True)
class NGather(Instruction):
    """dst[p, j] = src[p, indices[p, j]] with src's free dims flattened (nisa.nc_n_gather)."""

    OPCODE: ClassVar[str] = "NGather"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.GPSIMD,)

    dst: AccessPattern
    src: AccessPattern
    indices: AccessPattern

    def reads(self):
        return (self.src, self.indices)

    def writes(self):
        return (self.dst,)

    def check(self, core) -> None:
        super().check(core)
        if self.dst.dtype != self.src.dtype:
            self.fail(InvalidArgumentError(f"{self.name}: dst must have data's dtype"))
        if self.indices.dtype.name != "uint32":
            self.fail(InvalidArgumentError(f"{self.name}: indices must be uint32"))
        if not (self.src.partitions == self.indices.partitions == self.dst.partitions) or \
                self.dst.free_size != self.indices.free_size:
            self.fail(InvalidArgumentError(f"{self.name}: data, indices and dst need the same "
                                           f"partitions, and dst one element per index"))

    def execute(self, state: ExecutionState) -> None:
        src = state.read(self.src).reshape(self.src.partitions, -1)
        index = state.read(self.indices).reshape(self.indices.partitions, -1).astype(np.int64)
        if index.size and (index.max() >= src.shape[1] or index.min() < 0):
            self.fail(InvalidArgumentError(f"{self.name}: an index is outside [0, {src.shape[1]})"))
        state.write(self.dst, np.take_along_axis(src, index, axis=1).reshape(self.dst.shape))

    def cost(self, core) -> Cost:
        return streaming_cost(core, self.engine, self.dst.free_size,
                              extra_cycles=core.costs.gpsimd_index_fixed_cycles)


@dataclass(frozen=True, kw_only=True)
class SequenceBounds(SrcToDst):
    """dst [1, 2, N]: for each segment id, the [start, end) of its run of equal ids; padding
    (id 0) gets [N, -1] (nisa.sequence_bounds)."""

    OPCODE: ClassVar[str] = "SequenceBounds"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.GPSIMD,)

    def check(self, core) -> None:
        super().check(core)
        if self.src.partitions != 1 or self.dst.partitions != 1 or \
                self.dst.free_size != 2 * self.src.free_size:
            self.fail(InvalidArgumentError(f"{self.name}: segment_ids [1, N] give dst [1, 2, N]; got "
                                           f"{list(self.src.shape)} -> {list(self.dst.shape)}"))
        for ap in (self.src, self.dst):
            if ap.dtype.name not in ("float32", "int32"):
                self.fail(InvalidArgumentError(f"{self.name}: dtypes must be float32 or int32"))

    def execute(self, state: ExecutionState) -> None:
        ids = state.read_compute(self.src).reshape(-1)
        n = len(ids)
        change = np.concatenate([[True], ids[1:] != ids[:-1]])
        run = np.cumsum(change) - 1
        starts = np.flatnonzero(change)
        ends = np.concatenate([starts[1:], [n]])
        lo = np.where(ids == 0, n, starts[run]).astype(np.float64)
        hi = np.where(ids == 0, -1, ends[run]).astype(np.float64)
        state.write(self.dst, np.stack([lo, hi]).reshape(self.dst.shape))

    def cost(self, core) -> Cost:
        return streaming_cost(core, self.engine, 2 * self.src.free_size,
                              extra_cycles=core.costs.gpsimd_index_fixed_cycles)


@dataclass(frozen=True, kw_only=True)
class NonzeroWithCount(Instruction):
    """On partitions 0, 16, ..., 112 of the access: indices of non-zero elements (+ offset),
    then padding, then the count (nisa.nonzero_with_count, NeuronCore-v3+)."""

    OPCODE: ClassVar[str] = "NonzeroWithCount"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.GPSIMD,)

    dst: AccessPattern
    src: AccessPattern
    index_offset: int = 0
    padding: int = -1

    def reads(self):
        return (self.src, self.dst)  # rows other than each group's first are kept

    def writes(self):
        return (self.dst,)

    def check(self, core) -> None:
        if core.version < 3:
            self.fail(UnsupportedError(f"{self.name} needs NeuronCore-v3 or newer; the target is "
                                       f"{core.name}"))
        super().check(core)
        _sbuf_only(self, self.src, self.dst)
        if self.dst.free_size != self.src.free_size + 1 or self.dst.partitions != self.src.partitions:
            self.fail(InvalidArgumentError(f"{self.name}: dst needs src's partitions and one more "
                                           f"element per partition"))
        if self.src.dtype.name not in ("float32", "int32") or self.dst.dtype.name != "int32":
            self.fail(InvalidArgumentError(f"{self.name}: src float32/int32, dst int32"))

    def execute(self, state: ExecutionState) -> None:
        x = state.read(self.src).reshape(self.src.partitions, -1)
        out = np.array(state.read(self.dst).reshape(self.dst.partitions, -1), dtype=np.int64)
        for p in range(0, x.shape[0], GROUP):
            found = np.flatnonzero(x[p] != 0) + self.index_offset
            out[p, :] = self.padding
            out[p, :len(found)] = found
            out[p, -1] = len(found)
        state.write(self.dst, out.astype(np.int32).reshape(self.dst.shape))

    def cost(self, core) -> Cost:
        return streaming_cost(core, self.engine, self.dst.free_size,
                              extra_cycles=core.costs.gpsimd_index_fixed_cycles)


@dataclass(frozen=True, kw_only=True)
class TopK(Instruction):
    """Top-K per 16-partition group of a snake layout (nisa.topk).

    Element i of a group's snake is src[base + i % 16, i // 16], i < n. The group's K' =
    min(16 k, n) largest values (k = val_dst's free size) are written ascending in the same snake
    layout, with their snake positions in idx_dst. ASSUMPTION: the documentation does not say
    how K is split over a group's partitions; this is the layout its examples decode.
    Cost (documented): 4n + K GpSimd cycles.
    """

    OPCODE: ClassVar[str] = "TopK"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.GPSIMD,)

    values: AccessPattern
    indices: AccessPattern
    src: AccessPattern
    n: int

    def reads(self):
        return (self.src,)

    def writes(self):
        return (self.values, self.indices)

    def check(self, core) -> None:
        super().check(core)
        _sbuf_only(self, self.src, self.values, self.indices)
        if self.src.dtype.name != "bfloat16" or self.values.dtype.name != "bfloat16":
            self.fail(InvalidArgumentError(f"{self.name}: src and val_dst must be bfloat16"))
        if self.indices.dtype.name != "uint32":
            self.fail(InvalidArgumentError(f"{self.name}: idx_dst must be uint32"))
        if self.src.partitions % GROUP:
            self.fail(InvalidArgumentError(f"{self.name}: partition count {self.src.partitions} is "
                                           f"not a multiple of 16"))
        k = self.values.free_size
        if not 8 <= self.n < 65536 or not 1 <= k <= self.n:
            self.fail(InvalidArgumentError(f"{self.name}: needs 8 <= n < 65536 and 1 <= K <= n; got "
                                           f"n={self.n}, K={k}"))
        if self.src.free_size * GROUP < self.n:
            self.fail(InvalidArgumentError(f"{self.name}: src holds {self.src.free_size * GROUP} "
                                           f"snake elements per group, fewer than n={self.n}"))

    def execute(self, state: ExecutionState) -> None:
        src = state.read_compute(self.src).reshape(self.src.partitions, -1)
        vals = np.array(state.read_compute(self.values).reshape(self.values.partitions, -1))
        idx = np.array(state.read(self.indices).reshape(self.indices.partitions, -1), dtype=np.uint32)
        k = self.values.free_size
        count = min(GROUP * k, self.n)
        positions = np.arange(self.n)
        for base in range(0, src.shape[0], GROUP):
            snake = src[base + positions % GROUP, positions // GROUP]
            order = np.argsort(-snake, kind="stable")[:count][::-1]  # ascending among the top
            j = np.arange(count)
            vals[base + j % GROUP, j // GROUP] = snake[order]
            idx[base + j % GROUP, j // GROUP] = order
        state.write(self.values, vals.reshape(self.values.shape))
        state.write(self.indices, idx.reshape(self.indices.shape))

    def cost(self, core) -> Cost:
        cycles = 4 * self.n + self.values.free_size
        ns = cycles_to_ns(cycles, core.gpsimd.clock_hz)
        overhead = cycles_to_ns(core.costs.static_overhead_cycles, core.gpsimd.clock_hz)
        return Cost(ns, ns + overhead)
