"""`Fabric`: issue collectives at times on N instances, wait for them, read their timelines.

The timing model, event by event:

1. `issue(collective, at_ns)` queues the collective. The CC-cores admit it once (a) every
   collective issued earlier on any of its NeuronCores has been admitted (each core's collectives
   run in issue order), (b) each chip it uses has `cc_cores_per_rank` free CC-cores per rank of it
   there — a chip runs no more concurrent collective streams than it has CC-cores — and (c) each
   of its cores admitted its previous collective at least `issue_interval_ns` ago
   (`copy_issue_interval_ns` for a collective that does not reduce: `FabricSpec.interval_ns`).
2. `launch_latency_ns` (`copy_launch_latency_ns`) after admission the first step begins. A
   step first waits its latency — `hop_latency_ns`, or `efa_latency_ns` if any of its transfers
   crosses nodes — then puts one flow per transfer on the network; the step ends when its last
   flow has arrived, and the next step begins (the algorithm's steps are synchronous). The
   collective ends with its last step.
3. Flows of every running collective share the network max-min fairly (`network.py`); rates are
   recomputed whenever a flow starts or ends, so concurrent collectives slow each other exactly
   where their routes overlap.

All of this reads only the schedule's integers, never data: timing-only runs allocate nothing
sized by the message. A functional run (inputs given) also executes the schedule on the arrays.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from trnsim import hardware
from trnsim.collectives.functional import execute
from trnsim.collectives.jobs import Job, prepare
from trnsim.collectives.network import Network
from trnsim.collectives.placement import Machine
from trnsim.collectives.records import Collective, CollectiveResult, Ticket, Timeline, TimelineEvent
from trnsim.errors import InvalidArgumentError
from trnsim.hardware import InstanceSpec

_EMPTY_I = np.zeros(0, dtype=np.int64)
_EMPTY_F = np.zeros(0, dtype=np.float64)


class Fabric:
    """N instances' NeuronCores, links and CC-cores, with a clock (ns) that only moves forward.

    For a multi-core simulator: ``t = fabric.issue(Collective(...), at_ns)`` when a core reaches
    the collective, then either ``fabric.wait(t)`` for its `CollectiveResult` (``end_ns``,
    per-rank ``outputs``, step ``events``) — which advances the clock, so issue everything that
    may overlap first — or step in lockstep: ``fabric.advance_to(min(own_next_event,
    fabric.next_event_ns()))`` and poll ``fabric.result(t)``. Nothing can be issued in the past.
    """

    def __init__(self, instance: InstanceSpec | str = "trn1.32xlarge", nodes: int = 1,
                 lnc: int | None = None, *, network: Network | None = None,
                 first_ticket: int = 0) -> None:
        spec = instance if isinstance(instance, InstanceSpec) else hardware.instance(instance)
        self.machine = network.machine if network is not None else Machine.build(spec, nodes, lnc)
        self.network = network or Network(self.machine)
        self.spec = self.machine.fabric
        self.now_ns = 0.0
        self.timeline = Timeline()
        self._first_ticket = first_ticket
        self._jobs: list[Job] = []
        self._pending: list[Job] = []
        self._running: list[Job] = []
        self._results: dict[int, CollectiveResult] = {}
        chips = self.machine.nodes * self.machine.chips_per_node
        self._cc_free = np.full(chips, self.machine.instance.chip.cc_cores or 0, dtype=np.int64)
        self._last_start = np.full(self.machine.endpoints, -math.inf)
        self._flow_route, self._flow_left, self._flow_job = _EMPTY_I, _EMPTY_F, _EMPTY_I
        self._rates: np.ndarray | None = None

    def idle_copy(self, first_ticket: int = 0) -> Fabric:
        """A fresh fabric on the same machine, sharing this one's routes and cached rates; its
        tickets count from `first_ticket` (so timelines of several fabrics can be merged)."""
        return Fabric(self.machine.instance, network=self.network, first_ticket=first_ticket)

    def cores(self, ranks: int) -> tuple[int, ...]:
        """The default placement of `ranks` ranks (`Machine.place`)."""
        return self.machine.place(ranks)

    # --- the API ------------------------------------------------------------------------------
    def issue(self, collective: Collective, at_ns: float | None = None) -> Ticket:
        at = self.now_ns if at_ns is None else float(at_ns)
        if at < self.now_ns:
            raise InvalidArgumentError(f"cannot issue a collective at {at} ns: the fabric's clock "
                                       f"is already at {self.now_ns} ns")
        job = prepare(self._first_ticket + len(self._jobs), collective, self.machine)
        job.issue_ns = at
        self._jobs.append(job)
        self._pending.append(job)
        return Ticket(job.ticket)

    def wait(self, ticket: Ticket) -> CollectiveResult:
        """Simulate until the ticket's collective has finished; its result."""
        if not 0 <= ticket.id - self._first_ticket < len(self._jobs):
            raise InvalidArgumentError(f"unknown ticket {ticket.id}")
        self._advance(lambda: ticket.id in self._results)
        return self._results[ticket.id]

    def run(self, collective: Collective, start_ns: float | None = None) -> CollectiveResult:
        return self.wait(self.issue(collective, start_ns))

    def result(self, ticket: Ticket) -> CollectiveResult | None:
        """The result if the collective has finished by `now_ns`, else None (never advances)."""
        return self._results.get(ticket.id)

    def next_event_ns(self) -> float:
        """When the fabric next changes state (a step, flow, admission or completion), or inf if
        idle: a simulator stepping cores and fabric in time order advances to the earlier of this
        and its own next event."""
        finish = self._flow_left / self._current_rates() if len(self._flow_left) else None
        return min(self._next_inject(), self._next_admission(),
                   self.now_ns + float(finish.min()) if finish is not None else math.inf)

    def advance_to(self, t_ns: float) -> None:
        """Simulate every event up to `t_ns` and move the clock there."""
        if t_ns < self.now_ns:
            raise InvalidArgumentError(f"cannot advance to {t_ns} ns: the fabric's clock is "
                                       f"already at {self.now_ns} ns")
        self._advance(lambda: False, until_ns=float(t_ns))

    def run_together(self, collectives: Sequence[Collective],
                     start_ns: float | None = None) -> list[CollectiveResult]:
        """Issue all at the same time, then wait for all (they share the fabric)."""
        tickets = [self.issue(c, start_ns) for c in collectives]
        return [self.wait(t) for t in tickets]

    # --- the event loop ---------------------------------------------------------------------
    def _advance(self, done: Callable[[], bool], until_ns: float = math.inf) -> None:
        """Process events in time order until `done()` or the clock would pass `until_ns`."""
        self._settle()
        while not done():
            finish = self._flow_left / self._current_rates() if len(self._flow_left) else None
            t_flow = self.now_ns + float(finish.min()) if finish is not None else math.inf
            t = min(self._next_inject(), self._next_admission(), t_flow)
            if t > until_ns:
                t = until_ns
            if t == math.inf:
                raise RuntimeError("collectives fabric stalled: nothing running or admissible")
            if finish is not None:
                self._progress(t - self.now_ns, finish)
            self.now_ns = t
            self._settle()
            if t == until_ns:
                return

    def _next_inject(self) -> float:
        return min((j.inject_at for j in self._running if j.state in ("latency", "closing")),
                   default=math.inf)

    def _progress(self, dt: float, finish: np.ndarray) -> None:
        arrived = finish <= dt * (1 + 1e-9) + 1e-6
        self._flow_left = self._flow_left - self._current_rates() * dt
        if arrived.any():
            for job_index, n in zip(*np.unique(self._flow_job[arrived], return_counts=True),
                                    strict=True):
                self._jobs[int(job_index) - self._first_ticket].active_flows -= int(n)
            keep = ~arrived
            self._flow_route = self._flow_route[keep]
            self._flow_left = self._flow_left[keep]
            self._flow_job = self._flow_job[keep]
            self._rates = None

    def _settle(self) -> None:
        """Apply everything due at `now`: finished steps, admissions, injections."""
        changed = True
        while changed:
            changed = False
            for job in list(self._running):
                if job.state == "flowing" and job.active_flows == 0:
                    self._end_step(job)
                    changed = True
                elif job.state == "latency" and job.inject_at <= self.now_ns:
                    self._inject(job)
                    changed = True
                elif job.state == "closing" and job.inject_at <= self.now_ns:
                    self._finish(job, job.inject_at)
                    changed = True
            changed |= self._admit_ready()

    def _current_rates(self) -> np.ndarray:
        if self._rates is None:
            self._rates = self.network.rates(self._flow_route)
        return self._rates

    # --- admission ----------------------------------------------------------------------------
    def _admissible_at(self, job: Job) -> float | None:
        """When `job` can be admitted, or None while an earlier job or busy CC-cores block it."""
        mine = job.endpoint_set
        for other in self._pending:
            if other is job:
                break
            if other.endpoint_set & mine:
                return None
        if any(self._cc_free[chip] < need for chip, need in job.cc_need.items()):
            return None
        last = float(self._last_start[job.cores].max())
        return max(job.issue_ns, last + self.spec.interval_ns(job.op))

    def _next_admission(self) -> float:
        times = [self._admissible_at(j) for j in self._pending]
        return min((t for t in times if t is not None), default=math.inf)

    def _admit_ready(self) -> bool:
        admitted = False
        for job in list(self._pending):
            at = self._admissible_at(job)
            if at is None or at > self.now_ns:
                continue
            self._pending.remove(job)
            self._running.append(job)
            for chip, need in job.cc_need.items():
                self._cc_free[chip] -= need
            self._last_start[job.cores] = self.now_ns
            job.start_ns = self.now_ns
            if job.start_ns > job.issue_ns:
                self._record(job, "queued", "waiting for CC-cores", job.issue_ns, job.start_ns)
            self._begin_step(job, self.now_ns + self.spec.launch_ns(job.op))
            admitted = True
        return admitted

    # --- steps ---------------------------------------------------------------------------------
    def _begin_step(self, job: Job, at: float) -> None:
        job.step_begin = at
        steps = job.schedule.steps
        if job.step == len(steps):
            job.state, job.inject_at = "closing", at
            return
        step = steps[job.step]
        if step.fused:  # rides on its neighbour's DMAs: no latency, no flows
            job.step_routes, job.step_bytes = _EMPTY_I, _EMPTY_F
            job.inject_at, job.state = at, "latency"
            return
        src, dst = job.cores[step.src], job.cores[step.dst]
        remote = src != dst
        nbytes = step.count[remote] * job.dt.itemsize
        routes = self.network.route_ids(src[remote], dst[remote]) if remote.any() else _EMPTY_I
        latency = float(self.network.latency_ns(routes).max()) if len(routes) else 0.0
        moving = nbytes > 0
        job.step_routes = routes[moving]
        job.step_bytes = nbytes[moving].astype(np.float64)
        job.inject_at = at + latency
        job.state = "latency"

    def _inject(self, job: Job) -> None:
        count = len(job.step_routes)
        job.state = "flowing"
        job.active_flows = count
        if count:
            self._flow_route = np.concatenate([self._flow_route, job.step_routes])
            self._flow_left = np.concatenate([self._flow_left, job.step_bytes])
            self._flow_job = np.concatenate([self._flow_job, np.full(count, job.ticket)])
            self._rates = None

    def _end_step(self, job: Job) -> None:
        name = f"{job.op} {job.schedule.algorithm} step {job.step}"
        self._record(job, "step", name, job.step_begin, self.now_ns, int(job.step_bytes.sum()))
        job.step += 1
        self._begin_step(job, self.now_ns)

    def _finish(self, job: Job, at: float) -> None:
        job.state, job.end_ns = "done", at
        self._running.remove(job)
        for chip, need in job.cc_need.items():
            self._cc_free[chip] += need
        self._record(job, "collective", f"{job.op} {job.schedule.algorithm}", job.start_ns, at)
        request = job.request
        outputs = None
        if request.inputs is not None:
            outputs = execute(job.schedule, request.inputs, job.dt, request.reduction)
        self._results[job.ticket] = CollectiveResult(
            ticket=job.ticket, op=job.op, algorithm=job.schedule.algorithm,
            detail=job.schedule.detail, cores=tuple(job.cores.tolist()), nbytes=job.nbytes,
            count=job.count, dtype=job.dt.name, issue_ns=job.issue_ns, start_ns=job.start_ns,
            end_ns=at, steps=len(job.schedule.steps), outputs=outputs, events=tuple(job.events))

    def _record(self, job: Job, kind: str, name: str, start: float, end: float,
                nbytes: int = 0) -> None:
        event = TimelineEvent(job.ticket, kind, name, start, end, nbytes)
        job.events.append(event)
        self.timeline.events.append(event)
