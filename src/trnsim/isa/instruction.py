"""The instruction contract every opcode follows, and the helpers opcodes share.

An instruction is a frozen dataclass declared once, with four things side by side:
- ``reads()`` / ``writes()``: its operands as access patterns (the simulator derives dependencies);
- ``check(core)``: legality on a NeuronCore version, raising TrnsimErrors that name the limit;
- ``execute(state)``: its semantics in numpy against an `ExecutionState` (the living definition);
- ``cost(core)``: a `Cost` in nanoseconds computed from cycles and the engine's clock.

Timing model of an engine instruction (hardware.md section 6): the engine is busy for the issue
interval (`Cost.busy_ns`, e.g. max(MIN_II, N) cycles), and the result is visible to dependent
instructions `Cost.latency_ns` after the start (busy + the fixed per-instruction overhead and the
SBUF/PSUM access set-up). Independent instructions therefore stream at the issue interval, while a
read-after-write chain pays the full latency each step.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, ClassVar, Protocol

import numpy as np

from trnsim.errors import InvalidArgumentError, LimitExceededError, TrnsimError, UnsupportedError
from trnsim.isa.access import HBM, MAX_FREE_DIMS, MAX_FREE_SIZE, SBUF, AccessPattern, Memory
from trnsim.numerics import check_supported

if TYPE_CHECKING:
    from trnsim.hardware import CoreSpec, EngineSpec


class Engine(str, Enum):
    TENSOR = "tensor"
    VECTOR = "vector"
    SCALAR = "scalar"
    GPSIMD = "gpsimd"
    SYNC = "sync"
    DMA = "dma"

    def __str__(self) -> str:
        return self.value


_DMA, _GPSIMD = Engine.DMA, Engine.GPSIMD  # (module globals for `check`: see `isa.access.HBM`)

# Which memories each engine may read and write (hardware.md section 1: TensorE reads SBUF and
# writes PSUM only; GpSimd is wired to SBUF; DMA moves between HBM and SBUF).
ENGINE_MEMORIES: dict[Engine, tuple[frozenset[Memory], frozenset[Memory]]] = {
    Engine.TENSOR: (frozenset({Memory.SBUF}), frozenset({Memory.PSUM})),
    Engine.VECTOR: (frozenset({Memory.SBUF, Memory.PSUM}), frozenset({Memory.SBUF, Memory.PSUM})),
    Engine.SCALAR: (frozenset({Memory.SBUF, Memory.PSUM}), frozenset({Memory.SBUF, Memory.PSUM})),
    Engine.GPSIMD: (frozenset({Memory.SBUF}), frozenset({Memory.SBUF})),
    Engine.DMA: (frozenset({Memory.HBM, Memory.SBUF}), frozenset({Memory.HBM, Memory.SBUF})),
    Engine.SYNC: (frozenset(), frozenset()),
}


@dataclass(frozen=True)
class Cost:
    busy_ns: float  # the engine (or DMA queue) is occupied this long
    latency_ns: float  # results visible to dependents this long after the start (>= busy_ns)


class ExecutionState(Protocol):
    """What an instruction's semantics may touch. Implemented by `trnsim.sim`."""

    core: CoreSpec

    def read(self, ap: AccessPattern) -> np.ndarray:
        """Stored values, dtype ap.dtype.np_dtype, shape ap.shape. Treat as read-only."""

    def read_compute(self, ap: AccessPattern) -> np.ndarray:
        """Values in the engines' compute format (float32; see trnsim.numerics.to_compute)."""

    def write(self, ap: AccessPattern, values: np.ndarray) -> None:
        """Store values (broadcastable to ap.shape), cast to ap.dtype with the process rounding."""

    def accumulate(self, ap: AccessPattern, values: np.ndarray) -> None:
        """PSUM near-memory read-add-write in fp32."""

    def fp32_out(self, ap: AccessPattern, shape: tuple[int, ...]) -> np.ndarray | None:
        """A writable float32 view of ap's storage as `shape` to compute into (``out=``), or None
        (then compute and `write`): only where storing float32 values would not change them."""

    def engine_state(self, engine: Engine) -> dict:
        """Per-engine scratch state (TensorE's loaded stationary tile, RNG state, ...)."""

    def random_uniform(self, shape: tuple[int, ...]) -> np.ndarray:
        """Float32 uniform [0, 1) from the core's seeded counter-based generator."""


