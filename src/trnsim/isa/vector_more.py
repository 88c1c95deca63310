"""Vector-engine instructions of the current NKI ISA: cumulative tensor-scalar, exponential, and the
engines' pseudo-random generators.

Random numbers: each engine keeps its own generator in its scratch state. trnsim's generator is
Philox4x32-10 (`trnsim.numerics.CounterRNG`), not the hardware's XORWOW: the documented
properties hold (the same seed gives the same sequence; the state can be read and restored;
values are uniform), the bits do not match a device's. An engine nobody seeded draws from a
per-core, per-engine stream of the run's seed, so runs are reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from trnsim.errors import InvalidArgumentError, UnsupportedError
from trnsim.isa.access import AccessPattern
from trnsim.isa.instruction import Cost, Engine, ExecutionState, Instruction, streaming_cost
from trnsim.isa.operands import Operand, check_vector_operand, operand_aps, operand_value, same_elements
from trnsim.isa.ops import alu_op
from trnsim.isa.registers import REDUCE_CMDS, apply_reduce_cmd, registers
from trnsim.numerics import CounterRNG

EXPONENTIAL_SPEEDUP = 4.0  # NC-v4 VectorE exponential: 4x ScalarE's exp (hardware.md, NC-v4)
_CUMULATIVE_OPS = ("add", "subtract", "multiply", "max", "min")
_ENGINE_STREAM = {Engine.VECTOR: 101, Engine.GPSIMD: 102}  # generator streams of unseeded engines


def engine_generator(state: ExecutionState, engine: Engine) -> CounterRNG:
    """The engine's generator: as seeded by set_rng_seed / rand_set_state, else a fixed stream."""
    scratch = state.engine_state(engine)
    rng = scratch.get("rng")
    if rng is None:
        rng = scratch["rng"] = CounterRNG(0, _ENGINE_STREAM.get(engine, 100))
    return rng


def _require(instruction: Instruction, core, version: int) -> None:
    if core.version < version:
        instruction.fail(UnsupportedError(f"{instruction.name} needs NeuronCore-v{version} or newer; "
                                          f"the target is {core.name}"))


@dataclass(frozen=True, kw_only=True)
class TensorScalarCumulative(Instruction):
    """Per partition: reg = op1(op0(x[i], imm0), reg); dst[i] = reg (a running reduction).

    The register starts at op1's identity (reset_reduce), keeps its value (reduce), or is loaded
    with `imm1` (load_reduce); these are VectorE's accumulator registers.
    """

    OPCODE: ClassVar[str] = "TensorScalarCumulative"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.VECTOR,)

    dst: AccessPattern
    src: AccessPattern
    op0: str
    op1: str
    imm0: Operand
    imm1: Operand | None = None
    reduce_cmd: str = "reset_reduce"
    reverse0: bool = False

    def reads(self):
        return (self.src, *operand_aps(self.imm0, self.imm1))

    def writes(self):
        return (self.dst,)

    def check(self, core) -> None:
        super().check(core)
        same_elements(self, self.src, self.dst, "input and output")
        check_vector_operand(self, self.imm0, self.src, "imm0")
        if self.imm1 is not None:
            check_vector_operand(self, self.imm1, self.src, "imm1")
        if alu_op(self.op1).name not in _CUMULATIVE_OPS:
            self.fail(InvalidArgumentError(f"{self.name}: op1 must be one of "
                                           f"{', '.join(_CUMULATIVE_OPS)}; got {self.op1}"))
        if self.reduce_cmd not in ("reset_reduce", "reduce", "load_reduce"):
            self.fail(InvalidArgumentError(f"{self.name}: reduce_cmd {self.reduce_cmd!r}"))
        if self.reduce_cmd == "load_reduce" and self.imm1 is None:
            self.fail(InvalidArgumentError(f"{self.name}: load_reduce needs imm1"))
        for ap in (self.src, self.dst):
            if ap.dtype.name in ("int32", "uint32"):
                self.fail(InvalidArgumentError(f"{self.name}: {ap.dtype.name} is not supported"))

    def execute(self, state: ExecutionState) -> None:
        op0, op1 = alu_op(self.op0), alu_op(self.op1)
        x = state.read_compute(self.src).reshape(self.src.partitions, -1)
        imm0 = operand_value(state, self.imm0, 2)
        p0 = self.src.partition_start
        regs = registers(state, Engine.VECTOR, p0 + x.shape[0])
        window = slice(p0, p0 + x.shape[0])
        if self.reduce_cmd == "reset_reduce":
            identity = 0.0 if op1.name == "subtract" else op1.identity
            regs[window] = identity
        elif self.reduce_cmd == "load_reduce":
            regs[window] = np.broadcast_to(np.asarray(operand_value(state, self.imm1, 2),
                                                      dtype=np.float32).reshape(-1), (x.shape[0],))
        first = op0(imm0, x) if self.reverse0 else op0(x, imm0)
        first = np.broadcast_to(first, x.shape)
        carry = regs[window].astype(np.float32)
        out = np.empty_like(x, dtype=np.float32)
        for i in range(x.shape[1]):
            carry = op1(first[:, i], carry)
            out[:, i] = carry
        regs[window] = carry
        state.write(self.dst, out.reshape(self.dst.shape))

    def cost(self, core) -> Cost:
        return streaming_cost(core, self.engine, self.src.free_size)


