"""Element-wise instructions of the Vector engine (several also run on Scalar or GpSimd).

Arithmetic runs in fp32 and is cast on write; bitwise operators act on integer bit patterns.
Costs follow the legacy NKI ISA docstrings (hardware.md section 6), via `streaming_cost`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from trnsim.errors import InvalidArgumentError
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
from trnsim.isa.ops import AluOp, alu_op
from trnsim.isa.registers import apply_reduce_cmd

_FAST_BF16_OPS = ("add", "multiply", "subtract")


def read_for(state: ExecutionState, ap: AccessPattern, op: AluOp) -> np.ndarray:
    """Raw integers for bitwise operators, fp32 otherwise."""
    if op.is_bitwise:
        return state.read(ap).astype(np.int64).astype(np.int32)
    return state.read_compute(ap)


# GpSimd's native 32-bit integer arithmetic: see trnsim.isa.integers
_INT32_DTYPES = ("int32", "uint32")
NATIVE_INT_OPS = integers.NATIVE_OPS


def native_integer(engine: Engine, ops, aps, scalars=()) -> bool:
    """Does this instruction compute in GpSimd's native integer arithmetic? (GpSimd, every tile
    int32/uint32, every immediate operand integral, every operator one of NATIVE_INT_OPS.)"""
    return (engine is Engine.GPSIMD and all(alu_op(op).name in NATIVE_INT_OPS for op in ops)
            and all(ap.dtype.name in _INT32_DTYPES for ap in aps)
            and all(isinstance(v, AccessPattern) or float(v).is_integer() for v in scalars))


def _read_int(state: ExecutionState, ap: AccessPattern) -> np.ndarray:
    return np.asarray(state.read(ap), dtype=np.int64)


def _int_operand(state: ExecutionState, operand: Operand, ndim: int):
    if isinstance(operand, AccessPattern):
        raw = _read_int(state, operand).reshape(operand.partitions, -1)[:, :1]
        return raw.reshape((operand.partitions,) + (1,) * (ndim - 1))
    return np.int64(int(operand))


def _wrap_int(ap: AccessPattern, values: np.ndarray) -> np.ndarray:
    """Wrapped to 32 bits, as integer hardware does."""
    wrapped = (np.asarray(values, dtype=np.int64) & 0xFFFFFFFF).astype(np.uint32)
    return wrapped if ap.dtype.name == "uint32" else wrapped.view(np.int32)


def _sixteen_bit(*aps: AccessPattern) -> bool:
    return all(ap.dtype.name in ("bfloat16", "float16") for ap in aps)


def _perf_speedup(core, engine: Engine, kind: str, *aps: AccessPattern) -> float:
    """NC-v3+ performance modes for 16-bit floats: 'copy' (copy/tensor_scalar, SBUF->SBUF
    contiguous) or 'other' (e.g. tensor_tensor)."""
    if engine is Engine.GPSIMD or not _sixteen_bit(*aps):
        return 1.0
    spec = core.vector if engine is Engine.VECTOR else core.scalar
    if kind == "copy":
        if all(ap.memory is Memory.SBUF and ap.is_contiguous for ap in aps):
            return spec.perf_mode_copy_speedup
        return spec.perf_mode_other_speedup
    return spec.perf_mode_other_speedup


class _Elementwise(Instruction):
    """Shared pieces: one dst, a main input `src` whose free size is the cost's N."""

    # the two input fields that may not both be in PSUM (one read port per engine side), if any
    ONE_PSUM_INPUT: ClassVar[tuple[str, str] | None] = None

    def _check_free_size(self, core, ap: AccessPattern) -> None:
        limit = core.max_free_elements_psum if ap.memory is Memory.PSUM else core.max_free_elements_sbuf
        self.limit("free size", ap.free_size, limit, core)

    def _check_not_both_psum(self, a: AccessPattern, b: AccessPattern) -> None:
        if a.memory is Memory.PSUM and b.memory is Memory.PSUM:
            self.fail(InvalidArgumentError(f"{self.name}: the two input tiles cannot both be in PSUM"))


