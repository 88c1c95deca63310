"""Sequencer instructions: scalar registers, branches, and operands addressed through registers.

Every engine's sequencer holds 32-bit scalar registers and runs control instructions — register
ALU, branches, DMA triggers (hardware.md section 1, "Sequencers"); the NKI compiler turns
``nl.fori_loop`` / ``nl.while_loop`` into such branches. trnsim models one register file per core
(the compiler keeps every engine's copy of a virtual register in step) and a program counter:
`Branch` and `Jump` name the index of the instruction to continue at, so a dynamic loop is
executed, not unrolled.

Control instructions have ``KIND = "control"``: the simulator runs ``run(registers, state)`` (in
both modes) instead of ``execute``. In timing-only runs there is no memory, so a register loaded
from memory holds an *unknown* value; a branch or an address that needs it raises an error naming
where the value came from. ``KIND = "dynamic"`` marks `RegisterAddressed`: an ordinary instruction
whose operands move by a register's value, resolved into a concrete instruction each time it runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from trnsim.errors import InvalidArgumentError, TrnsimError
from trnsim.isa.access import AccessPattern, Memory
from trnsim.isa.instruction import Cost, Engine, ExecutionState, Instruction, cycles_to_ns

# ASSUMPTION: sequencer timing is undocumented. A register move, register ALU op or branch costs
# SEQUENCER_OP_CYCLES cycles of the Vector engine clock; a register load or store from/to memory
# costs one access set-up plus the static per-instruction overhead (InstructionCosts).
SEQUENCER_OP_CYCLES = 4
REGISTER_BITS = 32


class UnknownRegisterValue(TrnsimError):
    """A timing-only run needed a register value that only memory contents could decide."""


def wrap32(value: int) -> int:
    """Two's-complement 32-bit wrap, as the sequencers' registers hold values."""
    value = int(value) & 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


class RegisterFile:
    """A core's virtual registers during one run: value (or unknown), and when it is valid."""

    def __init__(self) -> None:
        self.values: dict[int, int | None] = {}
        self.ready_ns: dict[int, float] = {}
        self.origin: dict[int, str | None] = {}  # where an unknown value was loaded

    def set(self, register: int, value: int | None, ready_ns: float = 0.0,
            origin: str | None = None) -> None:
        self.values[register] = None if value is None else wrap32(value)
        self.ready_ns[register] = ready_ns
        self.origin[register] = origin

    def get(self, register: int, user: Instruction) -> int:
        if register not in self.values:
            user.fail(InvalidArgumentError(f"{user.name}: register r{register} is read before any "
                                           f"value was written to it"))
        value = self.values[register]
        if value is None:
            where = self.origin.get(register) or "an unknown place"
            user.fail(UnknownRegisterValue(
                f"{user.name}: a timing-only run cannot know register r{register}: it was loaded "
                f"from memory at {where}; run functionally (with input arrays), or bound the loop "
                f"or offset by a constant"))
        return value

    def ready(self, registers: tuple[int, ...]) -> float:
        return max((self.ready_ns.get(r, 0.0) for r in registers), default=0.0)


def _sequencer_cost(core) -> Cost:
    ns = cycles_to_ns(SEQUENCER_OP_CYCLES, core.vector.clock_hz)
    return Cost(ns, ns)


def _memory_access_cost(core) -> Cost:
    costs = core.costs
    ns = cycles_to_ns(costs.static_overhead_cycles + costs.access_setup_cycles, core.vector.clock_hz)
    return Cost(ns, ns)


_REGISTER_ALU = {
    "add": lambda a, b: a + b, "subtract": lambda a, b: a - b, "multiply": lambda a, b: a * b,
    "divide": lambda a, b: int(a / b) if b else 0, "mod": lambda a, b: a - b * int(a / b) if b else 0,
    "max": max, "min": min, "bitwise_and": lambda a, b: a & b, "bitwise_or": lambda a, b: a | b,
    "bitwise_xor": lambda a, b: a ^ b, "left_shift": lambda a, b: a << (b & 31),
    "right_shift": lambda a, b: a >> (b & 31),
    "equal": lambda a, b: int(a == b), "not_equal": lambda a, b: int(a != b),
    "less": lambda a, b: int(a < b), "less_equal": lambda a, b: int(a <= b),
    "greater": lambda a, b: int(a > b), "greater_equal": lambda a, b: int(a >= b),
}
REGISTER_OPS = tuple(_REGISTER_ALU)


