"""Cross-engine dependencies on overlapping bytes, tracked the way the compiler's semaphores are.

An access pattern's footprint is a `Region`: a rectangle of rows x bytes-in-row. On SBUF/PSUM
the rows are partitions and the columns the byte span inside each partition. In HBM the rows
are the access pattern's partition axis (``partition_step`` elements apart) when its free
dimensions stay inside one row, so the [128, 512] blocks of a [4096, 8192] tensor do not
overlap each other; otherwise the region is the flat byte span. Rectangles are conservative for
strided patterns (a pattern that reads every other column owns the whole span), as the
compiler's tile-level tracking is.

Regions are geometry only, numbered in the order they are found (`Region.uid`); the times of
their latest accesses live in the core's scheduler (`trnsim.sim.scheduler.CoreScheduler`), one
list entry per region uid, so one planned program can be timed on several cores and in several
runs without planning it again:

- ``w_ready``: when the data of the last write is visible (writer start + latency);
- ``w_engine``: the engine (or DMA queue) that wrote it last;
- ``r_done``: when the last read of it finished streaming (reader start + busy).

Regions are linked once, when first seen, to every region they overlap (their uids,
`neighbor_ids`, itself first), so the hot loop never searches: an instruction waits for
- read-after-write: ``w_ready`` of every neighbour of what it reads;
- write-after-write: ``w_ready`` of every neighbour of what it writes, unless that write came
  from the same in-order engine/queue (its writes land in order, e.g. an accumulation group);
- write-after-read: ``r_done`` of every neighbour of what it writes.
Keeping the latest times per region, and taking the maximum over neighbours, is exact at the
region granularity without ever removing a region.
"""

from __future__ import annotations

from contextlib import contextmanager
from itertools import count

import numpy as np

from trnsim.isa import AccessPattern, Memory

_NUMPY_SEARCH_FROM = 48  # regions in a space before discovery switches to a vectorised search
_LINK_BLOCK = 256  # deferred regions linked per array operation (`_Space.link_pending`)
# (enum members as module globals: `Memory.HBM` is a class attribute look-up through the enum's
# metaclass, ~10x a global's, and `_footprint` asks once per distinct access pattern)
_HBM, _SBUF = Memory.HBM, Memory.SBUF


class Region:
    """One footprint (a rectangle of rows x bytes) and the regions it overlaps."""

    __slots__ = ("c0", "c1", "hi", "lo", "neighbor_ids", "pitch", "r0", "r1", "uid")

    def __init__(self, pitch: int, r0: int, r1: int, c0: int, c1: int, uid: int = 0) -> None:
        self.pitch, self.r0, self.r1, self.c0, self.c1 = pitch, r0, r1, c0, c1
        if pitch:
            self.lo, self.hi = r0 * pitch + c0, (r1 - 1) * pitch + c1
        else:
            self.lo, self.hi = c0, c1
        self.uid = uid  # index of this region's times in a scheduler's lists
        self.neighbor_ids: list[int] = [uid]  # its own, then its overlapping regions' in order

    @property
    def empty(self) -> bool:
        return self.hi <= self.lo or self.c1 <= self.c0 or (self.pitch and self.r1 <= self.r0)

    def overlaps(self, other: Region) -> bool:
        if self.hi <= other.lo or other.hi <= self.lo:
            return False
        if self.pitch and self.pitch == other.pitch:
            return (self.r0 < other.r1 and other.r0 < self.r1
                    and self.c0 < other.c1 and other.c0 < self.c1)
        return True