@dataclass(frozen=True, kw_only=True)
class TensorTensor(_Elementwise):
    """dst = op(in0, in1), element-wise over equal-sized tiles (native integers on GpSimd when
    every tile is int32/uint32; `exact_int`: see trnsim.isa.integers)."""

    OPCODE: ClassVar[str] = "TensorTensor"
    ONE_PSUM_INPUT: ClassVar[tuple[str, str] | None] = ("in0", "in1")
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.VECTOR, Engine.GPSIMD)

    dst: AccessPattern
    in0: AccessPattern
    in1: AccessPattern
    op: str
    exact_int: bool = False

    def reads(self):
        return (self.in0, self.in1)

    def writes(self):
        return (self.dst,)

    def check(self, core) -> None:
        super().check(core)
        alu_op(self.op)
        same_elements(self, self.in0, self.in1, "input")
        same_elements(self, self.in0, self.dst, "input and output")
        self._check_not_both_psum(self.in0, self.in1)
        self._check_free_size(core, self.in0)

    def execute(self, state: ExecutionState) -> None:
        op = alu_op(self.op)
        native = native_integer(self.engine, (op,), (self.in0, self.in1, self.dst))
        if native or self.exact_int:
            a = _read_int(state, self.in0)
            b = _read_int(state, self.in1).reshape(a.shape)
        if native:
            values = _wrap_int(self.dst, NATIVE_INT_OPS[op.name](a, b))
        else:
            values = op(read_for(state, self.in0, op),
                        read_for(state, self.in1, op).reshape(self.in0.shape))
        if self.exact_int:
            integers.check_exact(integers.apply(op, a, b), values, self.dst, native=native)
        state.write(self.dst, np.asarray(values).reshape(self.dst.shape))

    def cost(self, core) -> Cost:
        one_psum = (self.in0.memory is Memory.PSUM) != (self.in1.memory is Memory.PSUM)
        fast_bf16 = (all(ap.dtype.name == "bfloat16" for ap in (self.in0, self.in1, self.dst))
                     and alu_op(self.op).name in _FAST_BF16_OPS
                     and self.in0.is_contiguous and self.in1.is_contiguous)
        factor = 1.0 if (one_psum or fast_bf16) else 2.0
        speedup = 1.0 if fast_bf16 else _perf_speedup(core, self.engine, "other", self.in0, self.in1)
        return streaming_cost(core, self.engine, self.in0.free_size, factor=factor, speedup=speedup,
                              strided=is_strided(core, self.in0, self.in1, self.dst), accesses=3)


