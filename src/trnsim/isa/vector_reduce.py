"""Vector-engine reductions, statistics, selection and small data movement."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from trnsim.errors import InvalidArgumentError, UnsupportedError
from trnsim.isa import integers
from trnsim.isa.access import AccessPattern, Memory
from trnsim.isa.instruction import (
    Cost,
    Engine,
    ExecutionState,
    Instruction,
    SrcToDst,
    is_strided,
    streaming_cost,
)
from trnsim.isa.operands import Operand, check_vector_operand, operand_aps, operand_value, same_elements
from trnsim.isa.ops import alu_op
from trnsim.isa.registers import REDUCE_CMDS, apply_reduce_cmd
from trnsim.isa.vector_elementwise import read_for

FP32_MIN = float(np.finfo(np.float32).min)


def _exact_reduce(op, values: np.ndarray) -> np.ndarray:
    """The reduction of int64 values along the last axis with integer semantics."""
    fast = {"add": np.sum, "multiply": np.prod, "max": np.max, "min": np.min}.get(op.name)
    if fast is not None:
        return fast(values, axis=-1)
    out = values[..., 0]
    for i in range(1, values.shape[-1]):
        out = integers.apply(op, out, values[..., i])
    return out


@dataclass(frozen=True, kw_only=True)
class TensorReduce(SrcToDst):
    """Reduce `src` over trailing free axes (1-based, consecutive, including the last)."""

    OPCODE: ClassVar[str] = "TensorReduce"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.VECTOR, Engine.GPSIMD)

    op: str
    axes: tuple[int, ...] = (1,)
    negate: bool = False
    exact_int: bool = False  # integers through fp32 must stay exact (trnsim.isa.integers)

    def check(self, core) -> None:
        super().check(core)
        op = alu_op(self.op)
        if op.identity is None and op.name not in ("subtract",) and not op.is_bitwise:
            self.fail(InvalidArgumentError(f"{self.name}: {op.name} is not a reduction operator"))
        rank = len(self.src.shape)
        axes = sorted(self.axes)
        if (not axes or axes[-1] != rank - 1 or axes != list(range(axes[0], rank))
                or axes[0] < 1):
            self.fail(InvalidArgumentError(
                f"{self.name}: reduction axes {tuple(self.axes)} must be consecutive free axes ending "
                f"at the last axis {rank - 1} (axis 0 is the partition axis)"))
        kept = int(np.prod(self.src.shape[1:axes[0]]))
        if self.dst.partitions != self.src.partitions or self.dst.free_size != kept:
            self.fail(InvalidArgumentError(f"{self.name}: output shape {list(self.dst.shape)} does not "
                                           f"match the reduced shape"))

    def execute(self, state: ExecutionState) -> None:
        op = alu_op(self.op)
        x = read_for(state, self.src, op)
        first = min(self.axes)
        flat = x.reshape((*x.shape[:first], -1))
        if op.is_bitwise:
            out = flat[..., 0]
            for i in range(1, flat.shape[-1]):
                out = op(out, flat[..., i])
        elif op.name == "subtract":
            out = flat[..., 0] - np.add.reduce(flat[..., 1:], axis=-1, dtype=np.float32)
        else:
            out = op.reduce(flat, axis=flat.ndim - 1)
        if self.negate:
            out = -np.asarray(out, dtype=np.float32)
        if self.exact_int and not op.is_bitwise:
            integers.check_fp32_inputs(flat)
            exact = flat.astype(np.int64)
            exact = (exact[..., 0] - exact[..., 1:].sum(axis=-1) if op.name == "subtract"
                     else _exact_reduce(op, exact))
            integers.check_fp32_result(-exact if self.negate else exact, out)
        state.write(self.dst, np.asarray(out).reshape(self.dst.shape))

    def cost(self, core) -> Cost:
        fast = (self.src.dtype.name == self.dst.dtype.name == "bfloat16"
                and alu_op(self.op).name in ("add", "max"))
        return streaming_cost(core, self.engine, self.src.free_size, factor=0.5 if fast else 1.0,
                              strided=is_strided(core, self.src))


@dataclass(frozen=True, kw_only=True)
class BnStats(SrcToDst):
    """Per partition of src [P, F<=512]: (count, mean, var*count) of the even and odd elements."""

    OPCODE: ClassVar[str] = "BnStats"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.VECTOR,)

    def check(self, core) -> None:
        super().check(core)
        self.limit("bn_stats free size", self.src.free_size, core.bn_stats_max_free, core)
        if self.dst.free_size != 6 or self.dst.partitions != self.src.partitions:
            self.fail(InvalidArgumentError(f"{self.name}: output must be [{self.src.partitions}, 6]; "
                                           f"got {list(self.dst.shape)}"))

    def execute(self, state: ExecutionState) -> None:
        x = state.read_compute(self.src).reshape(self.src.partitions, -1).astype(np.float32)
        parts = []
        for half in (x[:, 0::2], x[:, 1::2]):
            count = half.shape[1]
            if count:
                mean = half.mean(axis=1, dtype=np.float32)
                m2 = np.square(half - mean[:, None]).sum(axis=1, dtype=np.float32)
            else:
                mean = m2 = np.zeros(x.shape[0], np.float32)
            parts += [np.full(x.shape[0], count, np.float32), mean, m2]
        state.write(self.dst, np.stack(parts, axis=1).reshape(self.dst.shape))

    def cost(self, core) -> Cost:
        return streaming_cost(core, self.engine, self.src.free_size)


@dataclass(frozen=True, kw_only=True)
class BnAggr(SrcToDst):
    """Combine (count, mean, M2) triples into (mean, variance) per partition (Chan et al.)."""

    OPCODE: ClassVar[str] = "BnAggr"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.VECTOR,)

    def check(self, core) -> None:
        super().check(core)
        if self.src.free_size % 3:
            self.fail(InvalidArgumentError(f"{self.name}: input elements per partition "
                                           f"({self.src.free_size}) must be a multiple of 3"))
        if self.dst.free_size != 2:
            self.fail(InvalidArgumentError(f"{self.name}: output must hold 2 elements per partition"))

    def execute(self, state: ExecutionState) -> None:
        t = state.read_compute(self.src).reshape(self.src.partitions, -1, 3).astype(np.float64)
        count, mean, m2 = t[..., 0], t[..., 1], t[..., 2]
        total = count.sum(axis=1)
        safe = np.where(total > 0, total, 1.0)
        grand = (count * mean).sum(axis=1) / safe
        var = (m2.sum(axis=1) + (count * np.square(mean - grand[:, None])).sum(axis=1)) / safe
        state.write(self.dst, np.stack([grand, var], axis=1).astype(np.float32).reshape(self.dst.shape))

    def cost(self, core) -> Cost:
        return streaming_cost(core, self.engine, self.src.free_size, factor=13.0 / 3.0)


@dataclass(frozen=True, kw_only=True)
class Max8(SrcToDst):
    """The 8 largest values of each partition, descending."""

    OPCODE: ClassVar[str] = "Max8"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.VECTOR,)

    def check(self, core) -> None:
        super().check(core)
        if not 8 <= self.src.free_size <= 16384:
            self.fail(InvalidArgumentError(f"{self.name}: needs 8 to 16384 elements per partition; "
                                           f"got {self.src.free_size}"))
        if self.dst.free_size != 8:
            self.fail(InvalidArgumentError(f"{self.name}: output must hold 8 elements per partition"))

    def execute(self, state: ExecutionState) -> None:
        x = state.read_compute(self.src).reshape(self.src.partitions, -1)
        top = -np.sort(-x, axis=1)[:, :8]
        state.write(self.dst, top.reshape(self.dst.shape))

    def cost(self, core) -> Cost:
        return streaming_cost(core, self.engine, self.src.free_size, min_ii_cycles=0)


@dataclass(frozen=True, kw_only=True)
class FindIndex8(Instruction):
    """Index (first occurrence) of each of 8 values per partition in src; uint16/uint32 output."""

    OPCODE: ClassVar[str] = "FindIndex8"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.VECTOR,)

    dst: AccessPattern
    src: AccessPattern
    values: AccessPattern

    def reads(self):
        return (self.src, self.values)

    def writes(self):
        return (self.dst,)

    def check(self, core) -> None:
        super().check(core)
        if self.values.free_size != 8 or self.dst.free_size != 8:
            self.fail(InvalidArgumentError(f"{self.name}: values and output hold 8 elements per partition"))

    def execute(self, state: ExecutionState) -> None:
        x = state.read_compute(self.src).reshape(self.src.partitions, -1)
        vals = state.read_compute(self.values).reshape(self.values.partitions, 8)
        hits = x[:, None, :] == vals[:, :, None]
        index = np.where(hits.any(axis=2), hits.argmax(axis=2), 0)
        state.write(self.dst, index.astype(np.int64).reshape(self.dst.shape))

    def cost(self, core) -> Cost:
        return streaming_cost(core, self.engine, self.src.free_size, min_ii_cycles=0)


@dataclass(frozen=True, kw_only=True)
class MatchReplace8(Instruction):
    """Replace the first occurrence of each of 8 values per partition with `imm`."""

    OPCODE: ClassVar[str] = "MatchReplace8"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.VECTOR,)

    dst: AccessPattern
    src: AccessPattern
    values: AccessPattern
    imm: float
    index_dst: AccessPattern | None = None

    def reads(self):
        return (self.src, self.values)

    def writes(self):
        return (self.dst,) + ((self.index_dst,) if self.index_dst is not None else ())

    def check(self, core) -> None:
        super().check(core)
        same_elements(self, self.src, self.dst, "input and output")
        if self.values.free_size != 8:
            self.fail(InvalidArgumentError(f"{self.name}: values hold 8 elements per partition"))

    def execute(self, state: ExecutionState) -> None:
        x = state.read_compute(self.src).reshape(self.src.partitions, -1).copy()
        vals = state.read_compute(self.values).reshape(self.values.partitions, 8)
        index = np.zeros(vals.shape, dtype=np.int64)
        for j in range(8):
            hits = x == vals[:, j:j + 1]
            found = hits.any(axis=1)
            first = hits.argmax(axis=1)
            rows = np.nonzero(found)[0]
            x[rows, first[rows]] = self.imm
            index[:, j] = np.where(found, first, 0)
        state.write(self.dst, x.reshape(self.dst.shape))
        if self.index_dst is not None:
            state.write(self.index_dst, index.reshape(self.index_dst.shape))

    def cost(self, core) -> Cost:
        return streaming_cost(core, self.engine, self.src.free_size)


class _SelectWithMax(Instruction):
    """Shared reduction tail of select_reduce / range_select: max into the vector registers."""

    def _reduce_out(self, state, result: np.ndarray, start: int) -> None:
        if self.reduce_cmd == "idle" and self.reduce_dst is None:
            return
        per_partition = result.reshape(result.shape[0], -1).max(axis=1)
        cmd = "reset_reduce" if self.reduce_cmd == "idle" else self.reduce_cmd
        values = apply_reduce_cmd(state, Engine.VECTOR, cmd, "max", start, per_partition)
        if self.reduce_dst is not None:
            state.write(self.reduce_dst, values.reshape(self.reduce_dst.shape))

    def _check_reduce(self) -> None:
        if self.reduce_cmd not in REDUCE_CMDS:
            self.fail(InvalidArgumentError(f"{self.name}: unknown reduce_cmd {self.reduce_cmd!r}"))


@dataclass(frozen=True, kw_only=True)
class SelectReduce(_SelectWithMax):
    """dst = where(predicate, on_true, on_false); optionally max-reduce per partition."""

    OPCODE: ClassVar[str] = "SelectReduce"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.VECTOR,)

    dst: AccessPattern
    predicate: AccessPattern
    on_true: AccessPattern
    on_false: Operand
    reverse: bool = False
    reduce_dst: AccessPattern | None = None
    reduce_cmd: str = "idle"

    def reads(self):
        return (self.predicate, self.on_true, *operand_aps(self.on_false))

    def writes(self):
        return (self.dst,) + ((self.reduce_dst,) if self.reduce_dst is not None else ())

    def check(self, core) -> None:
        super().check(core)
        same_elements(self, self.on_true, self.dst, "on_true and destination")
        same_elements(self, self.predicate, self.dst, "predicate and destination")
        check_vector_operand(self, self.on_false, self.on_true, "on_false")
        if self.predicate.memory is Memory.PSUM and self.on_true.memory is Memory.PSUM:
            self.fail(InvalidArgumentError(f"{self.name}: on_true and predicate cannot both be in PSUM"))
        self._check_reduce()

    def execute(self, state: ExecutionState) -> None:
        x = state.read_compute(self.on_true)
        pred = state.read(self.predicate).reshape(x.shape) != 0
        if self.reverse:
            pred = ~pred
        result = np.where(pred, x, operand_value(state, self.on_false, x.ndim)).astype(np.float32)
        state.write(self.dst, result.reshape(self.dst.shape))
        self._reduce_out(state, result, self.on_true.partition_start)

    def cost(self, core) -> Cost:
        return streaming_cost(core, self.engine, self.on_true.free_size, accesses=3)


@dataclass(frozen=True, kw_only=True)
class RangeSelect(_SelectWithMax):
    """Keep src where cmp0(index, bound0) and cmp1(index, bound1), index = start + free index;
    elsewhere `fill`. NeuronCore-v3 and later."""

    OPCODE: ClassVar[str] = "RangeSelect"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.VECTOR,)

    dst: AccessPattern
    src: AccessPattern
    cmp0: str
    bound0: AccessPattern
    cmp1: str
    bound1: AccessPattern
    range_start: int = 0
    fill: float = FP32_MIN
    reduce_dst: AccessPattern | None = None
    reduce_cmd: str = "idle"

    def reads(self):
        return (self.src, self.bound0, self.bound1)

    def writes(self):
        return (self.dst,) + ((self.reduce_dst,) if self.reduce_dst is not None else ())

    def check(self, core) -> None:
        if core.version < 3:
            self.fail(UnsupportedError(f"{self.name}: range_select needs NeuronCore-v3 or later "
                                       f"(target is {core.name})"))
        super().check(core)
        for cmp in (self.cmp0, self.cmp1):
            if alu_op(cmp).kind != "compare":
                self.fail(InvalidArgumentError(f"{self.name}: {cmp} is not a comparison"))
        check_vector_operand(self, self.bound0, self.src, "bound0")
        check_vector_operand(self, self.bound1, self.src, "bound1")
        same_elements(self, self.src, self.dst, "input and output")
        self._check_reduce()

    def execute(self, state: ExecutionState) -> None:
        x = state.read_compute(self.src).reshape(self.src.partitions, -1)
        index = np.float32(self.range_start) + np.arange(x.shape[1], dtype=np.float32)[None, :]
        b0 = operand_value(state, self.bound0, 2)
        b1 = operand_value(state, self.bound1, 2)
        keep = (alu_op(self.cmp0)(index, b0) != 0) & (alu_op(self.cmp1)(index, b1) != 0)
        result = np.where(keep, x, np.float32(self.fill)).astype(np.float32)
        state.write(self.dst, result.reshape(self.dst.shape))
        self._reduce_out(state, result, self.src.partition_start)

    def cost(self, core) -> Cost:
        return streaming_cost(core, self.engine, self.src.free_size)


@dataclass(frozen=True, kw_only=True)
class VectorTranspose(SrcToDst):
    """Bit-exact PF-transpose of up to 32 x 32 elements inside a partition quadrant."""

    OPCODE: ClassVar[str] = "VectorTranspose"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.VECTOR,)

    def check(self, core) -> None:
        super().check(core)
        self.limit("vector transpose partitions", self.src.partitions, 32, core)
        self.limit("vector transpose free size", self.src.free_size, 32, core)
        if self.dst.partitions != self.src.free_size or self.dst.free_size != self.src.partitions:
            self.fail(InvalidArgumentError(f"{self.name}: destination {list(self.dst.shape)} is not the "
                                           f"transpose of {list(self.src.shape)}"))

    def execute(self, state: ExecutionState) -> None:
        x = state.read(self.src).reshape(self.src.partitions, -1)
        if self.src.dtype == self.dst.dtype:
            state.write(self.dst, x.T.reshape(self.dst.shape))
        else:
            state.write(self.dst, state.read_compute(self.src).reshape(x.shape).T.reshape(self.dst.shape))

    def cost(self, core) -> Cost:
        return streaming_cost(core, self.engine, self.src.free_size)


@dataclass(frozen=True, kw_only=True)
class StreamShuffle(Instruction):
    """Within each 32-partition quadrant, dst partition i copies src partition mask[i]
    (255 leaves dst partition i unchanged)."""

    OPCODE: ClassVar[str] = "StreamShuffle"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.VECTOR,)

    dst: AccessPattern
    src: AccessPattern
    mask: tuple[int, ...]

    def reads(self):
        return (self.src, self.dst)

    def writes(self):
        return (self.dst,)

    def check(self, core) -> None:
        super().check(core)
        if len(self.mask) != 32:
            self.fail(InvalidArgumentError(f"{self.name}: shuffle mask needs 32 entries; "
                                           f"got {len(self.mask)}"))
        if self.src.dtype != self.dst.dtype or self.src.free_size != self.dst.free_size:
            self.fail(InvalidArgumentError(f"{self.name}: src and dst need the same dtype and elements "
                                           f"per partition"))

    def execute(self, state: ExecutionState) -> None:
        src = state.read(self.src).reshape(self.src.partitions, -1)
        out = state.read(self.dst).reshape(self.dst.partitions, -1).copy()
        for q in range(0, out.shape[0], 32):
            for i, m in enumerate(self.mask):
                if m != 255 and q + i < out.shape[0] and q + m < src.shape[0]:
                    out[q + i] = src[q + m]
        state.write(self.dst, out.reshape(self.dst.shape))

    def cost(self, core) -> Cost:
        return streaming_cost(core, self.engine, self.src.free_size)
