"""Schedules that move data without reducing it: all-to-all, permute and send/receive.

Buffers: a rank's input blocks come first, then its output blocks (see `ops.py` for the sizes).

- all-to-all ``mesh``: one step; every rank writes block j of its input straight to rank j (routed
  through the chips in between), and copies its own block locally.
- all-to-all ``ring``: r-1 steps on the snake ring (`placement.Machine.ring_positions`); in step k
  every rank sends one block to the rank k positions further on, so each step is a shifted
  permutation and no rank receives from two sources at once (the pairwise-exchange schedule).
- permute / sendrecv ``mesh``: one step; each source -> target pair is one direct transfer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trnsim.collectives.ops import segment_sizes
from trnsim.collectives.schedule import RegionTable, Schedule, Step


def all_to_all_schedule(n: int, ranks: int, algorithm: str,
                        ring_positions: np.ndarray | None = None) -> Schedule:
    """Blocks 0..r-1 are the input blocks (block j for rank j); block r+s receives from rank s."""
    seg = segment_sizes(n, ranks)
    sizes = np.concatenate([np.broadcast_to(seg, (ranks, ranks)),
                            np.broadcast_to(seg[:, None], (ranks, ranks))], axis=1)
    table = RegionTable(sizes[:1])
    first = table.add(np.ones(2 * ranks, dtype=np.int64), np.arange(2 * ranks))
    inputs = table.add_one(np.arange(ranks))
    outputs = table.add_one(np.arange(ranks, 2 * ranks))
    src_all = np.arange(ranks)
    local = Step(src_all, src_all, first + src_all, first + ranks + src_all, seg.copy(), False)
    if algorithm == "mesh":
        src = np.repeat(src_all, ranks)
        dst = np.tile(src_all, ranks)
        keep = src != dst
        src, dst = src[keep], dst[keep]
        steps = [_concat(local, Step(src, dst, first + dst, first + ranks + src, seg[dst], False))]
    else:
        pos = np.arange(ranks) if ring_positions is None else np.asarray(ring_positions)
        rank_at = np.empty(ranks, dtype=np.int64)
        rank_at[pos] = np.arange(ranks)
        steps = [local]
        for k in range(1, ranks):
            dst = rank_at[(pos + k) % ranks]
            steps.append(Step(src_all, dst, first + dst, first + ranks + src_all, seg[dst], False))
    ptr, blocks = table.csr()
    return Schedule(op="all_to_all", algorithm=algorithm, ranks=ranks, count=int(n),
                    block_sizes=sizes, region_ptr=ptr, region_blocks=blocks,
                    input_region=np.full(ranks, inputs), output_region=np.full(ranks, outputs),
                    steps=tuple(steps))


def point_to_point_schedule(op: str, n: int, ranks: int,
                            pairs: Sequence[tuple[int, int]]) -> Schedule:
    """Block 0 is the input, block 1 the output; one step with one transfer per pair."""
    table = RegionTable(np.array([[n, n]]))
    table.add(np.ones(2, dtype=np.int64), np.arange(2))
    src = np.array([s for s, _ in pairs], dtype=np.int64)
    dst = np.array([d for _, d in pairs], dtype=np.int64)
    step = Step(src, dst, np.zeros(len(src), dtype=np.int64), np.ones(len(src), dtype=np.int64),
                np.full(len(src), n, dtype=np.int64), False)
    ptr, blocks = table.csr()
    return Schedule(op=op, algorithm="mesh", ranks=ranks, count=int(n),
                    block_sizes=table.block_sizes, region_ptr=ptr, region_blocks=blocks,
                    input_region=np.zeros(ranks, dtype=np.int64),
                    output_region=np.ones(ranks, dtype=np.int64),
                    steps=(step,) if len(src) else ())


def _concat(a: Step, b: Step) -> Step:
    return Step(*(np.concatenate([getattr(a, f), getattr(b, f)])
                  for f in ("src", "dst", "src_region", "dst_region", "count")), reduce=False)