@functools.cache
def field_names(cls: type) -> tuple[str, ...]:
    """An instruction class's dataclass fields, once per class: compilers walk the operands of
    millions of instructions and `dataclasses.fields` costs more than the walk."""
    return tuple(f.name for f in dataclasses.fields(cls))


# Declared field types that never hold an access pattern (`operand_fields` skips them).
_SCALAR_FIELD_TYPES = frozenset({"str", "str | None", "int", "int | None", "float", "bool", "int | str",
                                 "Engine", "Engine | None"})


@functools.cache
def operand_fields(cls: type) -> tuple[str, ...]:
    """The fields of an instruction class that may hold access patterns (alone or in tuples):
    all but those declared as scalars, so a walk over a program's operands (lowering, liveness)
    looks at a third of the fields."""
    return tuple(f.name for f in dataclasses.fields(cls) if str(f.type) not in _SCALAR_FIELD_TYPES)


def cycles_to_ns(cycles: float, clock_hz: float) -> float:
    return cycles * 1e9 / clock_hz


# (operand, engine, written) -> the core whose operand checks it last passed: an operand's check
# is a function of these alone (the instruction's name only words its errors), and a kernel's
# trace names the same operand with the same engine many times (`Instruction.check`)
_PASSED: dict[tuple[AccessPattern, Engine, bool], CoreSpec] = {}
# the same, by the operand's identity first ((id, engine, written) -> (operand, core)): a trace
# hands the same operand object to instruction after instruction (`isa.access.interned`), and
# this lookup hashes and compares nothing in Python (the entry holds the operand, so its id
# stays its own while the entry lives)
_PASSED_BY_ID: dict[tuple[int, Engine, bool], tuple[AccessPattern, CoreSpec]] = {}
_PASSED_LIMIT = 1 << 16  # forgotten past this many: a bound on memory, not on correctness


def _has_passed(ap: AccessPattern, engine: Engine, written: bool, core: CoreSpec) -> bool:
    """Whether this operand's check passed on `core` with this engine and role (`_passed`)."""
    entry = _PASSED_BY_ID.get((id(ap), engine, written))
    if entry is not None and entry[0] is ap and entry[1] is core:
        return True
    if _PASSED.get((ap, engine, written)) is not core:
        return False
    _PASSED_BY_ID[(id(ap), engine, written)] = (ap, core)
    return True


def _passed(ap: AccessPattern, engine: Engine, written: bool, core: CoreSpec) -> None:
    if len(_PASSED) >= _PASSED_LIMIT or len(_PASSED_BY_ID) >= _PASSED_LIMIT:
        _PASSED.clear()
        _PASSED_BY_ID.clear()
    _PASSED[(ap, engine, written)] = core
    _PASSED_BY_ID[(id(ap), engine, written)] = (ap, core)


# Every opcode, by name: a class that declares OPCODE registers itself when it is defined, so
# an instruction is added by writing its class in one module (imported by `trnsim.isa`).
OPCODES: dict[str, type[Instruction]] = {}