@dataclass(frozen=True, kw_only=True)
class Control(Instruction):
    """Base of the sequencer instructions: no engine memory operands unless declared."""

    KIND: ClassVar[str] = "control"
    ENGINES: ClassVar[tuple[Engine, ...]] = (Engine.SYNC,)

    def registers_read(self) -> tuple[int, ...]:
        return ()

    def run(self, registers: RegisterFile, state: ExecutionState | None, now_ns: float) -> int | None:
        """Apply the instruction to the registers (and memory, in a functional run); return the
        index of the next instruction if it jumps, else None."""
        raise NotImplementedError(self.OPCODE)

    def execute(self, state: ExecutionState) -> None:  # the simulator calls run() instead
        raise InvalidArgumentError(f"{self.name}: a control instruction runs on a sequencer")

    def check(self, core) -> None:
        for ap in (*self.reads(), *self.writes()):
            if ap.memory is not Memory.HBM and ap.partitions > core.partitions:
                self.limit("partition count", ap.partitions, core.partitions, core)
            if ap.num_elements != 1:
                self.fail(InvalidArgumentError(
                    f"{self.name}: a register moves one 32-bit value; {ap.describe()} holds "
                    f"{ap.num_elements} elements"))
            if ap.dtype.itemsize > 4 or ap.dtype.packed > 1:
                self.fail(InvalidArgumentError(f"{self.name}: {ap.dtype.name} is not a 32-bit or "
                                               f"narrower scalar"))

    def cost(self, core) -> Cost:
        return _sequencer_cost(core)


def _value(operand: int | str, registers: RegisterFile, user: Instruction) -> int:
    """An operand is an immediate int or a register reference 'r<N>'."""
    if isinstance(operand, str):
        return registers.get(int(operand[1:]), user)
    return int(operand)


def register_ref(register: int) -> str:
    """How a register operand is written in an instruction field ('r3'), distinct from 3."""
    return f"r{int(register)}"


def _registers_in(*operands) -> tuple[int, ...]:
    return tuple(int(o[1:]) for o in operands if isinstance(o, str))


@dataclass(frozen=True, kw_only=True)
class RegisterMove(Control):
    """dst = an immediate or another register (nisa.register_move / register_alloc(x))."""

    OPCODE: ClassVar[str] = "RegisterMove"

    dst: int
    src: int | str

    def registers_read(self):
        return _registers_in(self.src)

    def run(self, registers, state, now_ns):
        known = not isinstance(self.src, str) or registers.values.get(int(self.src[1:])) is not None
        value = _value(self.src, registers, self) if known else None
        origin = registers.origin.get(int(self.src[1:])) if not known else None
        registers.set(self.dst, value, now_ns, origin)
        return None


@dataclass(frozen=True, kw_only=True)
class RegisterAlu(Control):
    """dst = op(a, b) on 32-bit integers (the sequencers' register ALU)."""

    OPCODE: ClassVar[str] = "RegisterAlu"

    dst: int
    op: str
    a: int | str
    b: int | str

    def registers_read(self):
        return _registers_in(self.a, self.b)

    def check(self, core) -> None:
        if self.op not in _REGISTER_ALU:
            self.fail(InvalidArgumentError(f"{self.name}: register ALU op {self.op!r} is not one of "
                                           f"{', '.join(REGISTER_OPS)}"))

    def run(self, registers, state, now_ns):
        unknown = [int(o[1:]) for o in (self.a, self.b)
                   if isinstance(o, str) and registers.values.get(int(o[1:])) is None
                   and int(o[1:]) in registers.values]
        if unknown:
            registers.set(self.dst, None, now_ns, registers.origin.get(unknown[0]))
            return None
        a, b = _value(self.a, registers, self), _value(self.b, registers, self)
        registers.set(self.dst, _REGISTER_ALU[self.op](a, b), now_ns)
        return None


