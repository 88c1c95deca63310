"""Device-memory reuse: internal HBM tensors whose lifetimes do not overlap share one buffer.

A model lowered kernel by kernel writes every intermediate to HBM; without reuse, ELECTRA-large
at batch 10 would need more than Inferentia's 8 GiB for activations that are each dead a layer
later. Like the compiler's allocator, this pass gives each internal tensor a live range (first to
last instruction touching it, in program order) and packs the ranges into buffers ("slots"),
linear-scan style: a tensor takes the smallest free slot that holds it (the earliest freed among
equals, so a slot's next writer is as far as possible from its last reader), else grows the
largest free slot, else opens a new one. The simulator orders a slot's next write after its last
read (write-after-read on the shared bytes), so reuse is safe in both modes and costs whatever
waiting that ordering implies, as on hardware.

Tensors the compiler keeps in SBUF (`TensorDecl.on_chip`, `trnsim.compiler.lowering.onchip`)
take no HBM and keep their names.

Straight-line programs only: a program with control flow keeps one buffer per tensor.
"""

from __future__ import annotations

from trnsim.compiler.lowering.onchip import has_control_flow, live_ranges
from trnsim.compiler.lowering.replay import HbmIndex
from trnsim.isa import Program, TensorDecl
from trnsim.numerics import dtype as as_dtype

SLOT_PREFIX = "hbm_slot"


def reuse_internal_hbm(program: Program, index: HbmIndex | None = None) -> dict[str, str]:
    """Rename internal HBM tensors onto shared slots in place; returns tensor -> slot.
    `index`: the program's HBM operand index, if the lowering kept one."""
    if has_control_flow(program, index):
        return {}
    index = index or HbmIndex.of(program.instructions)
    ranges = {name: span for name, span in live_ranges(program, index).items()
              if not program.tensors[name].on_chip}  # on-chip tensors take no HBM
    first = {name: span[0] for name, span in ranges.items()}
    last = {name: span[1] for name, span in ranges.items()}
    slots: list[int] = []  # bytes per slot
    free: list[tuple[int, int]] = []  # (freed at instruction, slot)
    ending: list[tuple[int, int]] = []  # (last use, slot) of live tensors
    assignment: dict[str, int] = {}
    for name in sorted(first, key=lambda n: (first[n], n)):
        start, need = first[name], program.tensors[name].nbytes
        still_live = []
        for end, slot in ending:
            (free.append((end, slot)) if end < start else still_live.append((end, slot)))
        ending = still_live
        fitting = [(slots[s], freed, s) for freed, s in free if slots[s] >= need]
        if fitting:
            slot = min(fitting)[2]
        elif free:
            slot = max((slots[s], -freed, s) for freed, s in free)[2]
            slots[slot] = need
        else:
            slot = len(slots)
            slots.append(need)
        free = [(freed, s) for freed, s in free if s != slot]
        ending.append((last[name], slot))
        assignment[name] = slot
    if not assignment:
        return {}
    rename = {name: f"{SLOT_PREFIX}{slot}" for name, slot in assignment.items()}
    for name in assignment:
        del program.tensors[name]
    for slot, nbytes in enumerate(slots):
        name = f"{SLOT_PREFIX}{slot}"
        program.tensors[name] = TensorDecl(name, (nbytes,), as_dtype("uint8"), "internal")
    index.rename(program.instructions, rename)
    return rename