@dataclass(frozen=True, kw_only=True)
class Instruction:
    """Base of every opcode. Subclasses set OPCODE and ENGINES (the first is the default)."""

    OPCODE: ClassVar[str] = ""
    ENGINES: ClassVar[tuple[Engine, ...]] = ()

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("OPCODE"):
            OPCODES[cls.OPCODE] = cls

    engine: Engine | None = None
    source: str | None = None  # the user's file:line, attached by front ends
    label: str = ""  # the API call that produced it (e.g. "nisa.nc_matmul"), for errors and profiles

    def __post_init__(self) -> None:
        if self.engine is None:
            object.__setattr__(self, "engine", self.ENGINES[0])
        elif not isinstance(self.engine, Engine):
            object.__setattr__(self, "engine", Engine(str(getattr(self.engine, "value", self.engine))))

    # --- the four declarations -----------------------------------------------------------------
    def reads(self) -> tuple[AccessPattern, ...]:
        return ()

    def writes(self) -> tuple[AccessPattern, ...]:
        return ()

    def execute(self, state: ExecutionState) -> None:
        raise NotImplementedError(self.OPCODE)

    def cost(self, core: CoreSpec) -> Cost:
        raise NotImplementedError(self.OPCODE)

    def check(self, core: CoreSpec) -> None:
        """Generic legality: engine choice, memories, partitions, free dims, dtypes."""
        if self.engine not in self.ENGINES:
            allowed = ", ".join(str(e) for e in self.ENGINES)
            self.fail(InvalidArgumentError(f"{self.name}: engine {self.engine} cannot run this "
                                           f"instruction (allowed: {allowed})"))
        if self.engine is _GPSIMD and core.gpsimd is None:
            self.fail(UnsupportedError(f"{self.name}: {core.name} has no GpSimd engine"))
        engine = self.engine
        by_id = _PASSED_BY_ID  # (`_has_passed`'s first lookup, inline: most operands passed)
        for written, aps in ((False, self.reads()), (True, self.writes())):
            for ap in aps:
                entry = by_id.get((id(ap), engine, written))
                if entry is not None and entry[0] is ap and entry[1] is core:
                    continue
                if not _has_passed(ap, engine, written, core):
                    memories = ENGINE_MEMORIES[engine][written]
                    self._check_operand(core, ap, memories, "write" if written else "read")
                    _passed(ap, engine, written, core)

    def flops(self) -> int:
        """Useful floating-point operations (TensorE: 2*M*N*K), for utilisation reports."""
        return 0

    # --- helpers -------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.label or self.OPCODE

    def fail(self, error: TrnsimError):
        raise error.at(self.source)

    def limit(self, what: str, value, limit, core: CoreSpec) -> None:
        """Raise a LimitExceededError if value > limit."""
        if value > limit:
            self.fail(LimitExceededError(f"{self.name}: {what}", value, limit, context=core.name))

    def _check_operand(self, core: CoreSpec, ap: AccessPattern, allowed: frozenset[Memory],
                       mode: str) -> None:
        if ap.memory not in allowed:
            names = ", ".join(sorted(m.value for m in allowed)) or "nothing"
            self.fail(InvalidArgumentError(
                f"{self.name}: the {self.engine} engine cannot {mode} {ap.memory} "
                f"(operand {ap.describe()}; it can {mode} {names})"))
        if not core.supports(getattr(ap.dtype, "name", "")):  # the common case, tested inline
            try:
                check_supported(ap.dtype, core, what=self.name)
            except TrnsimError as error:
                self.fail(error)
        if len(ap.dims) > MAX_FREE_DIMS:
            self.limit("free dimensions of an access pattern", len(ap.dims), MAX_FREE_DIMS, core)
        for _, size in ap.dims:
            if size > MAX_FREE_SIZE:
                self.limit("free dimension size", size, MAX_FREE_SIZE, core)
        if ap.memory is HBM:
            return
        if ap.partitions > core.partitions:
            self.limit("partition count", ap.partitions, core.partitions, core)
        p0, p1 = ap.partition_range()
        if p1 > core.partitions:
            self.limit("partition end", p1, core.partitions, core)
        if p0 < 0:
            self.fail(InvalidArgumentError(f"{self.name}: negative start partition {p0}"))
        if self.engine is not _DMA:
            self._check_start_partition(ap, core)
        capacity = (core.sbuf_bytes_per_partition if ap.memory is SBUF
                    else core.psum_bytes_per_partition)
        low, high = ap.byte_span()
        if low < 0 or high > capacity:
            self.fail(LimitExceededError(f"{self.name}: {ap.memory} byte range [{low}, {high}) of "
                                         f"{ap.describe()} end", high, capacity,
                                         context=f"{core.name} {ap.memory} bytes per partition"))

    def _check_start_partition(self, ap: AccessPattern, core: CoreSpec) -> None:
        """Compute engines start at quadrant boundaries (hardware.md: start-partition rules)."""
        count, start = ap.partitions, ap.partition_start
        allowed = (0,) if count > 64 else (0, 64) if count > 32 else (0, 32, 64, 96)
        if start not in allowed:
            self.fail(InvalidArgumentError(
                f"{self.name}: start partition {start} is not allowed for an access of {count} "
                f"partitions on {core.name} (allowed starts: {', '.join(map(str, allowed))})"))


