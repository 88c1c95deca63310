"""The functional executor: runs a `Schedule` on numpy arrays and returns what each rank holds.

It is the executable meaning of a schedule (see `schedule.py` for the step semantics): a step's
transfers read the buffers as they were when the step began, then apply in array order, each
reduction through `ops.reduce_pair` (fp32 arithmetic, cast back to the buffer's dtype per
transfer). Same schedule and inputs, same bits.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trnsim.collectives.ops import input_count, reduce_pair
from trnsim.collectives.schedule import Schedule
from trnsim.errors import InvalidArgumentError
from trnsim.numerics import DType, cast, dtype


def execute(schedule: Schedule, inputs: Sequence[np.ndarray], dt: DType | str,
            reduction: str = "sum") -> list[np.ndarray]:
    """Each rank's output after running every step of `schedule` on `inputs`."""
    dt = dtype(dt)
    arrays = check_inputs(schedule, inputs, dt)
    index: dict[tuple[int, int], np.ndarray] = {}

    def where(rank: int, region: int) -> np.ndarray:
        key = (rank if len(schedule.block_sizes) > 1 else 0, int(region))
        if key not in index:
            index[key] = schedule.region_indices(rank, int(region))
        return index[key]

    work = [np.zeros(schedule.buffer_elems(r), dtype=dt.np_dtype) for r in range(schedule.ranks)]
    for r, x in enumerate(arrays):
        work[r][where(r, schedule.input_region[r])] = x
    for step in schedule.steps:
        payloads = [work[s][where(s, region)] for s, region in zip(step.src, step.src_region,
                                                                      strict=True)]
        for d, region, payload in zip(step.dst, step.dst_region, payloads, strict=True):
            target = where(d, region)
            if step.reduce:
                work[d][target] = reduce_pair(work[d][target], payload, dt, reduction)
            else:
                work[d][target] = payload
    return [work[r][where(r, schedule.output_region[r])] for r in range(schedule.ranks)]


def check_inputs(schedule: Schedule, inputs: Sequence[np.ndarray], dt: DType) -> list[np.ndarray]:
    """One 1-D array per rank, of the operation's input length, stored in `dt`."""
    if len(inputs) != schedule.ranks:
        raise InvalidArgumentError(f"{schedule.op}: {len(inputs)} input arrays for "
                                   f"{schedule.ranks} ranks")
    out = []
    for r, x in enumerate(inputs):
        x = np.asarray(x).reshape(-1)
        want = input_count(schedule.op, schedule.count, schedule.ranks, r)
        if len(x) != want:
            raise InvalidArgumentError(f"{schedule.op}: rank {r} input has {len(x)} elements, "
                                       f"expected {want}")
        if x.dtype != dt.np_dtype:
            raise InvalidArgumentError(f"{schedule.op}: rank {r} input is {x.dtype}, the "
                                       f"collective's dtype {dt.name} is stored as {dt.np_dtype}")
        out.append(x)
    return out


def make_inputs(op: str, count: int, ranks: int, dt: DType | str, seed: int = 0,
                pattern: str = "random") -> list[np.ndarray]:
    """Deterministic test data: `pattern` "random" (floats in [-1, 1), small integers) or
    "all_ones" (nccom-test's --check modes)."""
    dt = dtype(dt)
    rng = np.random.default_rng(seed)
    out = []
    for r in range(ranks):
        length = input_count(op, count, ranks, r)
        if pattern == "all_ones":
            values = np.ones(length, dtype=np.float32)
        elif dt.is_float:
            values = rng.uniform(-1.0, 1.0, length).astype(np.float32)
        else:
            values = rng.integers(0, 100, length)
        out.append(cast(values, dt, rounding="rne"))
    return out
