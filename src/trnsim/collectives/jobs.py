"""Turning a `Collective` request into a `Job`: validated sizes, ranks, algorithm and schedule."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from trnsim.collectives import algorithms, chooser
from trnsim.collectives.functional import check_inputs
from trnsim.collectives.ops import (
    POINT_TO_POINT,
    REDUCTIONS,
    canonical_op,
    check_pairs,
    default_pairs,
)
from trnsim.collectives.placement import Machine
from trnsim.collectives.records import Collective, TimelineEvent
from trnsim.collectives.schedule import Schedule
from trnsim.errors import InvalidArgumentError, LimitExceededError, UnsupportedError
from trnsim.numerics import DType, dtype


@dataclass(eq=False)
class Job:
    """A prepared collective plus its progress through the fabric."""

    ticket: int
    request: Collective
    op: str
    dt: DType
    nbytes: int
    count: int
    cores: np.ndarray  # endpoint of each rank
    schedule: Schedule
    cc_need: dict[int, int]  # global chip -> CC-cores held while running
    issue_ns: float = 0.0
    start_ns: float | None = None
    end_ns: float | None = None
    step: int = 0
    state: str = "pending"  # pending -> (latency -> flowing) per step -> closing -> done
    inject_at: float = 0.0
    step_begin: float = 0.0
    step_routes: np.ndarray | None = None
    step_bytes: np.ndarray | None = None
    active_flows: int = 0
    events: list[TimelineEvent] = field(default_factory=list)

    @cached_property
    def endpoint_set(self) -> frozenset[int]:
        return frozenset(self.cores.tolist())


def prepare(ticket: int, request: Collective, machine: Machine) -> Job:
    """Validate `request` against `machine` and build its schedule (module docstrings of ops,
    placement, chooser and algorithms say what each check enforces)."""
    op = canonical_op(request.op)
    dt = dtype(request.dtype)
    if dt.packed > 1:
        raise UnsupportedError(f"collectives move whole elements; {dt.name} packs {dt.packed} "
                               "per item")
    if request.reduction not in REDUCTIONS:
        raise InvalidArgumentError(f"reduction {request.reduction!r} is not one of "
                                   f"{', '.join(REDUCTIONS)}")
    cores = _cores(request, machine)
    count = _count(op, request, dt, len(cores))
    pairs = ()
    if op in POINT_TO_POINT:
        given = request.pairs if request.pairs is not None else default_pairs(len(cores))
        pairs = check_pairs(op, given, len(cores))
    nbytes = count * dt.itemsize
    name, levels = _algorithm(op, request.algorithm, nbytes, machine, cores)
    schedule = algorithms.build(op, name, count, machine, cores, pairs, levels)
    if request.inputs is not None:
        check_inputs(schedule, request.inputs, dt)
    return Job(ticket, request, op, dt, nbytes, count, np.asarray(cores, dtype=np.int64),
               schedule, _cc_need(machine, cores))


def _cores(request: Collective, machine: Machine) -> tuple[int, ...]:
    ranks = request.ranks
    if ranks is None:
        if request.inputs is None:
            raise InvalidArgumentError("a collective needs ranks (a count or NeuronCore indices) "
                                       "or one input array per rank")
        ranks = len(request.inputs)
    if isinstance(ranks, int | np.integer):
        return machine.place(int(ranks))
    return machine.check_cores(ranks)


def _count(op: str, request: Collective, dt: DType, ranks: int) -> int:
    """Elements n of the operation, from nbytes or from the inputs (which must agree)."""
    from_inputs = None
    if request.inputs is not None:
        lengths = [int(np.asarray(x).size) for x in request.inputs]
        from_inputs = sum(lengths) if op == "all_gather" else (lengths[0] if lengths else 0)
    if request.nbytes is None:
        if from_inputs is None:
            raise InvalidArgumentError(f"{op}: give nbytes or inputs")
        return from_inputs
    nbytes = int(request.nbytes)
    if nbytes < 0:
        raise InvalidArgumentError(f"{op}: size {nbytes} bytes is negative")
    if nbytes % dt.itemsize:
        raise InvalidArgumentError(f"{op}: size {nbytes} bytes is not a whole number of "
                                   f"{dt.name} elements ({dt.itemsize} bytes each)")
    count = nbytes // dt.itemsize
    if from_inputs is not None and from_inputs != count:
        raise InvalidArgumentError(f"{op}: inputs hold {from_inputs} elements but nbytes "
                                   f"{nbytes} means {count}")
    return count


def _algorithm(op: str, forced: str | None, nbytes: int, machine: Machine,
               cores: Sequence[int]) -> tuple[str, tuple[str, str] | None]:
    if forced is None:
        choice = chooser.choose(op, nbytes, machine, cores)
        return choice.algorithm, choice.levels
    name = algorithms.check_algorithm(op, forced)
    return name, chooser.hier_levels(nbytes, machine, cores) if name == "hier" else None


def _cc_need(machine: Machine, cores: Sequence[int]) -> dict[int, int]:
    chips, per_chip = np.unique(machine.global_chip(np.asarray(cores)), return_counts=True)
    have = machine.instance.chip.cc_cores or 0
    need = {int(c): int(n) * machine.fabric.cc_cores_per_rank for c, n in zip(chips, per_chip,
                                                                               strict=True)}
    worst = max(need.values())
    if worst > have:
        raise LimitExceededError("CC-cores needed on one chip", worst, have,
                                 context=f"{machine.instance.chip.name}: "
                                         f"{machine.fabric.cc_cores_per_rank} per rank")
    return need
