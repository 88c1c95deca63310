"""Copies neuronx-cc inserts so an instruction's operands sit where its engine can reach them.

A kernel may hand GpSimd a PSUM tile ("gpsimd cannot read psum") or ask TensorE to write an SBUF
tile; the compiler does not refuse these but stages the operand: a VectorE copy of the PSUM tile
into SBUF before the instruction, or the result written to a PSUM (or SBUF) temporary and copied
to its destination after it. The copies are ordinary instructions, so they cost what they cost on
the simulated engines. An engine access starting at a partition its quadrant rules forbid is
staged through partition 0 by DMA (DMA queues have no start-partition rule). What no copy can
fix (a read-modify-write operand, an engine that can touch neither memory) stays an error from
the instruction's own check.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING

from trnsim.errors import TrnsimError
from trnsim.isa import (
    ENGINE_MEMORIES,
    AccessPattern,
    DmaCopy,
    Engine,
    Instruction,
    Memory,
    TensorCopy,
)
from trnsim.isa.access import HBM, SBUF, row_major_dims

if TYPE_CHECKING:
    from trnsim.nki.trace import Trace

# Engines able to copy between SBUF and PSUM in either direction, in the compiler's preference.
_COPY_ENGINE = Engine.VECTOR


def staged(trace: Trace, instruction: Instruction, fields: dict) -> list[Instruction] | None:
    """The instruction with its misplaced operands staged through copies (copies included, in
    order), or None when every operand is already where the engine can reach it."""
    engine = instruction.engine
    can_read, can_write = ENGINE_MEMORIES.get(engine, _NO_MEMORIES)
    if _reachable(instruction, engine, fields, can_read, can_write) and \
            _compiler_psum_to_stage(trace, instruction, fields) is None:
        return None
    reads, writes = instruction.reads(), instruction.writes()
    before, after, changes, temps = [], [], {}, []
    second_psum = _compiler_psum_to_stage(trace, instruction, fields)
    if second_psum is not None:  # both inputs in PSUM because the compiler put one there
        temp = _temporary(trace, fields[second_psum], Memory.SBUF)
        temps.append(temp)
        before.append(TensorCopy(dst=temp.ap, src=fields[second_psum], engine=_COPY_ENGINE))
        changes[second_psum] = temp.ap
    for name, ap in fields.items():
        if not isinstance(ap, AccessPattern) or ap.memory is Memory.HBM:
            continue
        if name in changes:
            continue
        read, written = ap in reads, ap in writes
        if read and written:
            continue  # read-modify-write: a copy would not be the same instruction
        if ap.memory is Memory.SBUF and engine is not Engine.DMA and (read or written) and \
                not _start_allowed(trace, instruction, ap):
            # engines start at quadrant boundaries; DMA has no such rule and moves the rows
            temp = _temporary(trace, ap, Memory.SBUF, from_partition_zero=True)
            temps.append(temp)
            changes[name] = temp.ap
            if read:
                before.append(DmaCopy(dst=temp.ap, src=ap))
            else:
                after.append(DmaCopy(dst=ap, src=temp.ap))
            continue
        allowed = can_read if read else can_write if written else None
        if allowed is None or ap.memory in allowed:
            continue
        other = next((m for m in (Memory.SBUF, Memory.PSUM) if m in allowed), None)
        if other is None:
            continue
        temp = _temporary(trace, ap, other)
        temps.append(temp)
        changes[name] = temp.ap
        if read:
            before.append(TensorCopy(dst=temp.ap, src=ap, engine=_COPY_ENGINE))
        else:
            after.append(TensorCopy(dst=ap, src=temp.ap, engine=_COPY_ENGINE))
    if not changes:
        return None
    label, source = instruction.label, instruction.source
    copies = [dataclasses.replace(c, label=f"{label} (staging copy)", source=source)
              for c in (*before, *after)]
    main = dataclasses.replace(instruction, **changes)
    for temp in temps:
        trace.release(temp.tile)
    return [*copies[:len(before)], main, *copies[len(before):]]


_NO_MEMORIES = (frozenset(), frozenset())
_DMA = Engine.DMA  # (a module global for `_reachable`: see `isa.access.HBM`)


def _reachable(instruction: Instruction, engine, fields: dict, can_read, can_write) -> bool:
    """Whether every operand of `fields` is surely where `staged` would leave it (the common case,
    decided without the staging machinery): in a memory the engine both reads and writes, or
    one its role allows, and starting at partition 0 (allowed for every access) where the
    start-partition rule applies. False: `staged` decides in full."""
    reads = writes = None
    for ap in fields.values():
        if type(ap) is not AccessPattern:
            if isinstance(ap, AccessPattern):
                return False  # (no subclass exists; decided in full if one ever does)
            continue
        memory = ap.memory
        if memory is HBM:
            continue
        if memory is SBUF and ap.partition_start != 0 and engine is not _DMA:
            return False
        if memory in can_read and memory in can_write:
            continue
        if reads is None:
            reads, writes = instruction.reads(), instruction.writes()
        read, written = ap in reads, ap in writes
        if read and written:
            continue
        allowed = can_read if read else can_write if written else None
        if allowed is not None and memory not in allowed:
            return False
    return True


def stage_compiler_psum(trace: Trace, cls: type[Instruction], fields: dict) -> dict:
    """`fields` with a compiler-placed PSUM input staged to SBUF by a VectorE copy (emitted now)
    where the instruction would otherwise read two PSUM inputs (see `_compiler_psum_to_stage`);
    the current API's trace, which places no other staging copies, calls this."""
    name = _compiler_psum_to_stage(trace, cls, fields)
    if name is None:
        return fields
    temp = _temporary(trace, fields[name], Memory.SBUF)
    copy = TensorCopy(dst=temp.ap, src=fields[name], engine=_COPY_ENGINE, source=trace.source,
                      label=f"{trace.label or cls.__name__} (staging copy)")
    copy.check(trace.core)
    trace.note_accesses(copy)
    trace.builder.emit(copy)
    trace.release(temp.tile)
    return {**fields, name: temp.ap}