class _Space:
    """All regions of one address space (SBUF, PSUM, or one HBM tensor), for discovery."""

    def __init__(self, uids: count | None = None, owner: RegionIndex | None = None) -> None:
        self.uids = uids if uids is not None else count()  # shared by a core's spaces
        self.owner = owner
        self.regions: list[Region] = []
        self.by_key: dict[tuple[int, int, int, int, int], Region] = {}
        self._table = np.zeros((64, 7), dtype=np.int64)  # pitch, r0, r1, c0, c1, lo, hi
        self.max_column = 0  # highest byte end seen (the memory's high-water mark per partition)
        self.pending: list[Region] = []  # found while linking is deferred (`RegionIndex.deferred`)

    def get(self, pitch: int, r0: int, r1: int, c0: int, c1: int) -> Region:
        key = (pitch, r0, r1, c0, c1)
        region = self.by_key.get(key)
        if region is None:
            region = self.by_key[key] = Region(pitch, r0, r1, c0, c1, next(self.uids))
            if not region.empty:
                if self.owner is not None and self.owner.deferring:
                    self.pending.append(region)
                else:
                    self._link(region)
                self.max_column = max(self.max_column, c1)
        return region

    def link_pending(self) -> None:
        """Link the regions found while deferred, all at once: the same neighbour lists, in the
        same order, as linking each when found (its own uid, then every overlapping region's in
        uid order: regions are found, and numbered, in order). The overlapping pairs come from
        the compiled `overlap_pairs` when the compiled loop is loaded, else from array
        operations (`_pairs`: sorted by column in a space of one row pitch, else per block of
        regions)."""
        pending, self.pending = self.pending, []
        if not pending:
            return
        base = len(self.regions)
        need = base + len(pending)
        if need > len(self._table):
            table = np.zeros((max(need, 2 * len(self._table)), 7), dtype=np.int64)
            table[:base] = self._table[:base]
            self._table = table
        self._table[base:need] = [(r.pitch, r.r0, r.r1, r.c0, r.c1, r.lo, r.hi) for r in pending]
        self.regions += pending
        regions = self.regions
        t = self._table[:need]
        uids = np.array([r.uid for r in regions], dtype=np.int64)
        rows, cols = _pairs(t, base, need)  # by new region, each one's overlapping in order
        bounds = np.searchsorted(rows, np.arange(base, need + 1)).tolist()
        found = uids[cols].tolist()
        for k, region in enumerate(pending):
            lo, hi = bounds[k], bounds[k + 1]
            if lo != hi:
                region.neighbor_ids += found[lo:hi]
        earlier = cols < base
        older, newer = cols[earlier], rows[earlier]
        if len(older):
            order = np.argsort(older, kind="stable")  # each earlier region's new ones in order
            older, newer = older[order], uids[newer[order]]
            starts = np.flatnonzero(np.r_[True, older[1:] != older[:-1]])
            ends = np.r_[starts[1:], len(older)].tolist()
            newer = newer.tolist()
            for lo, hi in zip(starts.tolist(), ends, strict=True):
                regions[older[lo]].neighbor_ids += newer[lo:hi]

    def _link(self, region: Region) -> None:
        for other in self._overlapping(region):
            other.neighbor_ids.append(region.uid)
            region.neighbor_ids.append(other.uid)
        n = len(self.regions)
        if n == len(self._table):
            self._table = np.concatenate([self._table, np.zeros_like(self._table)])
        self._table[n] = (region.pitch, region.r0, region.r1, region.c0, region.c1, region.lo, region.hi)
        self.regions.append(region)

    def _overlapping(self, region: Region) -> list[Region]:
        n = len(self.regions)
        if n < _NUMPY_SEARCH_FROM:
            return [other for other in self.regions if region.overlaps(other)]
        t = self._table[:n]
        hit = (t[:, 5] < region.hi) & (t[:, 6] > region.lo)
        if region.pitch:
            same = t[:, 0] == region.pitch
            rect = ((t[:, 1] < region.r1) & (t[:, 2] > region.r0)
                    & (t[:, 3] < region.c1) & (t[:, 4] > region.c0))
            hit &= ~same | rect
        return [self.regions[i] for i in np.flatnonzero(hit)]


