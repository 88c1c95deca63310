"""On-chip intermediates: internal tensors that fit in the SBUF the kernels leave free stay there.

neuronx-cc compiles the whole graph at once and allocates intermediate activations in SBUF
(24 MiB per NeuronCore-v2) when they fit, spilling to HBM only what does not; the next layer
reads them where the previous one wrote them. trnsim's kernels exchange results through HBM
tensors, so without this pass every activation makes a round trip through the DMA engines (at
batch 1 on inf2, about 40% of BERT-large's DMA time). This pass gives each internal tensor its
live range (first to last instruction touching it, in program order) and keeps it in SBUF when,
over that whole range, it fits beside the kernels' own working set (the program's SBUF peak)
and the other tensors kept there: first come, first placed, as a linear-scan allocator would.
What stays on chip is marked `TensorDecl.on_chip` and counted in the program's SBUF peak; the
simulator then charges its DMAs no HBM bytes, and nothing at all when they hand the tensor over
in its own layout and dtype (`trnsim.sim.plan`).

ASSUMPTION: a tensor kept on chip is spread evenly over all partitions (rows of tokens on
partitions, as the kernels store them), so it takes nbytes / partitions of each partition.

Straight-line programs only (live ranges in program order), like `reuse_internal_hbm`.
"""

from __future__ import annotations

import dataclasses

from trnsim.compiler.lowering.replay import HbmIndex, control_flow, hbm_operands
from trnsim.isa import Program


def keep_on_chip(program: Program, core, *, exclude=frozenset(), partial: bool = False,
                 index: HbmIndex | None = None) -> list[str]:
    """Mark the internal tensors kept in SBUF (in place); returns their names.

    `exclude`: tensors that must stay in HBM (another core reads them). `partial`: the program
    may touch only part of a tensor (its core's share under LNC=2), so a tensor takes the bytes
    between the first and last it touches rather than all of them. `index`: the program's
    HBM operand index, if the lowering kept one (else it is built here)."""
    if has_control_flow(program, index):
        return []
    budget = core.sbuf_usable_bytes_per_partition - program.sbuf_peak_bytes_per_partition
    if budget <= 0:
        return []
    index = index or HbmIndex.of(program.instructions)
    ranges = live_ranges(program, index)
    spans = touched_bytes(program, index) if partial else {}
    kept: list[tuple[int, int, int]] = []  # (first, last, bytes per partition)
    names: list[str] = []
    for name in sorted(ranges, key=lambda n: (ranges[n][0], n)):
        if name in exclude:
            continue
        first, last = ranges[name]
        lo, hi = spans.get(name, (0, program.tensors[name].nbytes))
        need = footprint(min(program.tensors[name].nbytes, hi - lo), core.partitions)
        if need + _peak(kept, first, last) <= budget:
            kept.append((first, last, need))
            names.append(name)
    for name in names:
        program.tensors[name] = dataclasses.replace(program.tensors[name], on_chip=True,
                                                    on_chip_from=spans.get(name, (0, 0))[0])
    # the kept tensors occupy SBUF beside the kernels' tiles: the program's SBUF peak says so
    # (and whatever else wants the rest, e.g. a pipeline stage caching weights, sees it)
    program.sbuf_peak_bytes_per_partition += _peak(kept, 0, len(program.instructions))
    return names


def footprint(nbytes: int, partitions: int) -> int:
    """Bytes per partition of a tensor spread evenly over all partitions (the ASSUMPTION above),
    rounded up to 4 bytes as the SBUF allocator aligns."""
    return -(-nbytes // (4 * partitions)) * 4


def has_control_flow(program: Program, index: HbmIndex | None = None) -> bool:
    """Live ranges in program order hold for straight-line programs only. `index`: the program's
    HBM operand index, which knows (else the program's instruction classes are looked at)."""
    if index is not None:
        return index.control
    return control_flow(set(map(type, program.instructions)))


def live_ranges(program: Program, index: HbmIndex | None = None) -> dict[str, tuple[int, int]]:
    """(first, last) instruction index touching each internal tensor."""
    internal = {name for name, t in program.tensors.items() if t.kind == "internal"}
    index = index or HbmIndex.of(program.instructions)
    return index.live_ranges(program.instructions, internal)


def touched_bytes(program: Program, index: HbmIndex) -> dict[str, tuple[int, int]]:
    """Per HBM tensor, the span of bytes [first, last + 1) the program touches."""
    spans: dict[str, tuple[int, int]] = {}
    for i, slots in index.entries:
        for ap in hbm_operands(program.instructions[i], slots):
            start, end = ap.byte_span()
            known = spans.get(ap.tensor, (start, end))
            spans[ap.tensor] = (min(known[0], start), max(known[1], end))
    return spans


def _peak(kept: list[tuple[int, int, int]], first: int, last: int) -> int:
    """Largest total of kept bytes live at any instruction in [first, last]."""
    overlapping = [(a, b, n) for a, b, n in kept if a <= last and b >= first]
    points = sorted({max(a, first) for a, _, _ in overlapping} | {first})
    return max((sum(n for a, b, n in overlapping if a <= p <= b) for p in points), default=0)


def cache_weights(program: Program, core) -> Program:
    """A neuron-cc pipeline stage (inf1) keeps its constants on chip if they all fit in the SBUF
    its kernels and kept intermediates leave free (program.sbuf_peak_bytes_per_partition),
    spread like them: neuron-cc "caches the model parameters in each core's on-chip memory".
    They are marked `TensorDecl.on_chip` like kept intermediates, so reading them draws no DRAM
    bandwidth and a load in their own layout moves nothing."""
    names = [name for name, t in program.tensors.items() if t.kind == "constant"]
    need = sum(footprint(program.tensors[n].nbytes, core.partitions) for n in names)
    if names and need <= core.sbuf_usable_bytes_per_partition - program.sbuf_peak_bytes_per_partition:
        for name in names:
            program.tensors[name] = dataclasses.replace(program.tensors[name], on_chip=True)
        program.sbuf_peak_bytes_per_partition += need
    return program