@dataclass(frozen=True, kw_only=True)
class TensorScalar(_Elementwise):
    """dst = (src op0 operand0) op1 operand1; operands are scalars or [P, 1] tiles.

    `reverse0/1` swap an operator's inputs. With `reduce_op`, the result is also reduced along the
    free axes into `reduce_dst` (tensor_scalar_reduce; one extra MIN_II).
    """

    OPCODE: ClassVar[str] = "TensorScalar"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD)

    dst: AccessPattern
    src: AccessPattern
    op0: str
    operand0: Operand
    reverse0: bool = False
    op1: str | None = None
    operand1: Operand | None = None
    reverse1: bool = False
    reduce_op: str | None = None
    reduce_dst: AccessPattern | None = None
    reduce_cmd: str = "reset_reduce"  # the registers: reset_reduce, reduce or load_reduce
    reduce_init: Operand | None = None  # load_reduce's initial register values
    reduce_negate: bool = False  # negate what is written to reduce_dst (not the registers)
    exact_int: bool = False  # see trnsim.isa.integers

    def reads(self):
        return (self.src, *operand_aps(self.operand0, self.operand1, self.reduce_init))

    def writes(self):
        return (self.dst,) + ((self.reduce_dst,) if self.reduce_dst is not None else ())

    def check(self, core) -> None:
        super().check(core)
        first = alu_op(self.op0)
        if self.op1 is not None:
            if first.is_bitwise != alu_op(self.op1).is_bitwise:
                self.fail(InvalidArgumentError(f"{self.name}: op0 and op1 must both be bitwise or both "
                                               f"arithmetic"))
            check_vector_operand(self, self.operand1, self.src, "operand1")
        if first.is_bitwise and self.engine is not Engine.VECTOR:
            self.fail(InvalidArgumentError(f"{self.name}: bitwise operators run on the Vector engine "
                                           f"only (got {self.engine})"))
        check_vector_operand(self, self.operand0, self.src, "operand0")
        same_elements(self, self.src, self.dst, "input and output")
        if self.reduce_op is not None:
            alu_op(self.reduce_op)
        self._check_free_size(core, self.src)

    def _native_integer(self) -> bool:
        ops = (self.op0,) if self.op1 is None else (self.op0, self.op1)
        operands = (self.operand0,) if self.op1 is None else (self.operand0, self.operand1)
        tiles = [o for o in operands if isinstance(o, AccessPattern)]
        return (self.reduce_op is None
                and native_integer(self.engine, ops, (self.src, self.dst, *tiles), operands))

    def _integers(self, state: ExecutionState, fns) -> np.ndarray:
        """Both operators on int64 values with `fns(op)`'s semantics."""
        y = _read_int(state, self.src)
        steps = [(self.op0, self.operand0, self.reverse0)]
        if self.op1 is not None:
            steps.append((self.op1, self.operand1, self.reverse1))
        for op, operand, reverse in steps:
            value = _int_operand(state, operand, y.ndim)
            fn = fns(alu_op(op))
            y = fn(value, y) if reverse else fn(y, value)
        return y

    def execute(self, state: ExecutionState) -> None:
        native = self._native_integer()
        checked = self.exact_int and self.reduce_op is None
        if not native and not checked:
            self._execute_fp32(state)
            return
        if native:  # each operator's result wraps to 32 bits, as the hardware's registers do
            values = _wrap_int(self.dst, self._integers(
                state, lambda op: lambda a, b: _wrap_int(self.dst, NATIVE_INT_OPS[op.name](a, b))
                .astype(np.int64)))
        else:
            values = self._fp32(state)
        if checked:
            exact = self._integers(state, lambda op: lambda a, b: integers.apply(op, a, b))
            integers.check_exact(exact, values, self.dst, native=native)
        state.write(self.dst, np.asarray(values).reshape(self.dst.shape))

    def _fp32(self, state: ExecutionState) -> np.ndarray:
        op0 = alu_op(self.op0)
        x = read_for(state, self.src, op0)
        y = _apply(op0, x, _scalar(state, self.operand0, x.ndim, op0), self.reverse0)
        if self.op1 is not None:
            op1 = alu_op(self.op1)
            y = _apply(op1, y, _scalar(state, self.operand1, x.ndim, op1), self.reverse1)
        return y

    def _execute_fp32(self, state: ExecutionState) -> None:
        y = self._fp32(state)
        state.write(self.dst, y.reshape(self.dst.shape))
        if self.reduce_op is not None:
            op = alu_op(self.reduce_op)
            per_partition = op.reduce(np.asarray(y, dtype=np.float32).reshape(y.shape[0], -1), axis=1)
            initial = (operand_value(state, self.reduce_init, 1)
                       if self.reduce_init is not None else None)
            values = apply_reduce_cmd(state, self.engine, self.reduce_cmd, op.name,
                                      self.src.partition_start, per_partition, initial)
            if self.reduce_dst is not None:
                out = -values if self.reduce_negate else values
                state.write(self.reduce_dst, out.reshape(self.reduce_dst.shape))

    def cost(self, core) -> Cost:
        extra = core.costs.min_ii_cycles if self.reduce_op is not None else 0
        speedup = _perf_speedup(core, self.engine, "copy", self.src, self.dst)
        return streaming_cost(core, self.engine, self.src.free_size, extra_cycles=extra, speedup=speedup,
                              strided=is_strided(core, self.src, self.dst))


def _scalar(state: ExecutionState, operand: Operand, ndim: int, op: AluOp):
    if op.is_bitwise and not isinstance(operand, AccessPattern):
        return np.int32(int(operand))
    if op.is_bitwise:
        raw = state.read(operand).reshape(operand.partitions, -1)[:, :1]
        return raw.astype(np.int64).astype(np.int32).reshape((operand.partitions,) + (1,) * (ndim - 1))
    return operand_value(state, operand, ndim)


def _apply(op: AluOp, data, operand, reverse: bool):
    return op(operand, data) if reverse else op(data, operand)


@dataclass(frozen=True, kw_only=True)
class ScalarTensorTensor(_Elementwise):
    """dst = (src op0 operand0) op1 in1, with operand0 a scalar or [P, 1] tile."""

    OPCODE: ClassVar[str] = "ScalarTensorTensor"
    ONE_PSUM_INPUT: ClassVar[tuple[str, str] | None] = ("src", "in1")
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.VECTOR, Engine.GPSIMD)

    dst: AccessPattern
    src: AccessPattern
    op0: str
    operand0: Operand
    op1: str
    in1: AccessPattern
    reverse0: bool = False
    reverse1: bool = False

    def reads(self):
        return (self.src, self.in1, *operand_aps(self.operand0))

    def writes(self):
        return (self.dst,)

    def check(self, core) -> None:
        super().check(core)
        alu_op(self.op0)
        alu_op(self.op1)
        check_vector_operand(self, self.operand0, self.src, "operand0")
        same_elements(self, self.src, self.in1, "data and operand1")
        same_elements(self, self.src, self.dst, "input and output")
        self._check_not_both_psum(self.src, self.in1)

    def execute(self, state: ExecutionState) -> None:
        op0, op1 = alu_op(self.op0), alu_op(self.op1)
        x = read_for(state, self.src, op0)
        y = _apply(op0, x, _scalar(state, self.operand0, x.ndim, op0), self.reverse0)
        other = read_for(state, self.in1, op1).reshape(x.shape)
        y = _apply(op1, y, other, self.reverse1)
        state.write(self.dst, y.reshape(self.dst.shape))

    def cost(self, core) -> Cost:
        fast = (self.src.dtype.name == self.in1.dtype.name == "bfloat16" and self.src.free_size % 2 == 0
                and alu_op(self.op0).name == "subtract" and alu_op(self.op1).name == "multiply")
        return streaming_cost(core, self.engine, self.src.free_size, factor=1.0 if fast else 2.0,
                              strided=is_strided(core, self.src, self.in1, self.dst), accesses=3)