def _pairs(t: np.ndarray, first: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, columns) of `t` (pitch, r0, r1, c0, c1, lo, hi per region) that overlap, for the
    rows first..stop-1 against every row but itself, by row and then column."""
    from trnsim.sim import compiled

    pairs = compiled.loaded(overlap_pairs)
    if pairs is not None:
        return pairs(t, first, stop)
    pitches = t[:, 0]
    if pitches[0] and (pitches == pitches[0]).all():
        return _rectangle_pairs(t, first, stop)
    return _dense_pairs(t, first, stop)


def _dense_pairs(t: np.ndarray, first: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """`_pairs` by testing each row against every row, a block of rows at a time."""
    all_rows, all_cols = [], []
    for start in range(first, stop, _LINK_BLOCK):
        b = t[start:min(start + _LINK_BLOCK, stop), None, :]
        hit = (t[None, :, 5] < b[..., 6]) & (t[None, :, 6] > b[..., 5])
        same = (b[..., 0] != 0) & (t[None, :, 0] == b[..., 0])
        rect = ((t[None, :, 1] < b[..., 2]) & (t[None, :, 2] > b[..., 1])
                & (t[None, :, 3] < b[..., 4]) & (t[None, :, 4] > b[..., 3]))
        hit &= ~same | rect
        rows, cols = np.nonzero(hit)
        rows += start
        keep = rows != cols
        all_rows.append(rows[keep])
        all_cols.append(cols[keep])
    return np.concatenate(all_rows), np.concatenate(all_cols)


def _rectangle_pairs(t: np.ndarray, first: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """`_pairs` of a space whose regions all have one row pitch (SBUF, PSUM, an HBM tensor read
    in row blocks): two overlap when their rows and their columns do (their flat spans then
    do too). Two column ranges overlap when one starts inside the other, so the pairs whose
    columns overlap are found from the regions sorted by start column, by two binary searches
    per region, and only those are tested for rows: testing every pair of an SBUF's thousands of
    regions was most of the deferred linking's time."""
    n = len(t)
    r0, r1, c0, c1 = t[:, 1], t[:, 2], t[:, 3], t[:, 4]
    queries = np.arange(first, stop)
    order = np.argsort(c0, kind="stable")
    starts = c0[order]
    # a region starting inside a query row's columns (at or after its start) ...
    rows, cols = _spread(queries, np.searchsorted(starts, c0[queries], side="left"),
                         np.searchsorted(starts, c1[queries], side="left"), order)
    # ... and a query row starting inside a region's columns (after its start)
    by_start = queries[np.argsort(c0[queries], kind="stable")]
    query_starts = c0[by_start]
    inside, owners = _spread(np.arange(n), np.searchsorted(query_starts, c0, side="right"),
                             np.searchsorted(query_starts, c1, side="left"), by_start)
    rows, cols = np.concatenate([rows, owners]), np.concatenate([cols, inside])
    keep = (r0[cols] < r1[rows]) & (r1[cols] > r0[rows]) & (cols != rows)
    rows, cols = rows[keep], cols[keep]
    by_pair = np.argsort(rows * n + cols, kind="stable")
    return rows[by_pair], cols[by_pair]