def built(cls: type[Instruction], source: str | None, label: str, fields: dict) -> Instruction:
    """``cls(source=source, label=label, **fields)``, without the frozen dataclass's generated
    ``__init__`` (one ``object.__setattr__`` per field: as long as the rest of tracing an
    instruction) for a class that adds no ``__post_init__``: the instance dict filled in field
    order, the engine normalised as `Instruction.__post_init__` does. Anything else (another
    ``__post_init__``, an unknown, repeated or missing field) is left to the class, which raises
    as it would."""
    plan = _plain_fields(cls)
    if plan is None or not plan[1] <= fields.keys() or "source" in fields or "label" in fields:
        return cls(source=source, label=label, **fields)
    new = object.__new__(cls)
    values = new.__dict__
    values.update(plan[0])  # every field in order (a required one's placeholder overwritten)
    values["source"], values["label"] = source, label
    values.update(fields)
    if len(values) != len(plan[0]):  # a field the class does not have
        return cls(source=source, label=label, **fields)
    engine = values["engine"]
    if engine is None:
        values["engine"] = cls.ENGINES[0]
    elif not isinstance(engine, Engine):
        values["engine"] = Engine(str(getattr(engine, "value", engine)))
    return new


@functools.cache
def _plain_fields(cls: type) -> tuple[dict, frozenset[str]] | None:
    """({field: default, or None where required}, required names) of an instruction class
    `built` may fill in directly; None if it may not (its own ``__post_init__``, a field
    outside ``__init__`` or with a default factory)."""
    if cls.__post_init__ is not Instruction.__post_init__:
        return None
    order, required = {}, set()
    for f in dataclasses.fields(cls):
        if not f.init or f.default_factory is not dataclasses.MISSING:
            return None
        if f.default is dataclasses.MISSING:
            required.add(f.name)
        order[f.name] = None if f.default is dataclasses.MISSING else f.default
    return order, frozenset(required)


def engine_spec(core: CoreSpec, engine: Engine) -> EngineSpec:
    spec = {Engine.VECTOR: core.vector, Engine.SCALAR: core.scalar, Engine.GPSIMD: core.gpsimd}[engine]
    if spec is None:
        raise UnsupportedError(f"{core.name} has no {engine} engine")
    return spec


def streaming_cost(core: CoreSpec, engine: Engine, n: int, *, factor: float = 1.0,
                   extra_cycles: float = 0.0, min_ii_cycles: float | None = None,
                   speedup: float = 1.0, strided: bool = False, accesses: int = 2) -> Cost:
    """The Vector/Scalar/GpSimd cost formula (hardware.md section 6), in one place.

    busy = max(MIN_II, factor * N / (rate * speedup) [x2 if strided]) + extra cycles;
    latency = busy + static overhead + the part of the access set-ups (per SBUF/PSUM operand)
    longer than busy.

    The latency is what a dependent instruction waits for. The arch guide adds "a static
    instruction overhead of 100 engine cycles" to a VectorE instruction whose predecessor
    produced its input, and says engines "typically hide some of" the ~60-cycle access set-up
    "through instruction level parallelism" (nki/guides/architecture/trainium_inferentia2_arch.rst):
    the set-ups overlap the streaming, so they show only in short instructions. Checks: a long
    dependent VectorE chain pays ~100 cycles an instruction (the fused Mamba tutorial's
    ``mamba_v2``: ~3.5k VectorE cycles per 3.1k of streaming over four dependent instructions);
    dependent one-element ScalarE activations issue every 64 + 100 + 56 = 220 cycles (measured:
    264, nki/deep-dives/nki_perf_guide.rst).
    """
    spec = engine_spec(core, engine)
    costs = core.costs
    stream = factor * n / (spec.elements_per_lane_per_cycle * speedup)
    if strided:
        stream *= costs.strided_rate_divisor
    floor = costs.min_ii_cycles if min_ii_cycles is None else min_ii_cycles
    busy = max(floor, stream) + extra_cycles
    exposed_setup = max(0.0, costs.access_setup_cycles * accesses - busy)
    latency = busy + costs.static_overhead_cycles + exposed_setup
    return Cost(cycles_to_ns(busy, spec.clock_hz), cycles_to_ns(latency, spec.clock_hz))


def is_strided(core: CoreSpec, *aps: AccessPattern) -> bool:
    """An innermost stride over 16 B halves the SBUF/PSUM streaming rate."""
    return any(ap.innermost_stride_bytes > core.costs.strided_threshold_bytes for ap in aps
               if ap.on_chip)


@dataclass(frozen=True, kw_only=True)
class SrcToDst(Instruction):
    """An instruction that reads one tile (`src`) and writes one (`dst`)."""

    dst: AccessPattern
    src: AccessPattern

    def reads(self) -> tuple[AccessPattern, ...]:
        return (self.src,)

    def writes(self) -> tuple[AccessPattern, ...]:
        return (self.dst,)