@dataclass(frozen=True, kw_only=True)
class Exponential(Instruction):
    """dst = exp(src - max_value); with a reduce_cmd, also sums dst into VectorE's registers
    (and reads them out into `reduce_dst`). NeuronCore-v4."""

    OPCODE: ClassVar[str] = "Exponential"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.VECTOR,)

    dst: AccessPattern
    src: AccessPattern
    max_value: Operand = 0.0
    reduce_dst: AccessPattern | None = None
    reduce_cmd: str = "idle"
    reduce_init: Operand = 0.0

    def reads(self):
        return (self.src, *operand_aps(self.max_value, self.reduce_init))

    def writes(self):
        return (self.dst,) + ((self.reduce_dst,) if self.reduce_dst is not None else ())

    def check(self, core) -> None:
        _require(self, core, 4)
        super().check(core)
        same_elements(self, self.src, self.dst, "input and output")
        check_vector_operand(self, self.max_value, self.src, "max_value")
        if self.reduce_cmd not in REDUCE_CMDS or self.reduce_cmd == "reset":
            self.fail(InvalidArgumentError(f"{self.name}: reduce_cmd {self.reduce_cmd!r}"))
        if self.reduce_dst is not None:
            check_vector_operand(self, self.reduce_dst, self.src, "reduce_res")

    def execute(self, state: ExecutionState) -> None:
        x = state.read_compute(self.src)
        with np.errstate(over="ignore", invalid="ignore"):
            y = np.exp(x - operand_value(state, self.max_value, x.ndim)).astype(np.float32)
        state.write(self.dst, y.reshape(self.dst.shape))
        if self.reduce_cmd == "idle":
            return
        per_partition = y.reshape(y.shape[0], -1).sum(axis=1, dtype=np.float32)
        initial = operand_value(state, self.reduce_init, 1)
        values = apply_reduce_cmd(state, Engine.VECTOR, self.reduce_cmd, "add",
                                  self.src.partition_start, per_partition, initial)
        if self.reduce_dst is not None:
            state.write(self.reduce_dst, values.reshape(self.reduce_dst.shape))

    def cost(self, core) -> Cost:
        extra = core.costs.min_ii_cycles if self.reduce_dst is not None else 0
        return streaming_cost(core, self.engine, self.src.free_size, speedup=EXPONENTIAL_SPEEDUP,
                              extra_cycles=extra)


@dataclass(frozen=True, kw_only=True)
class RandomBits(Instruction):
    """dst = 32 random bits per element, truncated to dst's integer dtype (nisa.rng)."""

    OPCODE: ClassVar[str] = "RandomBits"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.VECTOR, Engine.GPSIMD)

    dst: AccessPattern

    def writes(self):
        return (self.dst,)

    def check(self, core) -> None:
        if self.engine is Engine.GPSIMD:
            _require(self, core, 3)
        super().check(core)
        if not self.dst.dtype.is_int:
            self.fail(InvalidArgumentError(f"{self.name}: dst must be an integer dtype; got "
                                           f"{self.dst.dtype.name}"))

    def execute(self, state: ExecutionState) -> None:
        bits = engine_generator(state, self.engine).bits32(self.dst.num_elements).astype(np.uint64)
        size = self.dst.dtype.itemsize
        low = bits & np.uint64((1 << (8 * size)) - 1)  # the least significant bits
        stored = low.astype(np.dtype(f"u{size}")).view(self.dst.dtype.np_dtype)
        state.write(self.dst, stored.reshape(self.dst.shape))

    def cost(self, core) -> Cost:
        return streaming_cost(core, self.engine, self.dst.free_size, accesses=1)


