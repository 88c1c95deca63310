"""GpSimd instructions: cross-partition reduction, index generation, affine select, local gather.

Index expressions are affine in the partition index p and the free indices i_k:
``value = base + partition_step * p + sum(step_k * i_k)``, computed in 32-bit integers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from trnsim.errors import InvalidArgumentError
from trnsim.isa.access import AccessPattern
from trnsim.isa.instruction import Cost, Engine, ExecutionState, Instruction, SrcToDst, streaming_cost
from trnsim.isa.ops import alu_op
from trnsim.isa.vector_elementwise import read_for


def affine_values(shape: tuple[int, ...], base: int, partition_step: int,
                  steps: tuple[int, ...]) -> np.ndarray:
    """int64 array of base + partition_step * p + sum(steps[k] * i_k) over a tile shape."""
    free = shape[1:]
    if len(steps) != len(free):
        raise InvalidArgumentError(f"affine expression has {len(steps)} free steps for a tile with "
                                   f"{len(free)} free dimensions")
    grids = np.indices(shape, dtype=np.int64)
    value = np.int64(base) + partition_step * grids[0]
    for k, step in enumerate(steps):
        value = value + step * grids[k + 1]
    return value


def _check_steps(instruction: Instruction, ap: AccessPattern) -> None:
    free = instruction.free_shape or ap.free_shape
    if len(instruction.steps) != len(free):
        instruction.fail(InvalidArgumentError(f"{instruction.name}: {len(instruction.steps)} steps for "
                                              f"{len(free)} free dimensions"))
    size = 1
    for n in free:
        size *= n
    if size != ap.free_size:
        instruction.fail(InvalidArgumentError(f"{instruction.name}: logical free shape {list(free)} "
                                              f"does not match the operand's {ap.free_size} elements"))


@dataclass(frozen=True, kw_only=True)
class TensorPartitionReduce(SrcToDst):
    """dst[0, :] = op over partitions of src (add, max, min, bitwise and/or)."""

    OPCODE: ClassVar[str] = "TensorPartitionReduce"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.GPSIMD,)

    op: str

    def check(self, core) -> None:
        super().check(core)
        if alu_op(self.op).name not in ("add", "max", "min", "bitwise_and", "bitwise_or", "multiply"):
            self.fail(InvalidArgumentError(f"{self.name}: {self.op} cannot reduce across partitions"))
        if self.dst.partitions != 1 or self.dst.free_size != self.src.free_size:
            self.fail(InvalidArgumentError(f"{self.name}: output must be [1, {self.src.free_size}]; got "
                                           f"{list(self.dst.shape)}"))

    def execute(self, state: ExecutionState) -> None:
        op = alu_op(self.op)
        x = read_for(state, self.src, op).reshape(self.src.partitions, -1)
        if op.is_bitwise:
            out = x[0]
            for row in x[1:]:
                out = op(out, row)
        else:
            out = op.reduce(x, axis=0)
        state.write(self.dst, np.asarray(out).reshape(self.dst.shape))

    def cost(self, core) -> Cost:
        # ASSUMPTION: one pass per partition group of 16 (a GpSimd core each) plus a combine step.
        return streaming_cost(core, self.engine, self.src.free_size * (self.src.partitions / 16 + 3),
                              extra_cycles=core.costs.gpsimd_index_fixed_cycles)


@dataclass(frozen=True, kw_only=True)
class Iota(Instruction):
    """dst = base + partition_step * p + sum(steps * free index), int32 math, cast on write."""

    OPCODE: ClassVar[str] = "Iota"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.GPSIMD,)

    dst: AccessPattern
    base: int = 0
    partition_step: int = 0
    steps: tuple[int, ...] = ()
    free_shape: tuple[int, ...] = ()  # logical free shape `steps` refer to (default: dst's dims)

    def writes(self):
        return (self.dst,)

    def check(self, core) -> None:
        super().check(core)
        _check_steps(self, self.dst)

    def execute(self, state: ExecutionState) -> None:
        shape = (self.dst.partitions, *(self.free_shape or self.dst.free_shape))
        value = affine_values(shape, self.base, self.partition_step, self.steps).reshape(self.dst.shape)
        state.write(self.dst, value.astype(np.int32).astype(np.float64 if self.dst.dtype.is_int
                                                              else np.float32))

    def cost(self, core) -> Cost:
        return streaming_cost(core, self.engine, self.dst.free_size, min_ii_cycles=0,
                              extra_cycles=core.costs.gpsimd_index_fixed_cycles, accesses=1)


@dataclass(frozen=True, kw_only=True)
class AffineSelect(SrcToDst):
    """dst = src where cmp(affine(p, i), 0) holds, else `fill` (e.g. a causal mask)."""

    OPCODE: ClassVar[str] = "AffineSelect"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.GPSIMD,)

    cmp: str = "greater"
    base: int = 0
    partition_step: int = 0
    steps: tuple[int, ...] = ()
    fill: float = 0.0
    free_shape: tuple[int, ...] = ()  # logical free shape `steps` refer to (default: src's dims)

    def check(self, core) -> None:
        super().check(core)
        if alu_op(self.cmp).kind != "compare":
            self.fail(InvalidArgumentError(f"{self.name}: {self.cmp} is not a comparison"))
        _check_steps(self, self.src)
        if self.src.partitions != self.dst.partitions or self.src.free_size != self.dst.free_size:
            self.fail(InvalidArgumentError(f"{self.name}: input and output shapes differ"))

    def execute(self, state: ExecutionState) -> None:
        # The partition index counts from the operand's start partition, as NKI's i_p does.
        shape = (self.src.partitions, *(self.free_shape or self.src.free_shape))
        pred = affine_values(shape, self.base, self.partition_step, self.steps)
        keep = (alu_op(self.cmp)(pred.astype(np.float64), 0.0) != 0).reshape(self.src.shape)
        values = state.read_compute(self.src)
        state.write(self.dst, np.where(keep, values, np.float32(self.fill)).reshape(self.dst.shape))

    def cost(self, core) -> Cost:
        return streaming_cost(core, self.engine, self.src.free_size, min_ii_cycles=0,
                              extra_cycles=core.costs.gpsimd_index_fixed_cycles)


@dataclass(frozen=True, kw_only=True)
class LocalGather(Instruction):
    """Gather within each 16-partition group (one GpSimd core each).

    Each group flattens its [16, k] index slice partition-first, keeps `valid_indices`, and for
    every index i copies `elems_per_index` contiguous elements starting at element offset i of
    each of its partitions: dst[p, j, e] = src[p, index_j + e].
    """

    OPCODE: ClassVar[str] = "LocalGather"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.GPSIMD,)

    dst: AccessPattern
    src: AccessPattern
    index: AccessPattern
    elems_per_index: int = 1
    valid_indices: int | None = None

    def reads(self):
        return (self.src, self.index)

    def writes(self):
        return (self.dst,)

    @property
    def indices_per_core(self) -> int:
        return self.valid_indices or 16 * self.index.free_size

    def check(self, core) -> None:
        super().check(core)
        if self.src.partitions != self.index.partitions or self.src.partitions % 16:
            self.fail(InvalidArgumentError(f"{self.name}: src and index need the same partition count, "
                                           f"a multiple of 16"))
        if self.elems_per_index not in (1, 2, 4, 8, 16, 32):
            self.fail(InvalidArgumentError(f"{self.name}: elements per index must be 1, 2, 4, 8, 16 "
                                           f"or 32; got {self.elems_per_index}"))
        self.limit("indices per GpSimd core", self.indices_per_core, 4096, core)
        if self.src.dtype != self.dst.dtype:
            self.fail(InvalidArgumentError(f"{self.name}: local_gather does not cast"))

    def execute(self, state: ExecutionState) -> None:
        src = state.read(self.src).reshape(self.src.partitions, -1)
        index = state.read(self.index).reshape(self.index.partitions, -1).astype(np.int64)
        count, e = self.indices_per_core, self.elems_per_index
        out = np.empty((src.shape[0], count, e), dtype=src.dtype)
        offsets = np.arange(e)
        for g in range(0, src.shape[0], 16):
            flat = index[g:g + 16].flatten(order="F")[:count]
            columns = flat[:, None] + offsets[None, :]
            if columns.size and (columns.max() >= src.shape[1] or columns.min() < 0):
                self.fail(InvalidArgumentError(f"{self.name}: gather index out of range "
                                               f"[0, {src.shape[1]})"))
            out[g:g + 16] = src[g:g + 16][:, columns]
        state.write(self.dst, out.reshape(self.dst.shape))

    def cost(self, core) -> Cost:
        t = 4
        e = self.elems_per_index
        c = ((28 + t * e) / (t * e)) / min(4 / self.src.dtype.itemsize, e)
        return streaming_cost(core, self.engine, self.indices_per_core * e / c, min_ii_cycles=0,
                              extra_cycles=core.costs.gpsimd_index_fixed_cycles)


@dataclass(frozen=True, kw_only=True)
class Random(Instruction):
    """dst = uniform [0, 1) from the core's seeded counter-based generator (nl.rand).

    ASSUMPTION: costed like a GpSimd streaming op of N elements (the hardware RNG's rate is not
    documented before NC-v4's XORWOW on VectorE).
    """

    OPCODE: ClassVar[str] = "Random"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.GPSIMD, Engine.VECTOR)

    dst: AccessPattern

    def writes(self):
        return (self.dst,)

    def execute(self, state: ExecutionState) -> None:
        seeded = state.engine_state(self.engine).get("rng")  # set by nl.random_seed / RngSeed
        if seeded is not None:
            state.write(self.dst, seeded.uniform(self.dst.num_elements).reshape(self.dst.shape))
        else:
            state.write(self.dst, state.random_uniform(self.dst.shape))

    def cost(self, core) -> Cost:
        return streaming_cost(core, self.engine, self.dst.free_size, accesses=1)
