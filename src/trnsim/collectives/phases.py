"""Reduce-scatter and all-gather as phases over the axes of a rank grid.

Every all-reduce, reduce-scatter and all-gather algorithm trnsim has is a `GridPlan`: ranks sit
on a grid (coordinates per axis), and a reduce-scatter runs one *phase* per axis, in order; in a
phase, the ranks that differ only along that axis form a group and run a 1-D algorithm on the part
of the buffer they still share. An all-gather runs the phases in reverse; an all-reduce is the
reduce-scatter followed by the all-gather (the Neuron docs' decomposition for every algorithm).
The flat algorithms are one-axis plans; the 2D torus has an axis per torus dimension; the
hierarchical algorithm has an intra-node axis and an inter-node axis.

Blocks: the buffer of n elements is cut into one segment per rank (`ops.segment_sizes`), and each
segment into `channels` sub-blocks; block ``b * channels + c`` ends, after the reduce-scatter, on
rank b. Channels run the same phases side by side on their own data: the bidirectional ring
(kangaring) sends channel 0 one way round and channel 1 the other way.

1-D phase algorithms (group of D ranks at coordinates 0..D-1; part q = the blocks whose owner has
coordinate q on this axis):

- ``ring``: D-1 steps. Reduce-scatter step s: the rank at ring position p sends part p-s-1 to
  p+1, which adds it to its own. Part q is summed as ``(((x[q+1] + x[q+2]) + ...) + x[q])``:
  starting after its owner, around the ring, the owner's value last. All-gather step s: p sends
  part p-s to p+1.
- ``biring``: ring with odd channels going the other way.
- ``altring``: ring whose groups alternate direction with the parity of their coordinate on the
  plan's first axis (KangaRing's primaries: two cycles, one each way round the ring).
- ``mesh``: one step. Reduce-scatter: every rank sends part q straight to rank q, which sums in
  the order own value, then sources at q-1, q-2, ... (mod D). All-gather: every rank sends its
  part to all others.
- ``rdh`` (D a power of two): recursive halving for the reduce-scatter — log2 D steps, partner at
  distance D/2, D/4, ..., 1 (coordinate XOR distance), each rank keeping the half that holds its own
  coordinate and sending the other half to be added by the partner — and recursive doubling for
  the all-gather (distances 1, 2, ..., D/2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trnsim.collectives.ops import segment_sizes
from trnsim.collectives.schedule import RegionTable, Schedule, Step, csr_from_ranges, merge_steps

PHASE_KINDS = ("ring", "biring", "altring", "mesh", "rdh")


@dataclass(frozen=True)
class Phase:
    axis: int
    kind: str  # one of PHASE_KINDS
    fused: bool = False  # its transfers ride on the next phase's DMAs (`schedule.Step.fused`)


@dataclass(frozen=True)
class GridPlan:
    """Ranks on a grid and the reduce-scatter phases to run over it."""

    coords: np.ndarray  # [ranks, axes]; row i = coordinates of rank i; a bijection onto the grid
    sizes: tuple[int, ...]
    phases: tuple[Phase, ...]  # reduce-scatter order (all-gather runs them reversed)
    channels: int = 1


@dataclass(frozen=True)
class _PhaseRegions:
    base: int  # id of the first region of this phase
    ranges: int  # ranges per (prefix, channel)
    prefix: np.ndarray  # [ranks]: linear index of each rank's coordinates on earlier axes


class _GridBuilder:
    def __init__(self, n: int, plan: GridPlan) -> None:
        self.plan = plan
        self.ranks = len(plan.coords)
        self.m = plan.channels
        self.table = RegionTable(_block_sizes(n, self.ranks, self.m))
        self.rank_at = np.zeros(plan.sizes or (1,), dtype=np.int64)
        if plan.sizes:
            self.rank_at[tuple(plan.coords.T)] = np.arange(self.ranks)
        every_block = np.arange(self.ranks * self.m)
        self.whole = self.table.add_one(every_block)
        self.own = self.table.add(np.full(self.ranks, self.m), every_block)
        self.regions = self._phase_regions()
        self.elems = self.table.elems
        self._fused = False

    def _phase_regions(self) -> list[_PhaseRegions]:
        out, fixed = [], []
        for phase in self.plan.phases:
            out.append(self._add_regions(phase, fixed))
            fixed.append(phase.axis)
        return out

    def _add_regions(self, phase: Phase, fixed: list[int]) -> _PhaseRegions:
        """Regions (prefix p, channel c, coordinate range rho): blocks whose owner has prefix p and
        a coordinate in rho on this axis; one table row per (p, c, rho), in that order."""
        coords, sizes = self.plan.coords, self.plan.sizes
        d = sizes[phase.axis]
        prefixes = int(np.prod([sizes[a] for a in fixed])) if fixed else 1
        prefix = (np.ravel_multi_index(tuple(coords[:, fixed].T), tuple(sizes[a] for a in fixed))
                  if fixed else np.zeros(self.ranks, dtype=np.int64))
        key = prefix * d + coords[:, phase.axis]
        owners = np.argsort(key, kind="stable")
        start = np.concatenate([[0], np.cumsum(np.bincount(key, minlength=prefixes * d))])
        lo, hi = _ranges(phase.kind, d)
        p, c, rho = (g.ravel() for g in np.meshgrid(np.arange(prefixes), np.arange(self.m),
                                                     np.arange(len(lo)), indexing="ij"))
        first, last = start[p * d + lo[rho]], start[p * d + hi[rho]]
        lengths = last - first
        blocks = csr_from_ranges(first, lengths, owners) * self.m + np.repeat(c, lengths)
        base = self.table.add(lengths, blocks)
        return _PhaseRegions(base, len(lo), prefix)

    def region(self, j: int, channel: int, rho: np.ndarray) -> np.ndarray:
        info = self.regions[j]
        return info.base + (info.prefix * self.m + channel) * info.ranges + rho

    def neighbour(self, axis: int, new_coord: np.ndarray) -> np.ndarray:
        index = self.plan.coords.copy()
        index[:, axis] = new_coord
        return self.rank_at[tuple(index.T)]

    def step(self, src: np.ndarray, dst: np.ndarray, region: np.ndarray, reduce: bool) -> Step:
        return Step(src, dst, region, region, self.elems[region], reduce, self._fused)

    def phase_steps(self, j: int, reduce: bool) -> list[Step]:
        phase = self.plan.phases[j]
        kind_steps = {"ring": self._ring, "biring": self._ring, "altring": self._ring,
                      "mesh": self._mesh, "rdh": self._rdh}[phase.kind]
        self._fused = phase.fused
        per_channel = [kind_steps(j, phase, c, reduce) for c in range(self.m)]
        return merge_steps(per_channel)

    def _ring(self, j: int, phase: Phase, channel: int, reduce: bool) -> list[Step]:
        d = self.plan.sizes[phase.axis]
        q = self.plan.coords[:, phase.axis]
        if phase.kind == "altring":
            forward = self.plan.coords[:, 0] % 2 == 0
        else:
            forward = np.full(self.ranks, phase.kind == "ring" or channel % 2 == 0)
        pos = np.where(forward, q, d - 1 - q)
        dst = self.neighbour(phase.axis, (q + np.where(forward, 1, -1)) % d)
        src = np.arange(self.ranks)
        steps = []
        for s in range(d - 1):
            owner_pos = (pos - s - 1) % d if reduce else (pos - s) % d
            part = np.where(forward, owner_pos, d - 1 - owner_pos)
            steps.append(self.step(src, dst, self.region(j, channel, part), reduce))
        return steps

    def _mesh(self, j: int, phase: Phase, channel: int, reduce: bool) -> list[Step]:
        d = self.plan.sizes[phase.axis]
        if d == 1:
            return []
        q = self.plan.coords[:, phase.axis]
        src, dst, region = [], [], []
        for k in range(1, d):
            target = (q + k) % d
            src.append(np.arange(self.ranks))
            dst.append(self.neighbour(phase.axis, target))
            region.append(self.region(j, channel, target if reduce else q))
        return [self.step(np.concatenate(src), np.concatenate(dst), np.concatenate(region), reduce)]

    def _rdh(self, j: int, phase: Phase, channel: int, reduce: bool) -> list[Step]:
        d = self.plan.sizes[phase.axis]
        q = self.plan.coords[:, phase.axis]
        levels = d.bit_length() - 1
        order = range(levels) if reduce else reversed(range(levels))
        steps = []
        for s in order:
            width = d >> (s + 1)
            partner = q ^ width
            index = partner // width if reduce else q // width
            rho = (2 ** (s + 1) - 2) + index  # ranges of width d >> (s+1) start at 2^(s+1) - 2
            steps.append(self.step(np.arange(self.ranks), self.neighbour(phase.axis, partner),
                                   self.region(j, channel, rho), reduce))
        return steps


def _block_sizes(n: int, ranks: int, channels: int) -> np.ndarray:
    seg = segment_sizes(n, ranks)
    base, extra = np.divmod(seg, channels)
    return (base[:, None] + (np.arange(channels)[None, :] < extra[:, None])).ravel()


def _ranges(kind: str, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Coordinate ranges [lo, hi) a phase's parts are made of: single coordinates, or for rdh
    every aligned power-of-two range of width d/2, d/4, ..., 1 (in that order)."""
    if kind != "rdh":
        lo = np.arange(d)
        return lo, lo + 1
    lo, hi = [], []
    width = d // 2
    while width >= 1:
        starts = np.arange(0, d, width)
        lo.append(starts)
        hi.append(starts + width)
        width //= 2
    if not lo:
        return np.zeros(1, dtype=np.int64), np.ones(1, dtype=np.int64)
    return np.concatenate(lo), np.concatenate(hi)


def build_grid_schedule(op: str, n: int, plan: GridPlan, algorithm: str, detail: str = "") -> Schedule:
    """All-reduce, reduce-scatter or all-gather of n elements as phases over `plan`'s grid."""
    b = _GridBuilder(n, plan)
    phases = range(len(plan.phases))
    steps: list[Step] = []
    if op in ("all_reduce", "reduce_scatter"):
        for j in phases:
            steps += b.phase_steps(j, reduce=True)
    if op in ("all_reduce", "all_gather"):
        for j in reversed(phases):
            steps += b.phase_steps(j, reduce=False)
    ranks = np.arange(b.ranks)
    whole = np.full(b.ranks, b.whole)
    inputs = b.own + ranks if op == "all_gather" else whole
    outputs = b.own + ranks if op == "reduce_scatter" else whole
    ptr, blocks = b.table.csr()
    return Schedule(op=op, algorithm=algorithm, ranks=b.ranks, count=int(n),
                    block_sizes=b.table.block_sizes, region_ptr=ptr, region_blocks=blocks,
                    input_region=inputs, output_region=outputs, steps=tuple(steps), detail=detail)