@dataclass(frozen=True, kw_only=True)
class RegisterLoad(Control):
    """dst = the one 32-bit-or-narrower value at `src` (HBM or SBUF), as an integer."""

    OPCODE: ClassVar[str] = "RegisterLoad"

    dst: int
    src: AccessPattern

    def reads(self):
        return (self.src,)

    def cost(self, core) -> Cost:
        return _memory_access_cost(core)

    def run(self, registers, state, now_ns):
        if state is None:
            registers.set(self.dst, None, now_ns, self.source or self.name)
            return None
        raw = np.asarray(state.read(self.src)).reshape(-1)[0]
        if self.src.dtype.is_float:
            raw = np.asarray(state.read_compute(self.src)).reshape(-1)[0]
            if not np.isfinite(raw):
                self.fail(InvalidArgumentError(f"{self.name}: the value at {self.src.describe()} is "
                                               f"{raw} (never written?); a register needs an integer"))
        registers.set(self.dst, int(raw), now_ns)
        return None


@dataclass(frozen=True, kw_only=True)
class RegisterStore(Control):
    """dst (one element in HBM or SBUF) = the register's value, cast to dst's dtype."""

    OPCODE: ClassVar[str] = "RegisterStore"

    dst: AccessPattern
    src: int

    def writes(self):
        return (self.dst,)

    def registers_read(self):
        return (self.src,)

    def cost(self, core) -> Cost:
        return _memory_access_cost(core)

    def run(self, registers, state, now_ns):
        if state is not None:
            value = registers.get(self.src, self)
            state.write(self.dst, np.full(self.dst.shape, value, dtype=np.float64))
        return None


@dataclass(frozen=True, kw_only=True)
class Branch(Control):
    """Continue at `target` if ``cmp(a, b)`` holds, else at the next instruction."""

    OPCODE: ClassVar[str] = "Branch"

    a: int | str
    cmp: str
    b: int | str
    target: int

    def registers_read(self):
        return _registers_in(self.a, self.b)

    def check(self, core) -> None:
        if self.cmp not in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal"):
            self.fail(InvalidArgumentError(f"{self.name}: branch comparison {self.cmp!r}"))

    def run(self, registers, state, now_ns):
        taken = _REGISTER_ALU[self.cmp](_value(self.a, registers, self), _value(self.b, registers, self))
        return self.target if taken else None


@dataclass(frozen=True, kw_only=True)
class Jump(Control):
    """Continue at `target`."""

    OPCODE: ClassVar[str] = "Jump"

    target: int

    def run(self, registers, state, now_ns):
        return self.target


@dataclass(frozen=True)
class RegisterOffset:
    """Operand `field` of an instruction moves by register * `step_bytes` bytes (HBM: within
    the tensor; SBUF/PSUM: within each partition)."""

    field: str
    register: int
    step_bytes: int


@dataclass(frozen=True, kw_only=True)
class RegisterAddressed(Instruction):
    """An instruction whose operands are addressed through registers (``.ap(scalar_offset=r)``).

    Its static form (`inner`, offsets at register value 0) is what checks and the profile's
    static listing see; at run time `resolve` builds the concrete instruction for the current
    register values. With `skip_out_of_bounds` (``oob_mode.skip``) a concrete access outside its
    tensor or partition is skipped instead of raising.
    """

    KIND: ClassVar[str] = "dynamic"
    OPCODE: ClassVar[str] = "RegisterAddressed"
    ENGINES: ClassVar[tuple[Engine, ...]] = tuple(Engine)

    inner: Instruction
    offsets: tuple[RegisterOffset, ...]
    skip_out_of_bounds: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "engine", self.inner.engine)

    @property
    def name(self) -> str:
        return self.inner.name

    def reads(self):
        return self.inner.reads()

    def writes(self):
        return self.inner.writes()

    def registers_read(self) -> tuple[int, ...]:
        return tuple(o.register for o in self.offsets)

    def check(self, core) -> None:
        self.inner.check(core)

    def cost(self, core) -> Cost:
        return self.inner.cost(core)

    def flops(self) -> int:
        return self.inner.flops()

    def execute(self, state: ExecutionState) -> None:
        raise InvalidArgumentError(f"{self.name}: resolve register offsets before executing")

    def resolve(self, registers: RegisterFile) -> Instruction:
        changes = {}
        for offset in self.offsets:
            base = changes.get(offset.field, getattr(self.inner, offset.field))
            value = registers.get(offset.register, self)
            changes[offset.field] = dataclasses.replace(base, offset=base.offset
                                                        + value * offset.step_bytes)
        return dataclasses.replace(self.inner, **changes)
