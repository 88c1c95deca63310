"""A collective algorithm's output: a `Schedule`, the list of steps both executors consume.

Every rank holds one working buffer, cut into *blocks* (element ranges). A *region* is a set of
blocks. A step is a set of transfers that start together; transfer t copies region
``src_region[t]`` of rank ``src[t]``'s buffer onto region ``dst_region[t]`` of rank ``dst[t]``'s
buffer, or, if the step reduces, combines it with what is there (`ops.reduce_pair`). Transfers of
a step read the buffers as they were when the step began and are applied in array order, which
fixes every reduction's order.

The functional executor (`functional.py`) runs these transfers on numpy arrays; the timing model
(`engine.py`) turns each step into flows of ``count * itemsize`` bytes. Nothing here is sized by
the data: a schedule is O(transfers + region entries) integers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Step:
    """Transfers that start together (arrays of equal length)."""

    src: np.ndarray
    dst: np.ndarray
    src_region: np.ndarray
    dst_region: np.ndarray
    count: np.ndarray  # elements each transfer moves
    reduce: bool
    # The transfers ride on a neighbouring step's DMAs (KangaRing: the primary reads its
    # secondary's chunk in the same 3R1W transfer, and duplicates its writes to it): they happen
    # on the arrays, but cost no step latency and no port or link time.
    fused: bool = False

    def __len__(self) -> int:
        return len(self.src)


@dataclass(frozen=True)
class Schedule:
    """The steps of one collective plus the block/region layout its transfers refer to."""

    op: str
    algorithm: str
    ranks: int
    count: int  # the operation's element count n (ops.py)
    block_sizes: np.ndarray  # [1 or ranks, blocks]: elements per block (one row if all alike)
    region_ptr: np.ndarray  # CSR over region_blocks: region i = region_blocks[ptr[i]:ptr[i+1]]
    region_blocks: np.ndarray
    input_region: np.ndarray  # [ranks]: where each rank's input goes
    output_region: np.ndarray  # [ranks]: what each rank's output is
    steps: tuple[Step, ...]
    detail: str = ""  # e.g. the sub-algorithms of a hierarchical schedule
    _offsets: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def transfers(self) -> int:
        return sum(len(s) for s in self.steps)

    def buffer_elems(self, rank: int) -> int:
        return int(self.block_sizes[rank if len(self.block_sizes) > 1 else 0].sum())

    def region_indices(self, rank: int, region: int) -> np.ndarray:
        """Element indices of a region in `rank`'s buffer (functional use only)."""
        row = rank if len(self.block_sizes) > 1 else 0
        offsets = self._offsets.get(row)
        if offsets is None:
            offsets = np.concatenate([[0], np.cumsum(self.block_sizes[row])])
            self._offsets[row] = offsets
        blocks = self.region_blocks[self.region_ptr[region]:self.region_ptr[region + 1]]
        starts, ends = offsets[blocks], offsets[blocks + 1]
        return np.concatenate([np.arange(s, e) for s, e in zip(starts, ends, strict=True)]) \
            if len(blocks) else np.zeros(0, dtype=np.int64)


class RegionTable:
    """Accumulates regions (block lists) and hands out their ids."""

    def __init__(self, block_sizes: np.ndarray) -> None:
        self.block_sizes = np.atleast_2d(np.asarray(block_sizes, dtype=np.int64))
        self._lengths: list[np.ndarray] = []
        self._blocks: list[np.ndarray] = []
        self._elems: list[np.ndarray] = []
        self.size = 0

    def add(self, lengths: np.ndarray, blocks: np.ndarray) -> int:
        """Add regions given as CSR pieces (lengths[i] blocks each, concatenated in `blocks`);
        returns the id of the first one. Region elements use the first row of block sizes."""
        lengths = np.asarray(lengths, dtype=np.int64)
        blocks = np.asarray(blocks, dtype=np.int64)
        first = self.size
        self._lengths.append(lengths)
        self._blocks.append(blocks)
        sizes = self.block_sizes[0][blocks]
        ends = np.cumsum(lengths)
        elems = np.add.reduceat(sizes, ends - lengths) if len(sizes) else np.zeros(len(lengths))
        elems = np.where(lengths > 0, elems, 0)
        self._elems.append(elems.astype(np.int64))
        self.size += len(lengths)
        return first

    def add_one(self, blocks: np.ndarray) -> int:
        blocks = np.asarray(blocks, dtype=np.int64)
        return self.add(np.array([len(blocks)]), blocks)

    @property
    def elems(self) -> np.ndarray:
        """Elements of each region (uniform block sizes)."""
        return np.concatenate(self._elems) if self._elems else np.zeros(0, dtype=np.int64)

    def csr(self) -> tuple[np.ndarray, np.ndarray]:
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, dtype=np.int64)
        blocks = np.concatenate(self._blocks) if self._blocks else np.zeros(0, dtype=np.int64)
        return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64), blocks


def csr_from_ranges(starts: np.ndarray, lengths: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Concatenate values[starts[i]:starts[i]+lengths[i]] for all i, without a Python loop."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.cumsum(lengths) - lengths
    index = np.arange(total) - np.repeat(offsets, lengths) + np.repeat(starts, lengths)
    return values[index]


def merge_steps(parts: list[list[Step]]) -> list[Step]:
    """Run several step lists side by side: step k of the result holds step k of each list."""
    merged = []
    for k in range(max((len(p) for p in parts), default=0)):
        pieces = [p[k] for p in parts if k < len(p)]
        if len(pieces) == 1:
            merged.append(pieces[0])
            continue
        merged.append(Step(*(np.concatenate([getattr(s, name) for s in pieces])
                             for name in ("src", "dst", "src_region", "dst_region", "count")),
                           reduce=pieces[0].reduce, fused=pieces[0].fused))
    return merged
