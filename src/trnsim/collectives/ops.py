"""The collective operations: names, buffer sizes, bus-bandwidth factors and numpy references.

Sizes follow nccom-test: ``size(B)`` is one buffer of the operation, ``count`` its elements.

==============  ==========================  ===========================================
op              input of rank i             output of rank i
==============  ==========================  ===========================================
all_reduce      n elements                  n: the element-wise reduction over ranks
all_gather      segment i of n              n: every rank's segment, in rank order
reduce_scatter  n elements                  segment i of the reduction
all_to_all      n = r blocks (block j       r blocks: block i of every rank, in rank order
                for rank j)
permute         n elements                  n: the buffer of the rank that sends to i
sendrecv        n elements                  n: the buffer of the rank that sends to i
==============  ==========================  ===========================================

Segments and blocks split n elements as ``numpy.array_split`` does: the first ``n % r`` get one
element more, so any n works for any rank count. For all_to_all that makes rank i's output
``r * len(block i)`` elements. permute and sendrecv take source -> target pairs; by default each
rank sends to the next (rank + 1 mod r), the only pattern the Neuron runtime's permute supports;
sendrecv also accepts any partial pairing. A rank nothing is sent to ends with zeros.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trnsim.errors import InvalidArgumentError, UnknownNameError
from trnsim.numerics import DType, cast, to_compute

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "permute", "sendrecv")
NCCOM_NAMES = {"all_reduce": "allr", "all_gather": "allg", "reduce_scatter": "redsct",
               "all_to_all": "alltoall", "permute": "permute", "sendrecv": "sendrecv"}
_ALIASES = {alias: op for op, short in NCCOM_NAMES.items() for alias in (op, short)}
_ALIASES.update({"allreduce": "all_reduce", "allgather": "all_gather",
                 "reducescatter": "reduce_scatter", "all2all": "all_to_all",
                 "send_recv": "sendrecv"})
REDUCTIONS = ("sum", "max", "min")
POINT_TO_POINT = frozenset({"permute", "sendrecv"})


def canonical_op(name: str) -> str:
    """'allr', 'all-reduce', 'all_reduce' -> 'all_reduce'; unknown names raise with suggestions."""
    key = str(name).strip().lower().replace("-", "_")
    if key in _ALIASES:
        return _ALIASES[key]
    raise UnknownNameError("collective operation", name, sorted(set(NCCOM_NAMES.values()) | set(OPS)))


def bus_factor(op: str, ranks: int) -> float:
    """nccom-test's busbw / algbw: 2(r-1)/r all-reduce; (r-1)/r gather, scatter, all-to-all; 1 p2p."""
    op = canonical_op(op)
    if op in POINT_TO_POINT:
        return 1.0
    if op == "all_reduce":
        return 2.0 * (ranks - 1) / ranks
    return (ranks - 1) / ranks


def segment_sizes(n: int, parts: int) -> np.ndarray:
    """Element counts of `parts` segments of n elements, as numpy.array_split makes them."""
    base, extra = divmod(int(n), int(parts))
    sizes = np.full(parts, base, dtype=np.int64)
    sizes[:extra] += 1
    return sizes


def input_count(op: str, n: int, ranks: int, rank: int) -> int:
    return int(segment_sizes(n, ranks)[rank]) if op == "all_gather" else int(n)


def default_pairs(ranks: int) -> tuple[tuple[int, int], ...]:
    """Each rank sends to the next one around the rank ring (Neuron's circular permute)."""
    return tuple((i, (i + 1) % ranks) for i in range(ranks)) if ranks > 1 else ()


def check_pairs(op: str, pairs: Sequence[tuple[int, int]], ranks: int) -> tuple[tuple[int, int], ...]:
    """Validate source -> target pairs: ranks in range; for permute, each rank sends and receives
    at most once (a permutation); for sendrecv a target still receives from one source only."""
    out = tuple((int(s), int(d)) for s, d in pairs)
    for s, d in out:
        if not (0 <= s < ranks and 0 <= d < ranks):
            raise InvalidArgumentError(f"{op}: pair ({s}, {d}) names a rank outside 0..{ranks - 1}")
    targets = [d for _, d in out]
    if len(set(targets)) != len(targets):
        raise InvalidArgumentError(f"{op}: a rank receives from more than one source in {out}")
    sources = [s for s, _ in out]
    if op == "permute" and len(set(sources)) != len(sources):
        raise InvalidArgumentError(f"permute: a rank sends to more than one target in {out}")
    return out


def reduce_pair(acc: np.ndarray, incoming: np.ndarray, dt: DType, reduction: str) -> np.ndarray:
    """One reduction the CC hardware performs: floats in fp32, the result cast back to the buffer
    dtype (RNE, or SR if NEURON_RT_STOCHASTIC_ROUNDING_EN is set) — partial results travel between
    ranks in the buffer's own dtype, so every hop rounds. Integers wrap around in their own width
    (ASSUMPTION: a two's-complement adder); bool sums are logical OR."""
    if dt.is_bool:
        combine = {"sum": np.logical_or, "max": np.logical_or, "min": np.logical_and}[reduction]
        return combine(acc, incoming)
    ufunc = {"sum": np.add, "max": np.maximum, "min": np.minimum}[reduction]
    if dt.is_float:
        return cast(ufunc(to_compute(acc, dt), to_compute(incoming, dt)), dt)
    return ufunc(acc, incoming).astype(dt.np_dtype, copy=False)


def reference(op: str, inputs: Sequence[np.ndarray], reduction: str = "sum",
              pairs: Sequence[tuple[int, int]] | None = None) -> list[np.ndarray]:
    """What each rank should end with, computed directly with numpy (float64 for float sums)."""
    op = canonical_op(op)
    r = len(inputs)
    if op in POINT_TO_POINT:
        pairs = default_pairs(r) if pairs is None else pairs
        out = [np.zeros_like(x) for x in inputs]
        for s, d in pairs:
            out[d] = inputs[s].copy()
        return out
    if op == "all_gather":
        full = np.concatenate(inputs)
        return [full.copy() for _ in range(r)]
    if op == "all_to_all":
        bounds = np.concatenate([[0], np.cumsum(segment_sizes(len(inputs[0]), r))])
        return [np.concatenate([x[bounds[i]:bounds[i + 1]] for x in inputs]) for i in range(r)]
    total = _reduce_all(np.stack(inputs), reduction)
    if op == "all_reduce":
        return [total.copy() for _ in range(r)]
    bounds = np.concatenate([[0], np.cumsum(segment_sizes(len(total), r))])
    return [total[bounds[i]:bounds[i + 1]].copy() for i in range(r)]


def _reduce_all(stacked: np.ndarray, reduction: str) -> np.ndarray:
    dtype = stacked.dtype
    if dtype == np.bool_:
        return stacked.any(axis=0) if reduction != "min" else stacked.all(axis=0)
    if reduction == "max":
        return stacked.max(axis=0)
    if reduction == "min":
        return stacked.min(axis=0)
    if dtype.kind in "iu":
        return stacked.sum(axis=0, dtype=dtype)  # wraps, like the hardware model
    return stacked.astype(np.float64).sum(axis=0)
