"""The data side of a collective rendezvous: each rank's input as one flat array, and each rank's
result written back into its destination tensors.

A rank's input is its source tensors' elements concatenated in order (coalesced collectives).
For all_gather / reduce_scatter / all_to_all along a dimension other than 0, the collective
dimension is first moved to the front, so that "concatenate along dim d" and "split along dim d"
become contiguous chunks of the flat buffer, as the fabric's algorithms treat them; results are
moved back. The fabric's functional executor (or, for a single rank, the op's definition)
computes the results.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trnsim.errors import InvalidArgumentError
from trnsim.isa import CollectiveOp
from trnsim.numerics import DType

_SPLITTING = ("all_gather", "reduce_scatter", "all_to_all")


@dataclass
class RankInputs:
    arrays: list[np.ndarray] | None  # one flat array per rank (None in timing-only runs)
    count: int  # elements of one rank's input
    dtype: DType


def rank_arrivals(rendezvous) -> dict[int, list]:
    """Arrivals grouped by rank, each rank's physical cores in lnc order."""
    by_rank: dict[int, list] = {}
    for arrival in rendezvous.arrivals.values():
        by_rank.setdefault(arrival.run.slot.rank, []).append(arrival)
    for arrivals in by_rank.values():
        arrivals.sort(key=lambda a: a.run.slot.lnc_index)
    return by_rank


def _moved(ins: CollectiveOp, shape: tuple[int, ...]) -> bool:
    return ins.op in _SPLITTING and ins.dim != 0 and len(shape) > 1


def _flatten(ins: CollectiveOp, values: list[np.ndarray]) -> np.ndarray:
    if len(values) == 1 and _moved(ins, ins.src_shape):
        return np.moveaxis(values[0].reshape(ins.src_shape), ins.dim, 0).reshape(-1)
    return np.concatenate([v.reshape(-1) for v in values])


def gather_inputs(by_rank: dict[int, list], ranks: list[int]) -> RankInputs:
    """Check the ranks agree on the collective, and read each rank's input (first core)."""
    first = by_rank[ranks[0]][0].instruction
    for rank in ranks:
        for arrival in by_rank[rank]:
            ins = arrival.instruction
            if (ins.op, ins.reduction, ins.dim, [s.num_elements for s in ins.srcs]) != (
                    first.op, first.reduction, first.dim, [s.num_elements for s in first.srcs]):
                ins.fail(InvalidArgumentError(
                    f"{ins.name}: rank {rank} calls {ins.op} with {[list(s.shape) for s in ins.srcs]}"
                    f" but rank {ranks[0]} calls {first.op} with "
                    f"{[list(s.shape) for s in first.srcs]}; every rank of a replica group must "
                    f"issue the same collective"))
    count = sum(ap.num_elements for ap in first.srcs)
    dtype = first.srcs[0].dtype
    state = by_rank[ranks[0]][0].run.state
    if state is None:
        return RankInputs(None, count, dtype)
    arrays = []
    for rank in ranks:
        arrival = by_rank[rank][0]
        ins = arrival.instruction
        arrays.append(_flatten(ins, [np.array(arrival.run.state.read(ap)) for ap in ins.srcs]))
    return RankInputs(arrays, count, dtype)


def local_outputs(ins: CollectiveOp, inputs: RankInputs) -> list[np.ndarray]:
    """A one-rank collective: every op returns its input (permute without a self-pair: zeros)."""
    data = inputs.arrays[0]
    if ins.op == "permute" and (0, 0) not in [tuple(p) for p in ins.pairs] and ins.pairs:
        return [np.zeros_like(data)]
    return [data.copy()]


def scatter_outputs(by_rank: dict[int, list], ranks: list[int], inputs: RankInputs,
                    outputs: list[np.ndarray]) -> None:
    """Write rank r's result into the destinations of every physical core of rank r."""
    for rank, result in zip(ranks, outputs, strict=True):
        for arrival in by_rank[rank]:
            ins, state = arrival.instruction, arrival.run.state
            flat = np.asarray(result).reshape(-1)
            total = sum(ap.num_elements for ap in ins.dsts)
            if flat.size != total:
                ins.fail(InvalidArgumentError(
                    f"{ins.name}: {ins.op} gives rank {rank} {flat.size} elements but its "
                    f"destinations hold {total}"))
            if len(ins.dsts) == 1 and _moved(ins, ins.dst_shape):
                moved = list(ins.dst_shape)
                moved.insert(0, moved.pop(ins.dim))
                flat = np.moveaxis(flat.reshape(moved), 0, ins.dim).reshape(-1)
            start = 0
            for ap in ins.dsts:
                state.write(ap, flat[start:start + ap.num_elements].reshape(ap.shape))
                start += ap.num_elements
