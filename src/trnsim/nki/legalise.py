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
from trnsim.isa.access import row_major_dims

if TYPE_CHECKING:
    from trnsim.nki.trace import Trace

# Engines able to copy between SBUF and PSUM in either direction, in the compiler's preference.
_COPY_ENGINE = Engine.VECTOR


def staged(trace: Trace, instruction: Instruction, fields: dict) -> list[Instruction] | None:
    """The instruction with its misplaced operands staged through copies (copies included, in
    order), or None when every operand is already where the engine can reach it."""
    engine = instruction.engine
    can_read, can_write = ENGINE_MEMORIES.get(engine, (frozenset(), frozenset()))
    reads, writes = instruction.reads(), instruction.writes()
    before, after, changes, temps = [], [], {}, []
    for name, ap in fields.items():
        if not isinstance(ap, AccessPattern) or ap.memory is Memory.HBM:
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
