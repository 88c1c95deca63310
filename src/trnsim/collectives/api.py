"""`simulate`: one call from an operation and its sizes to results and a timeline; and the
steady-state time per iteration nccom-test reports."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from trnsim.collectives.engine import Fabric
from trnsim.collectives.records import Collective, CollectiveResult, Timeline
from trnsim.errors import InvalidArgumentError
from trnsim.hardware import InstanceSpec


def simulate(op: str, sizes: int | Sequence[int] | None = None,
             ranks: int | Sequence[int] | None = None,
             instance: InstanceSpec | str = "trn1.32xlarge", nodes: int = 1,
             dtype: Any = "float32", algorithm: str | None = None, *,
             inputs: Sequence[np.ndarray] | None = None, lnc: int | None = None,
             reduction: str = "sum", pairs: Sequence[tuple[int, int]] | None = None,
             ) -> tuple[list[CollectiveResult], Timeline]:
    """Run `op` once per size (bytes, nccom-test's size(B)) on `ranks` ranks of `nodes` x
    `instance`, each on an otherwise idle fabric, one after another on one clock.

    Timing only unless `inputs` (one array per rank) are given; then `sizes` may be None and
    the single result carries every rank's output. `algorithm` forces one of
    `trnsim.collectives.ALGORITHMS`; None lets the chooser pick per size. Returns one
    `CollectiveResult` per size and the `Timeline` of all of them.
    """
    base = Fabric(instance, nodes, lnc)
    if inputs is not None:
        size_list: list[int | None] = [None if sizes is None else _single(sizes)]
    else:
        size_list = [int(sizes)] if isinstance(sizes, int | np.integer) else list(sizes or [])
    timeline = Timeline()
    results = []
    clock = 0.0
    for size in size_list:
        fabric = base.idle_copy(first_ticket=len(results))
        request = Collective(op, size, dtype, ranks, algorithm, inputs, pairs, reduction)
        result = fabric.run(request, clock)
        results.append(result)
        timeline.extend(fabric.timeline)
        clock = result.end_ns
    return results, timeline


def iteration_time_ns(fabric: Fabric, request: Collective) -> tuple[float, CollectiveResult]:
    """nccom-test's per-iteration time: the same collective issued again as soon as the previous
    one ends, on an idle fabric. The simulation is deterministic, so the second iteration is the
    steady state (avg = p50 = p99 over any number of iterations)."""
    fabric = fabric.idle_copy()
    first = fabric.run(request, 0.0)
    second = fabric.run(request, first.end_ns)
    return second.end_ns - first.end_ns, second


def _single(sizes: int | Sequence[int]) -> int:
    if isinstance(sizes, int | np.integer):
        return int(sizes)
    values = list(sizes)
    if len(values) != 1:
        raise InvalidArgumentError("with inputs, give one size (or none)")
    return int(values[0])
