"""`CurrentTrace`: the tracing machine (`trnsim.nki.trace.Trace`) with what nki 0.3+ adds.

- tensors are `NkiTensor`s, dtypes are names (strings);
- registers: numbered virtual registers for register_alloc, loops and rank ids;
- register-addressed operands: an access pattern built from a view with a scalar offset is bound
  to its register, and the instruction that uses it is emitted as a `RegisterAddressed`;
- PSUM accumulation groups, for ``nc_matmul(accumulate=None)``: "first write overwrites,
  subsequent writes accumulate". A matmul into PSUM bytes that an earlier matmul wrote, with
  no other instruction touching them since, accumulates; any other access ends the group;
- kernel inputs are writable (the caller's arrays are updated, as ``nki.simulate`` does).
"""

from __future__ import annotations

import itertools

from trnsim.isa import (
    AccessPattern,
    Instruction,
    Memory,
    MultiplyMoving,
    MultiplyMovingMx,
    RegisterAddressed,
    RegisterOffset,
)
from trnsim.nki import legalise
from trnsim.nki.current.tensor import NkiTensor
from trnsim.nki.trace import Trace


def _span(ap: AccessPattern) -> tuple[int, int, int, int]:
    p0, p1 = ap.partition_range()
    lo, hi = ap.byte_span()
    return p0, p1, lo, hi


def _overlap(a: tuple, b: tuple) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


class CurrentTrace(Trace):
    def __init__(self, name: str, core, *, program_id: int = 0, grid: tuple[int, ...] = (),
                 rank: int = 0, ranks: int = 1) -> None:
        super().__init__(name, core, dtype_style="current", tile_class=NkiTensor)
        self.program_ids = (program_id,) if grid else ()
        self.grid = grid
        self.rank, self.ranks = rank, ranks
        self._register_ids = itertools.count()
        self._register_offsets: dict[AccessPattern, tuple[int, int, bool]] = {}
        self._accumulating: list[tuple[int, int, int, int]] = []
        self.no_reorder_depth = 0
        self.allow_vector_offset = False  # set while nisa.dma_copy lowers a gather/scatter
        self.stampable = False  # registers and accumulation groups: not replayed by stamping

    # --- registers ------------------------------------------------------------------------------
    def new_register(self) -> int:
        return next(self._register_ids)

    def bind_register_offset(self, ap: AccessPattern, register: int, step_bytes: int,
                             skip: bool) -> None:
        """`ap` (just built from a register-addressed view) moves by register * step_bytes."""
        self._register_offsets[ap] = (register, step_bytes, skip)

    # --- emission ----------------------------------------------------------------------------------
    def emit_now(self, cls: type[Instruction], **fields) -> Instruction:
        offsets = [RegisterOffset(name, *self._register_offsets[value][:2])
                   for name, value in fields.items()
                   if isinstance(value, AccessPattern) and value in self._register_offsets]
        skip = any(self._register_offsets[fields[o.field]][2] for o in offsets)
        self._register_offsets.clear()
        fields = legalise.stage_compiler_psum(self, cls, fields)
        instruction = cls(source=self.source, label=self.label or "", **fields)
        instruction.check(self.core)
        self.note_accesses(instruction)
        if offsets:
            instruction = RegisterAddressed(inner=instruction, offsets=tuple(offsets),
                                            skip_out_of_bounds=skip, source=self.source,
                                            label=self.label or "")
        self.builder.emit(instruction)
        self._track_accumulation(instruction)
        return instruction

    def _track_accumulation(self, instruction: Instruction) -> None:
        inner = instruction.inner if isinstance(instruction, RegisterAddressed) else instruction
        if isinstance(inner, (MultiplyMoving, MultiplyMovingMx)):
            span = _span(inner.dst)
            if not inner.accumulate:
                self._accumulating = [s for s in self._accumulating if not _overlap(s, span)]
            self._accumulating.append(span)
            return
        for ap in (*inner.reads(), *inner.writes()):
            if ap.memory is Memory.PSUM and self._accumulating:
                span = _span(ap)
                self._accumulating = [s for s in self._accumulating if not _overlap(s, span)]

    def psum_accumulating(self, ap: AccessPattern) -> bool:
        """Would a matmul into `ap` continue an open accumulation group?"""
        span = _span(ap)
        return any(_overlap(s, span) for s in self._accumulating)

    # --- inputs are writable in nki 0.3+ ------------------------------------------------------
    def _check_writable(self, dst) -> None:
        storage = dst._storage
        if storage is not None and storage.is_input:
            self.written_inputs.add(storage.name)