@dataclass(frozen=True, kw_only=True)
class RandomRange(Instruction):
    """dst = uniform in [low, high) per element, from VectorE's generator (nisa.rand2, v4)."""

    OPCODE: ClassVar[str] = "RandomRange"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.VECTOR,)

    dst: AccessPattern
    low: Operand
    high: Operand

    def reads(self):
        return operand_aps(self.low, self.high)

    def writes(self):
        return (self.dst,)

    def check(self, core) -> None:
        _require(self, core, 4)
        super().check(core)
        check_vector_operand(self, self.low, self.dst, "min")
        check_vector_operand(self, self.high, self.dst, "max")

    def execute(self, state: ExecutionState) -> None:
        u = engine_generator(state, Engine.VECTOR).uniform(self.dst.num_elements)
        u = u.reshape(self.dst.shape)
        low = operand_value(state, self.low, len(self.dst.shape))
        high = operand_value(state, self.high, len(self.dst.shape))
        state.write(self.dst, (low + u * (high - low)).astype(np.float32))

    def cost(self, core) -> Cost:
        return streaming_cost(core, self.engine, self.dst.free_size, accesses=1)


@dataclass(frozen=True, kw_only=True)
class RngSeed(Instruction):
    """Seed an engine's generator from `src` ([1, 1] seed, or [P, n] uint32 state words whose
    first four words of partition 0 are (seed lo, seed hi, position lo, position hi))."""

    OPCODE: ClassVar[str] = "RngSeed"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.VECTOR, Engine.GPSIMD)

    src: AccessPattern

    def reads(self):
        return (self.src,)

    def check(self, core) -> None:
        super().check(core)
        if self.src.dtype.itemsize != 4:
            self.fail(InvalidArgumentError(f"{self.name}: seeds are 32-bit values; got "
                                           f"{self.src.dtype.name}"))

    def execute(self, state: ExecutionState) -> None:
        words = np.asarray(state.read(self.src)).reshape(-1).view(np.uint32).astype(np.uint64)
        seed = int(words[0]) | (int(words[1]) << 32 if len(words) > 1 and self.src.free_size > 1 else 0)
        rng = CounterRNG(seed, _ENGINE_STREAM.get(self.engine, 100))
        if self.src.free_size >= 4:
            rng.seek(int(words[2]) | (int(words[3]) << 32))
        state.engine_state(self.engine)["rng"] = rng

    def cost(self, core) -> Cost:
        return streaming_cost(core, self.engine, self.src.free_size, accesses=1)


@dataclass(frozen=True, kw_only=True)
class RngState(Instruction):
    """dst [P, n] uint32 = the engine generator's state words (seed lo/hi, position lo/hi, 0...)
    on every partition; RngSeed restores it (nisa.rand_get_state)."""

    OPCODE: ClassVar[str] = "RngState"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.GPSIMD, Engine.VECTOR)

    dst: AccessPattern

    def writes(self):
        return (self.dst,)

    def check(self, core) -> None:
        _require(self, core, 3)
        if self.engine is Engine.VECTOR:
            _require(self, core, 4)
        super().check(core)
        if self.dst.dtype.name != "uint32" or self.dst.free_size < 4:
            self.fail(InvalidArgumentError(f"{self.name}: dst must be uint32 with at least 4 words "
                                           f"per partition"))

    def execute(self, state: ExecutionState) -> None:
        rng = engine_generator(state, self.engine)
        seed, position = rng.seed, rng.position
        words = np.zeros(self.dst.free_size, dtype=np.uint32)
        words[:4] = (seed & 0xFFFFFFFF, seed >> 32 & 0xFFFFFFFF, position & 0xFFFFFFFF,
                     position >> 32 & 0xFFFFFFFF)
        state.write(self.dst, np.broadcast_to(words, (self.dst.partitions, self.dst.free_size))
                    .reshape(self.dst.shape))

    def cost(self, core) -> Cost:
        return streaming_cost(core, self.engine, self.dst.free_size, accesses=1)
