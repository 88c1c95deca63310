"""Collectives: the interconnect fabric and the collective algorithms, on arrays and in time.

Three pieces behind small interfaces (STYLE.md, item 8):

- topology — `trnsim.hardware` (chip graphs, link bandwidths) and `trnsim.hardware.fabric`
  (latencies, per-core collective bandwidth, CC-cores: the one home of those constants);
- network model — `network.Network`: routes between NeuronCores and max-min fair sharing of
  links, ports and EFA interfaces among concurrent flows;
- algorithms — `algorithms.build` makes a `schedule.Schedule` (steps of transfers) that
  `functional.execute` runs on numpy arrays and `engine.Fabric` times on the network.

Public surface:

- ``simulate(op, sizes, ranks, instance, nodes, dtype, algorithm=None, inputs=None)`` ->
  ``(results, timeline)``: one `CollectiveResult` per size, run back to back on one clock.
- ``Fabric(instance, nodes)``: ``issue(Collective, at_ns) -> Ticket``, ``wait(ticket) ->
  CollectiveResult`` (``end_ns``, per-rank ``outputs``, step ``events``), ``run(...)``; for
  lockstep co-simulation ``next_event_ns()``, ``advance_to(t_ns)`` and ``result(ticket)``. This is
  how a multi-core simulation issues a collective when its cores reach it and waits for it.
- ``choose(op, nbytes, machine, cores)``: the runtime's algorithm choice (`chooser`).
- ``OPS``, ``ALGORITHMS``, ``bus_factor(op, ranks)``, ``reference(op, inputs)``.

Ranks are logical NeuronCores placed as `placement` documents; sizes are nccom-test's size(B)
(`ops`); times are ns.
"""

from trnsim.collectives.algorithms import ALGORITHMS, SUPPORTED
from trnsim.collectives.api import iteration_time_ns, simulate
from trnsim.collectives.chooser import Choice, choose
from trnsim.collectives.engine import Fabric
from trnsim.collectives.functional import execute, make_inputs
from trnsim.collectives.ops import NCCOM_NAMES, OPS, bus_factor, canonical_op, reference
from trnsim.collectives.placement import Machine
from trnsim.collectives.records import (
    Collective,
    CollectiveResult,
    Ticket,
    Timeline,
    TimelineEvent,
)
from trnsim.collectives.schedule import Schedule, Step

__all__ = [
    "ALGORITHMS",
    "NCCOM_NAMES",
    "OPS",
    "SUPPORTED",
    "Choice",
    "Collective",
    "CollectiveResult",
    "Fabric",
    "Machine",
    "Schedule",
    "Step",
    "Ticket",
    "Timeline",
    "TimelineEvent",
    "bus_factor",
    "canonical_op",
    "choose",
    "execute",
    "iteration_time_ns",
    "make_inputs",
    "reference",
    "simulate",
]