def _compiler_psum_to_stage(trace: Trace, instruction, fields: dict) -> str | None:
    """The input field to copy to SBUF when an instruction that may read only one PSUM input
    would read two, one of them a PSUM tile the compiler (not the kernel) chose (a partition
    broadcast kept where TensorE wrote it); None otherwise (a kernel's own two PSUM inputs stay
    an error of the instruction's check)."""
    pair = _one_psum_input(instruction if isinstance(instruction, type) else type(instruction))
    if pair is None:
        return None
    aps = [fields.get(name) for name in pair]
    if not all(isinstance(ap, AccessPattern) and ap.memory is Memory.PSUM for ap in aps):
        return None
    chosen = [name for name, ap in zip(pair, aps, strict=True) if ap.tensor in trace.compiler_psum]
    return chosen[-1] if chosen else None


@functools.cache
def _one_psum_input(cls: type[Instruction]) -> tuple[str, str] | None:
    """The class's ONE_PSUM_INPUT pair, once per class (a class attribute lookup that misses
    costs an AttributeError raised and caught, on every instruction traced)."""
    return getattr(cls, "ONE_PSUM_INPUT", None)


@dataclasses.dataclass
class _Temp:
    tile: object
    ap: AccessPattern


def _start_allowed(trace: Trace, instruction: Instruction, ap: AccessPattern) -> bool:
    try:
        instruction._check_start_partition(ap, trace.core)
    except TrnsimError:
        return False
    return True


STAGING = "staging"  # the name of the compiler temporaries below


def _temporary(trace: Trace, ap: AccessPattern, memory: Memory, *,
               from_partition_zero: bool = False) -> _Temp:
    """A dense tile in `memory` over the same partitions as `ap` (engines keep partitions),
    or from partition 0 (a DMA moves rows between partitions)."""
    p0 = 0 if from_partition_zero else ap.partition_start
    free = ap.free_size
    buffer = "psum" if memory is Memory.PSUM else "sbuf"
    tile = trace.allocate((p0 + ap.partitions, free), ap.dtype, buffer, name=STAGING)
    base = tile.access()
    return _Temp(tile, AccessPattern(memory=memory, dtype=ap.dtype, partitions=ap.partitions,
                                     dims=row_major_dims(ap.free_shape), offset=base.offset,
                                     partition_start=p0, tensor=base.tensor))
