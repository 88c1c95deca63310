"""Programs: an ordered instruction list plus the HBM tensors it touches, and a small builder.

The builder is how tests and the compiler write programs without the NKI front end: declare HBM
tensors, allocate SBUF/PSUM tiles (with capacity checks), emit instructions, `build()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

import numpy as np

from trnsim.errors import InvalidArgumentError, LimitExceededError, TrnsimError
from trnsim.isa.access import AccessPattern, Memory, row_major_dims
from trnsim.isa.instruction import Instruction
from trnsim.numerics import DType
from trnsim.numerics import dtype as as_dtype

TENSOR_KINDS = ("input", "output", "internal", "constant")


@dataclass
class TensorDecl:
    """A named HBM tensor: a kernel argument, an output, scratch, or a constant with data."""

    name: str
    shape: tuple[int, ...]
    dtype: DType
    kind: str = "internal"
    data: np.ndarray | None = None  # or a zero-argument callable returning it (computed lazily)
    # An internal tensor the compiler keeps in SBUF between the kernels that write and read it
    # (`trnsim.compiler.lowering.onchip`): DMAs touching it move no HBM bytes (`trnsim.sim.dma`).
    on_chip: bool = False
    # Under LNC=2 a core keeps only its share of such a tensor, laid out from partition 0 at this
    # byte of the tensor (the first it touches).
    on_chip_from: int = 0

    def values(self) -> np.ndarray | None:
        return self.data() if callable(self.data) else self.data

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * self.dtype.itemsize

    @property
    def strides(self) -> tuple[int, ...]:
        """Row-major strides in elements."""
        out, step = [], 1
        for size in reversed(self.shape):
            out.append(step)
            step *= size
        return tuple(reversed(out))

    def block(self, starts: tuple[int, ...] | None = None,
              sizes: tuple[int, ...] | None = None) -> AccessPattern:
        """A rectangular block; dim 0 becomes the partition axis (an HBM stride)."""
        starts = tuple(starts or (0,) * len(self.shape))
        sizes = tuple(sizes or tuple(s - b for s, b in zip(self.shape, starts, strict=True)))
        if len(starts) != len(self.shape) or len(sizes) != len(self.shape):
            raise InvalidArgumentError(f"block of {self.name}{list(self.shape)} needs "
                                       f"{len(self.shape)} starts and sizes")
        for axis, (b, n, s) in enumerate(zip(starts, sizes, self.shape, strict=True)):
            if b < 0 or n < 0 or b + n > s:
                raise LimitExceededError(f"index range [{b}, {b + n}) on axis {axis} of HBM tensor "
                                         f"{self.name!r}: end", b + n, s)
        strides = self.strides if self.shape else (1,)
        offset = sum(b * st for b, st in zip(starts, strides, strict=False))
        if not self.shape:
            return AccessPattern(memory=Memory.HBM, dtype=self.dtype, partitions=1, dims=((1, 1),),
                                 tensor=self.name)
        dims = tuple((st, n) for st, n in zip(strides[1:], sizes[1:], strict=True)) or ((1, 1),)
        return AccessPattern(memory=Memory.HBM, dtype=self.dtype, partitions=sizes[0], dims=dims,
                             offset=offset * self.dtype.itemsize, partition_step=strides[0],
                             tensor=self.name)


class Repeats:
    """Where a program repeats itself: spans whose instructions equal an earlier span's, field
    for field (``source`` and ``label`` aside), except at a few known offsets.

    The lowering records one span per replayed kernel call (`trnsim.compiler.lowering.replay`):
    ``(start, length, source, varying)`` says instructions ``start + o`` equal ``source + o`` for
    every ``o`` in ``range(length)`` but those in ``varying`` (ascending: the call's HBM-touching offsets,
    whose tensors a replay renames), and that they all have one ``label`` (the call's). The
    planner then copies those plans instead of looking each instruction up
    (`trnsim.sim.plan.Planner.plan_program`); a report takes a span's label once
    (`trnsim.runtime.report.kernel_times`).

    The record describes one instruction list, held here: `describes` is false for any other
    list (a program copied with new instructions) or a list whose length changed. Code that
    replaces an instruction in place must keep the record true (renaming HBM operands does:
    only ``varying`` offsets touch HBM) or set ``program.repeats = None``."""

    __slots__ = ("instructions", "length", "spans")

    def __init__(self, instructions: list, spans: list[tuple[int, int, int, tuple[int, ...]]]
                 ) -> None:
        spans = sorted(spans)
        end = 0
        for start, length, source, varying in spans:
            if not (source >= 0 and source + length <= start and end <= start
                    and start + length <= len(instructions)
                    and (not varying or (varying[0] >= 0 and varying[-1] < length))):
                raise InvalidArgumentError(f"repeat span (start {start}, length {length}, "
                                           f"source {source}) does not fit its program's "
                                           f"{len(instructions)} instructions in order")
            end = start + length
        self.instructions = instructions
        self.length = len(instructions)
        self.spans = spans

    def describes(self, program: Program) -> bool:
        return program.instructions is self.instructions and len(self.instructions) == self.length


@dataclass
class Program:
    name: str
    target: object  # trnsim.hardware.CoreSpec (kept untyped to avoid an import cycle in docs)
    tensors: dict[str, TensorDecl] = field(default_factory=dict)
    instructions: list[Instruction] = field(default_factory=list)
    sbuf_peak_bytes_per_partition: int = 0  # as allocated by the front end
    psum_peak_bytes_per_partition: int = 0
    metadata: dict = field(default_factory=dict)
    # True when every instruction already passed check(target) as it was emitted (NKI traces
    # check at emission, pointing at the user's line); the simulator then does not check again.
    # The compiler's lowering does not check at emission: its programs are checked when planned.
    # HBM bounds are still checked when the program runs.
    checked: bool = False
    # Spans of instructions equal to earlier ones (`Repeats`), recorded by the compiler's
    # lowering for the planner; None when unknown (programs written otherwise, loaded from an
    # artifact, or rewritten by code that could not keep the record true).
    repeats: Repeats | None = field(default=None, compare=False, repr=False)

    @property
    def inputs(self) -> list[TensorDecl]:
        return [t for t in self.tensors.values() if t.kind == "input"]

    @property
    def outputs(self) -> list[TensorDecl]:
        return [t for t in self.tensors.values() if t.kind == "output"]

    def verify(self) -> None:
        """Legality of every instruction on the target, and HBM operands inside their tensors."""
        for instruction in self.instructions:
            instruction.check(self.target)
            for ap in (*instruction.reads(), *instruction.writes()):
                if ap.memory is Memory.HBM:
                    self._check_hbm(instruction, ap)

    def _check_hbm(self, instruction: Instruction, ap: AccessPattern) -> None:
        decl = self.tensors.get(ap.tensor)
        if decl is None:
            instruction.fail(InvalidArgumentError(f"{instruction.name}: unknown HBM tensor "
                                                  f"{ap.tensor!r}"))
        low, high = ap.byte_span()
        if low < 0 or high > decl.nbytes:
            instruction.fail(LimitExceededError(f"{instruction.name}: access {ap.describe()} "
                                                f"reaches byte", high, decl.nbytes,
                                                context=f"HBM tensor {decl.name} size"))

    def pretty(self) -> str:
        lines = [f"program {self.name} on {getattr(self.target, 'name', self.target)}"]
        for t in self.tensors.values():
            lines.append(f"  {t.kind:8s} {t.name}: {t.dtype.name}{list(t.shape)}")
        for i, ins in enumerate(self.instructions):
            operands = ", ".join(ap.describe() for ap in ins.writes())
            operands += " <- " + ", ".join(ap.describe() for ap in ins.reads())
            lines.append(f"  {i:5d} [{ins.engine}] {ins.name}: {operands}")
        return "\n".join(lines)


class OnChipAllocator:
    """First-fit allocation of byte ranges within every partition of SBUF or PSUM."""

    def __init__(self, memory: Memory, capacity_bytes: int, *, reserved_bytes: int = 0,
                 core_name: str = "") -> None:
        self.memory = memory
        self.capacity = capacity_bytes
        self.reserved = reserved_bytes
        self.core_name = core_name
        self._live: dict[int, tuple[int, str]] = {}  # offset -> (size, name)
        self.peak = 0

    @property
    def used(self) -> int:
        return max((o + s for o, (s, _) in self._live.items()), default=0)

    def allocate(self, nbytes: int, *, align: int = 4, name: str = "", offset: int | None = None) -> int:
        """Bytes per partition; returns the offset. `offset` forces a placement (manual allocation)."""
        limit = self.capacity - self.reserved
        if offset is None:
            offset = self._first_fit(nbytes, align, limit)
        elif offset % align:
            raise InvalidArgumentError(f"{self.memory} allocation {name!r} at offset {offset} is not "
                                       f"aligned to {align} bytes")
        if offset + nbytes > limit:
            live = sum(s for s, _ in self._live.values())
            raise LimitExceededError(
                f"{self.memory} allocation of {nbytes} bytes per partition for {name or 'a tile'!r} "
                f"({live} bytes live): end", offset + nbytes, limit,
                context=f"{self.core_name} {self.memory} bytes per partition"
                        + (f", {self.reserved} reserved" if self.reserved else ""))
        self._live[offset] = (nbytes, name)
        self.peak = max(self.peak, offset + nbytes)
        return offset

    def free(self, offset: int) -> None:
        self._live.pop(offset, None)

    def _first_fit(self, nbytes: int, align: int, limit: int) -> int:
        cursor = 0
        for start, (size, _) in sorted(self._live.items()):
            cursor = -(-cursor // align) * align
            if cursor + nbytes <= start:
                return cursor
            cursor = max(cursor, start + size)
        return -(-cursor // align) * align


class ProgramBuilder:
    """Write programs directly: tensors, tiles, instructions."""

    def __init__(self, name: str, target) -> None:
        from trnsim import hardware

        self.core = target if not isinstance(target, (str, int)) else hardware.core(target)
        self.program = Program(name=name, target=self.core)
        self.sbuf = OnChipAllocator(Memory.SBUF, self.core.sbuf_bytes_per_partition,
                                    reserved_bytes=self.core.sbuf_reserved_bytes_per_partition,
                                    core_name=self.core.name)
        self.psum = OnChipAllocator(Memory.PSUM, self.core.psum_bytes_per_partition,
                                    core_name=self.core.name)

    def tensor(self, name: str, shape: tuple[int, ...], dtype, kind: str = "internal",
               data: np.ndarray | None = None) -> TensorDecl:
        if kind not in TENSOR_KINDS:
            raise InvalidArgumentError(f"tensor kind {kind!r} is not one of {TENSOR_KINDS}")
        if name in self.program.tensors:
            raise InvalidArgumentError(f"HBM tensor {name!r} is declared twice")
        decl = TensorDecl(name, tuple(int(s) for s in shape), as_dtype(dtype), kind, data)
        self.program.tensors[name] = decl
        return decl

    def input(self, name: str, shape: tuple[int, ...], dtype) -> TensorDecl:
        return self.tensor(name, shape, dtype, "input")

    def output(self, name: str, shape: tuple[int, ...], dtype) -> TensorDecl:
        return self.tensor(name, shape, dtype, "output")

    def tile(self, shape: tuple[int, ...], dtype, *, memory: Memory = Memory.SBUF, name: str = "",
             offset: int | None = None) -> AccessPattern:
        """Allocate a dense tile: shape[0] partitions x the rest row-major in each partition."""
        dt = as_dtype(dtype)
        partitions, *free = shape
        free_bytes = prod(free) * dt.itemsize if free else dt.itemsize
        if memory is Memory.PSUM:
            bank = self.core.psum_bank_bytes_per_partition
            align = bank if free_bytes >= bank else max(4, dt.itemsize)
            off = self.psum.allocate(free_bytes, align=align, name=name, offset=offset)
        else:
            off = self.sbuf.allocate(free_bytes, align=max(4, dt.itemsize), name=name, offset=offset)
        self._sync_peaks()
        if partitions > self.core.partitions:
            raise LimitExceededError(f"tile {name!r} partition count", partitions,
                                     self.core.partitions, context=self.core.name)
        return AccessPattern(memory=memory, dtype=dt, partitions=partitions,
                             dims=row_major_dims(tuple(free) or (1,)), offset=off, tensor=name)

    def free(self, ap: AccessPattern) -> None:
        (self.psum if ap.memory is Memory.PSUM else self.sbuf).free(ap.offset)

    def emit(self, *instructions: Instruction) -> None:
        self.program.instructions.extend(instructions)

    def build(self, *, verify: bool = True) -> Program:
        if verify:
            try:
                self.program.verify()
            except TrnsimError:
                raise
        return self.program

    def _sync_peaks(self) -> None:
        self.program.sbuf_peak_bytes_per_partition = self.sbuf.peak
        self.program.psum_peak_bytes_per_partition = self.psum.peak