@dataclass(frozen=True, kw_only=True)
class TensorCopy(_Elementwise, SrcToDst):
    """dst = src. Vector/GpSimd copy bits when dtypes match; ScalarE always goes through fp32."""

    OPCODE: ClassVar[str] = "TensorCopy"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD)

    def check(self, core) -> None:
        super().check(core)
        same_elements(self, self.src, self.dst, "source and destination")
        self._check_free_size(core, self.src)

    def execute(self, state: ExecutionState) -> None:
        if self.src.dtype == self.dst.dtype and self.engine is not Engine.SCALAR:
            state.write(self.dst, state.read(self.src).reshape(self.dst.shape))
        else:
            state.write(self.dst, state.read_compute(self.src).reshape(self.dst.shape))

    def cost(self, core) -> Cost:
        speedup = _perf_speedup(core, self.engine, "copy", self.src, self.dst)
        return streaming_cost(core, self.engine, self.src.free_size, speedup=speedup,
                              strided=is_strided(core, self.src, self.dst))


@dataclass(frozen=True, kw_only=True)
class Memset(_Elementwise):
    OPCODE: ClassVar[str] = "Memset"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.VECTOR, Engine.GPSIMD)

    dst: AccessPattern
    value: float

    def writes(self):
        return (self.dst,)

    def execute(self, state: ExecutionState) -> None:
        state.write(self.dst, np.full(self.dst.shape, self.value, dtype=np.float64)
                    if self.dst.dtype.is_int else np.full(self.dst.shape, self.value, dtype=np.float32))

    def cost(self, core) -> Cost:
        half = self.value == 0 and _sixteen_bit(self.dst)
        return streaming_cost(core, self.engine, self.dst.free_size, factor=0.5 if half else 1.0,
                              accesses=1)


@dataclass(frozen=True, kw_only=True)
class Reciprocal(_Elementwise, SrcToDst):
    OPCODE: ClassVar[str] = "Reciprocal"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.VECTOR,)

    def check(self, core) -> None:
        super().check(core)
        same_elements(self, self.src, self.dst, "input and output")

    def execute(self, state: ExecutionState) -> None:
        with np.errstate(divide="ignore"):
            state.write(self.dst, (np.float32(1.0) / state.read_compute(self.src)).reshape(self.dst.shape))

    def cost(self, core) -> Cost:
        return streaming_cost(core, self.engine, self.src.free_size, factor=8.0,
                              strided=is_strided(core, self.src, self.dst))


@dataclass(frozen=True, kw_only=True)
class TensorCopyPredicated(_Elementwise):
    """dst[i] = src[i] where predicate[i] != 0 (reversed with `reverse`); elsewhere dst is kept."""

    OPCODE: ClassVar[str] = "TensorCopyPredicated"
    ONE_PSUM_INPUT: ClassVar[tuple[str, str] | None] = ("src", "predicate")
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.VECTOR,)

    dst: AccessPattern
    src: AccessPattern | float
    predicate: AccessPattern
    reverse: bool = False

    def reads(self):
        return (*operand_aps(self.src), self.predicate, self.dst)

    def writes(self):
        return (self.dst,)

    def check(self, core) -> None:
        super().check(core)
        same_elements(self, self.predicate, self.dst, "predicate and destination")
        if isinstance(self.src, AccessPattern):
            same_elements(self, self.src, self.dst, "source and destination")
            self._check_not_both_psum(self.src, self.predicate)

    def execute(self, state: ExecutionState) -> None:
        keep = state.read(self.predicate).reshape(self.dst.shape) != 0
        if self.reverse:
            keep = ~keep
        current = state.read(self.dst).copy()
        if isinstance(self.src, AccessPattern):
            new = state.read(self.src).reshape(self.dst.shape)
            if new.dtype != current.dtype:
                new = state.read_compute(self.src).reshape(self.dst.shape)
                current = state.read_compute(self.dst).copy()
        else:
            new = np.full(self.dst.shape, self.src, dtype=np.float32)
            current = state.read_compute(self.dst).copy()
        current[keep] = new[keep]
        state.write(self.dst, current)

    def cost(self, core) -> Cost:
        mixed = isinstance(self.src, AccessPattern) and (
            (self.src.memory is Memory.PSUM) != (self.predicate.memory is Memory.PSUM))
        return streaming_cost(core, self.engine, self.dst.free_size, factor=1.0 if mixed else 2.0,
                              accesses=3)