def _spread(owners: np.ndarray, low: np.ndarray, high: np.ndarray,
            targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(owner, target) pairs: each owner with targets[low:high] of its own bounds."""
    counts = high - low
    positions = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts - low, counts)
    return np.repeat(owners, counts), targets[positions]


def overlap_pairs(t: np.ndarray, first: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, columns) of the region table `t` (pitch, r0, r1, c0, c1, lo, hi per region) that
    overlap, for rows first..stop-1 against every other row, by row then column: `_pairs`' tests
    as one loop, compiled (`compiled.loaded`)."""
    n = t.shape[0]
    pitches, row0, row1 = t[:, 0].copy(), t[:, 1].copy(), t[:, 2].copy()
    col0, col1, low, high = t[:, 3].copy(), t[:, 4].copy(), t[:, 5].copy(), t[:, 6].copy()
    cols = np.empty(1024, np.int64)
    ends = np.empty(stop - first, np.int64)
    at = 0
    for i in range(first, stop):
        pitch, r0, r1, c0, c1, lo, hi = pitches[i], row0[i], row1[i], col0[i], col1[i], low[i], high[i]
        if at + n > len(cols):
            grown = np.empty(max(2 * len(cols), at + n), np.int64)
            grown[:at] = cols[:at]
            cols = grown
        for j in range(n):  # branch-free: every j is written, the cursor moves on a hit
            rect = (row0[j] < r1) & (row1[j] > r0) & (col0[j] < c1) & (col1[j] > c0)
            hit = ((low[j] < hi) & (high[j] > lo) & (j != i)
                   & ~((pitch != 0) & (pitches[j] == pitch) & ~rect))
            cols[at] = j
            at += hit
        ends[i - first] = at
    rows = np.empty(at, np.int64)
    begin = 0
    for i in range(first, stop):
        rows[begin:ends[i - first]] = i
        begin = ends[i - first]
    return rows, cols[:at].copy()


class RegionIndex:
    """Regions of one core's memories; `region(ap)` gives an access pattern's footprint."""

    def __init__(self, core) -> None:
        self.sbuf_pitch = core.sbuf_bytes_per_partition
        self.psum_pitch = core.psum_bytes_per_partition
        self._uids = count()
        self.deferring = False  # regions found now are linked by `link_pending`
        self.sbuf = _Space(self._uids, self)
        self.psum = _Space(self._uids, self)
        self.hbm: dict[str, _Space] = {}
        # each pattern object met, with its region, by its id (the entry holds the pattern, so
        # the id is not reused while it is kept): an id is hashed in C, a pattern's hash is a
        # Python call (`AccessPattern.__hash__`). An equal pattern of another object finds its
        # region again by footprint (`_Space.get`): the same region, as a look-up by value would
        # find; a lowered program interns its patterns (97.7k objects of 97.0k values for a
        # Llama-2-7B layer), so that is rare.
        self._by_id: dict[int, tuple[AccessPattern, Region]] = {}

    @contextmanager
    def deferred(self):
        """Find regions without linking them, then link them all at once (a program's planning:
        no plan reads a neighbour list before the program runs)."""
        self.deferring = True
        try:
            yield self
        finally:
            self.deferring = False
            for space in (self.sbuf, self.psum, *self.hbm.values()):
                space.link_pending()

    @property
    def count(self) -> int:
        """Regions found so far (their uids are 0 .. count - 1)."""
        return sum(len(space.by_key) for space in (self.sbuf, self.psum, *self.hbm.values()))

    def neighbor_lists(self) -> dict[int, list[int]]:
        """Every region's neighbour uids (`Region.neighbor_ids`), by its uid."""
        return {region.uid: region.neighbor_ids
                for space in (self.sbuf, self.psum, *self.hbm.values())
                for region in space.by_key.values()}

    def region(self, ap: AccessPattern) -> Region:
        found = self._by_id.get(id(ap))
        if found is None:
            found = self._by_id[id(ap)] = (ap, self._footprint(ap))
        return found[1]

    def regions_of(self, aps: tuple[AccessPattern, ...]) -> tuple[tuple[int, ...], tuple[list[int], ...]]:
        """(uids, neighbour lists) of the regions of `aps`, found in order as `region` finds
        them: what a plan holds of its reads or writes (`Plan.reads`, `Plan.read_neighbors`),
        in one call (a lowered program plans ~10^5 instructions' operands)."""
        by_id = self._by_id
        if len(aps) == 1:
            ap = aps[0]
            found = by_id.get(id(ap))
            if found is None:
                found = by_id[id(ap)] = (ap, self._footprint(ap))
            return (found[1].uid,), (found[1].neighbor_ids,)
        uids, neighbors = [], []
        for ap in aps:
            found = by_id.get(id(ap))
            if found is None:
                found = by_id[id(ap)] = (ap, self._footprint(ap))
            uids.append(found[1].uid)
            neighbors.append(found[1].neighbor_ids)
        return tuple(uids), tuple(neighbors)

    def operand_regions(self, reads: tuple[AccessPattern, ...], writes: tuple[AccessPattern, ...]
                        ) -> tuple[tuple[int, ...], tuple[list[int], ...], tuple[int, ...],
                                   tuple[list[int], ...]]:
        """`regions_of` of an instruction's reads, then of its writes, in one call (a copied
        template's regions, `Planner._templated`: ~10^5 a lowered layer)."""
        if len(reads) != 1 or len(writes) > 1:
            return (*self.regions_of(reads), *self.regions_of(writes))
        # (most instructions: one source and one result or none)
        by_id, read = self._by_id, reads[0]
        found = by_id.get(id(read))
        if found is None:
            found = by_id[id(read)] = (read, self._footprint(read))
        if not writes:
            return (found[1].uid,), (found[1].neighbor_ids,), (), ()
        write = writes[0]
        wrote = by_id.get(id(write))
        if wrote is None:
            wrote = by_id[id(write)] = (write, self._footprint(write))
        return (found[1].uid,), (found[1].neighbor_ids,), (wrote[1].uid,), (wrote[1].neighbor_ids,)

    def _footprint(self, ap: AccessPattern) -> Region:
        memory = ap.memory
        if memory is _HBM:
            space = self.hbm.get(ap.tensor)
            if space is None:
                space = self.hbm[ap.tensor] = _Space(self._uids, self)
            return space.get(*_hbm_rectangle(ap))
        low, high = ap.byte_span()
        p0, p1 = ap.partition_range()
        space, pitch = (self.sbuf, self.sbuf_pitch) if memory is _SBUF else (self.psum,
                                                                              self.psum_pitch)
        return space.get(pitch, p0, p1, low, high)


def _hbm_rectangle(ap: AccessPattern) -> tuple[int, int, int, int, int]:
    """(pitch, r0, r1, c0, c1) of an HBM pattern: rows of ``partition_step`` elements if its free
    dimensions stay inside one row, else pitch 0 and the flat byte span in c0, c1."""
    item = ap.dtype.itemsize
    pitch = ap.partition_step * item
    low = high = 0
    for stride, size in ap.dims:
        if size <= 0:
            return (0, 0, 0, 0, 0)
        reach = stride * (size - 1)
        if reach >= 0:
            high += reach
        else:
            low += reach
    start = ap.offset + low * item
    width = (high + 1 - low) * item
    if ap.partitions > 1 and pitch > 0 and start >= 0:
        row, column = divmod(start, pitch)
        if column + width <= pitch:
            return (pitch, row, row + ap.partitions, column, column + width)
    flat_low, flat_high = ap.byte_span()
    return (0, 0, 1, flat_low, flat_high)