@dataclass(frozen=True, kw_only=True)
class Dropout(_Elementwise):
    """dst = 0 with probability `prob` (scalar or [P, 1]), else src; no rescaling, as on hardware."""

    OPCODE: ClassVar[str] = "Dropout"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.VECTOR,)

    dst: AccessPattern
    src: AccessPattern
    prob: Operand

    def reads(self):
        return (self.src, *operand_aps(self.prob))

    def writes(self):
        return (self.dst,)

    def check(self, core) -> None:
        super().check(core)
        same_elements(self, self.src, self.dst, "input and output")
        check_vector_operand(self, self.prob, self.src, "prob")

    def execute(self, state: ExecutionState) -> None:
        x = state.read_compute(self.src)
        drop = state.random_uniform(x.shape) < operand_value(state, self.prob, x.ndim)
        state.write(self.dst, np.where(drop, np.float32(0), x).reshape(self.dst.shape))

    def cost(self, core) -> Cost:
        return streaming_cost(core, self.engine, self.src.free_size)


@dataclass(frozen=True, kw_only=True)
class TensorTensorScan(_Elementwise):
    """Per partition: out[i] = op1(op0(in0[i], out[i-1]), in1[i]), out[-1] = initial."""

    OPCODE: ClassVar[str] = "TensorTensorScan"
    ONE_PSUM_INPUT: ClassVar[tuple[str, str] | None] = ("in0", "in1")
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.VECTOR,)

    dst: AccessPattern
    in0: AccessPattern
    in1: AccessPattern
    initial: Operand
    op0: str
    op1: str
    reverse0: bool = False
    reverse1: bool = False
    exact_int: bool = False  # integers through fp32 must stay exact (trnsim.isa.integers)

    def reads(self):
        return (self.in0, self.in1, *operand_aps(self.initial))

    def writes(self):
        return (self.dst,)

    def check(self, core) -> None:
        super().check(core)
        alu_op(self.op0)
        alu_op(self.op1)
        same_elements(self, self.in0, self.in1, "input")
        same_elements(self, self.in0, self.dst, "input and output")
        check_vector_operand(self, self.initial, self.in0, "initial")
        self._check_not_both_psum(self.in0, self.in1)

    def execute(self, state: ExecutionState) -> None:
        op0, op1 = alu_op(self.op0), alu_op(self.op1)
        a = state.read_compute(self.in0).reshape(self.in0.partitions, -1)
        b = state.read_compute(self.in1).reshape(a.shape)
        carry = np.broadcast_to(operand_value(state, self.initial, 2), (a.shape[0], 1))[:, 0]
        out = self._scan(a, b, carry, op0, op1)
        if self.exact_int:
            for values in (a, b, carry):
                integers.check_fp32_inputs(values)
            wide = (a.astype(np.int64), b.astype(np.int64), carry.astype(np.int64))
            integers.check_fp32_result(self._scan(*wide, op0, op1, exact=True), out)
        state.write(self.dst, out.reshape(self.dst.shape))

    def _scan(self, a, b, carry, op0: AluOp, op1: AluOp, *, exact: bool = False) -> np.ndarray:
        """The scan in fp32, or in float64 with integer semantics (`exact`)."""
        call = integers.apply if exact else (lambda op, x, y: op(x, y))
        out = np.empty(a.shape, dtype=np.int64 if exact else np.float32)
        for i in range(a.shape[1]):
            first = call(op0, carry, a[:, i]) if self.reverse0 else call(op0, a[:, i], carry)
            carry = call(op1, b[:, i], first) if self.reverse1 else call(op1, first, b[:, i])
            out[:, i] = carry
        return out

    def cost(self, core) -> Cost:
        return streaming_cost(core, self.engine, self.in0.free_size, factor=2.0, accesses=3)
