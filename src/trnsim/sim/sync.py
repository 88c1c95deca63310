"""Rendezvous of NeuronCores: core barriers, LNC send/receive and collectives.

A core that reaches a synchronising instruction (``KIND = "sync"``, `trnsim.isa.sync`) *arrives*:
the scheduler gives the time it could start on its own (dependencies met), and the core stops
stepping. When every participant of the rendezvous has arrived, the hub moves the data between the
participants' memories (functional runs) and decides when each continues:

- `CoreBarrier`: participants are the physical cores of one logical NeuronCore named in
  ``cores``; all continue one barrier latency after the last arrival; the waiting engine's stream
  is blocked until then (other engines are not).
- `SendRecv`: the cores a send/receive names within the logical core, paired in order per
  ``pipe``. Each send is an SBUF-to-SBUF DMA of the sender starting at the last arrival; a core
  continues when its own send and its receive have both landed. No engine stream is blocked:
  consumers of ``dst`` wait for the data through the usual dependencies.
- `CollectiveOp`: every physical core of every rank in the replica group. The hub issues it to
  the collectives fabric (`trnsim.collectives.Fabric`, which times it on the instance's
  NeuronLink/EFA model and, in functional runs, computes each rank's result with the same
  algorithm's numerics) at the last arrival, and releases the participants at the fabric's end
  time. Each rank's data is read from its first physical core and written to all of its cores.

Data moved by a rendezvous is read from every participant before any is written, so exchanges
(two cores swapping tiles) see the values as they were at arrival.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from trnsim.errors import InvalidArgumentError, TrnsimError, UnsupportedError
from trnsim.isa import CollectiveOp, CoreBarrier, Instruction, SendRecv
from trnsim.sim.collective_data import gather_inputs, local_outputs, rank_arrivals, scatter_outputs
from trnsim.sim.engines import FABRIC, NO_WAIT, PEER

if TYPE_CHECKING:
    from trnsim.sim.chip import CoreRun


@dataclass(frozen=True)
class CoreSlot:
    """Where one program runs in a multi-core (multi-chip) simulation.

    chip: index of the chip (each has its own HBM); group: programs of one group share their
    `shared` HBM tensors (the physical cores of a logical NeuronCore); rank: the collective rank
    (logical NeuronCore) it belongs to; lnc_index: its physical core within the logical core
    (``nl.program_id(0)`` under LNC=2).
    """

    chip: int = 0
    group: int = 0
    rank: int = 0
    lnc_index: int = 0


class FabricPort(Protocol):
    """What the hub needs of a collectives fabric (`trnsim.sim.placement.FabricPort` adapts
    `trnsim.collectives.Fabric` to it; the hub itself stays free of the collectives model)."""

    now_ns: float

    def issue_collective(self, op: str, nbytes: int, dtype: str, endpoints: tuple[int, ...],
                         inputs: list[np.ndarray] | None, pairs, reduction: str,
                         at_ns: float) -> object:
        """Start a collective at `at_ns`; returns a ticket."""

    def result(self, ticket: object):
        """None until the collective ends; then an object with `end_ns` and per-rank `outputs`."""

    def next_event_ns(self) -> float: ...

    def advance_to(self, t_ns: float) -> None: ...


@dataclass
class World:
    """How ranks map onto a collectives fabric: `endpoints[rank]` is the fabric's NeuronCore
    index of each rank."""

    fabric: FabricPort
    endpoints: tuple[int, ...]


@dataclass
class Arrival:
    run: CoreRun
    instruction: Instruction
    plan: object
    time: float
    payload: np.ndarray | None = None  # send/receive: the data sent, read at release


@dataclass
class Rendezvous:
    key: tuple
    expected: frozenset[int]  # run indices
    arrivals: dict[int, Arrival] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return self.expected <= set(self.arrivals)

    @property
    def release(self) -> float:
        return max(a.time for a in self.arrivals.values())


class SyncHub:
    """Matches synchronising instructions across cores and resolves them."""

    def __init__(self, runs: list[CoreRun], world: World | None = None) -> None:
        self.runs = runs
        self.world = world
        self.pending: dict[tuple, Rendezvous] = {}
        self.tickets: list[tuple[object, tuple]] = []  # (fabric ticket, what to finish it with)
        self.released: list[CoreRun] = []
        self._counts: dict[tuple, int] = defaultdict(int)
        self._by_group: dict[int, dict[int, CoreRun]] = defaultdict(dict)
        self._by_rank: dict[int, list[CoreRun]] = defaultdict(list)
        for run in runs:
            self._by_group[run.slot.group][run.slot.lnc_index] = run
            self._by_rank[run.slot.rank].append(run)

    # --- arriving -------------------------------------------------------------------------------
    def arrive(self, run: CoreRun, ins: Instruction, plan, time: float) -> None:
        if isinstance(ins, CoreBarrier):
            base, members = self._barrier(run, ins)
        elif isinstance(ins, SendRecv):
            base, members = self._sendrecv(run, ins)
        elif isinstance(ins, CollectiveOp):
            base, members = self._collective(run, ins)
        else:
            ins.fail(InvalidArgumentError(f"{ins.name}: not a synchronising instruction"))
        count_key = (run.index, base)
        key = (*base, self._counts[count_key])
        self._counts[count_key] += 1
        rendezvous = self.pending.get(key)
        if rendezvous is None:
            rendezvous = self.pending[key] = Rendezvous(key, frozenset(m.index for m in members))
        rendezvous.arrivals[run.index] = Arrival(run, ins, plan, time)
        if rendezvous.complete:
            del self.pending[key]
            self._resolve(rendezvous)

    def _group(self, run: CoreRun, ins: Instruction, lnc_indices) -> list[CoreRun]:
        group = self._by_group[run.slot.group]
        missing = [i for i in lnc_indices if i not in group]
        if missing:
            ins.fail(InvalidArgumentError(
                f"{ins.name}: names core {missing[0]} of the logical NeuronCore, which runs only "
                f"cores {sorted(group)} (launch the kernel as kernel[2] for LNC=2)"))
        return [group[i] for i in sorted(set(lnc_indices))]

    def _barrier(self, run: CoreRun, ins: CoreBarrier) -> tuple[tuple, list[CoreRun]]:
        if run.slot.lnc_index not in ins.cores:
            ins.fail(InvalidArgumentError(f"{ins.name}: core {run.slot.lnc_index} waits on a barrier "
                                          f"of cores {ins.cores} it is not part of"))
        return ("barrier", run.slot.group, tuple(sorted(ins.cores))), self._group(run, ins, ins.cores)

    def _sendrecv(self, run: CoreRun, ins: SendRecv) -> tuple[tuple, list[CoreRun]]:
        members = self._group(run, ins, (run.slot.lnc_index, ins.send_to, ins.recv_from))
        return ("sendrecv", run.slot.group, ins.pipe), members

    def _collective(self, run: CoreRun, ins: CollectiveOp) -> tuple[tuple, list[CoreRun]]:
        rank = run.slot.rank
        group = next((tuple(g) for g in ins.groups if rank in g), None)
        if group is None:
            ins.fail(InvalidArgumentError(f"{ins.name}: rank {rank} is in none of the replica groups "
                                          f"{[list(g) for g in ins.groups]}"))
        missing = [r for r in group if r not in self._by_rank]
        if missing:
            ins.fail(InvalidArgumentError(
                f"{ins.name}: replica group {list(group)} names rank {missing[0]}, but the kernel "
                f"was launched on {len(self._by_rank)} rank(s); launch it on more ranks "
                f"(nki.simulate(kernel, world=World(ranks=...)))"))
        members = [r for g in group for r in self._by_rank[g]]
        return ("collective", group), members

    # --- resolving --------------------------------------------------------------------------------
    def _resolve(self, rendezvous: Rendezvous) -> None:
        first = next(iter(rendezvous.arrivals.values())).instruction
        if isinstance(first, CoreBarrier):
            self._resolve_barrier(rendezvous)
        elif isinstance(first, SendRecv):
            self._resolve_sendrecv(rendezvous)
        else:
            self._issue_collective(rendezvous)

    def _release(self, arrival: Arrival, done: float, cause: int, block_stream: bool) -> None:
        arrival.run.resume(arrival.plan, arrival.time, done, cause, block_stream)
        self.released.append(arrival.run)

    def _resolve_barrier(self, rendezvous: Rendezvous) -> None:
        release = rendezvous.release
        for arrival in rendezvous.arrivals.values():
            cause = PEER if release > arrival.time else NO_WAIT
            self._release(arrival, release + arrival.plan.latency, cause, block_stream=True)

    def _resolve_sendrecv(self, rendezvous: Rendezvous) -> None:
        arrivals = {a.run.slot.lnc_index: a for a in rendezvous.arrivals.values()}
        for index, arrival in arrivals.items():
            partner = arrivals[arrival.instruction.send_to]
            if partner.instruction.recv_from != index:
                arrival.instruction.fail(InvalidArgumentError(
                    f"{arrival.instruction.name}: core {index} sends to core "
                    f"{arrival.instruction.send_to}, which receives from core "
                    f"{partner.instruction.recv_from} on pipe {arrival.instruction.pipe}"))
            if partner.instruction.dst.shape != arrival.instruction.src.shape or \
                    partner.instruction.dst.dtype != arrival.instruction.src.dtype:
                arrival.instruction.fail(InvalidArgumentError(
                    f"{arrival.instruction.name}: core {index} sends {arrival.instruction.src.dtype.name}"
                    f"{list(arrival.instruction.src.shape)} into core {arrival.instruction.send_to}'s "
                    f"{partner.instruction.dst.dtype.name}{list(partner.instruction.dst.shape)}"))
        release = rendezvous.release
        sent = {}
        for index, arrival in arrivals.items():
            ins, run = arrival.instruction, arrival.run
            sent[index] = release + arrival.plan.latency  # the SendRecv's cost is one transfer
            if run.state is not None:
                arrival.payload = np.array(run.state.read(ins.src), copy=True)
        for arrival in arrivals.values():
            target = arrivals[arrival.instruction.send_to]
            if target.run.state is not None:
                target.run.state.write(target.instruction.dst, arrival.payload)
        for index, arrival in arrivals.items():
            done = max(sent[index], sent[arrival.instruction.recv_from])
            cause = PEER if release > arrival.time else NO_WAIT
            self._release(arrival, done, cause, block_stream=False)

    def _issue_collective(self, rendezvous: Rendezvous) -> None:
        if self.world is None:
            raise UnsupportedError("collectives need a world (ranks placed on an instance's fabric); "
                                   "launch the kernel with nki.simulate(kernel, world=World(...))")
        by_rank = rank_arrivals(rendezvous)
        ranks = sorted(by_rank)
        first = by_rank[ranks[0]][0].instruction
        inputs = gather_inputs(by_rank, ranks)
        release = rendezvous.release
        fabric = self.world.fabric
        if len(ranks) == 1:
            self._finish_collective(rendezvous, by_rank, ranks, inputs, release)
            return
        op = first.op
        pairs = first.pairs or None
        if op == "permute" and pairs is not None:
            targets = [d for _, d in pairs]
            sources = [s for s, _ in pairs]
            if len(set(sources)) != len(sources) or len(set(targets)) != len(targets) \
                    or len(pairs) != len(ranks):
                op = "sendrecv"  # a partial pairing: nccom's permute needs a full permutation
            pairs = [(ranks.index(s), ranks.index(d)) for s, d in pairs]
        count = inputs.count * (len(ranks) if op == "all_gather" else 1)
        endpoints = tuple(self.world.endpoints[r] for r in ranks)
        ticket = fabric.issue_collective(op, count * inputs.dtype.itemsize, inputs.dtype.name,
                                         endpoints, inputs.arrays, pairs, first.reduction,
                                         max(release, fabric.now_ns))
        self.tickets.append((ticket, (rendezvous, by_rank, ranks, inputs)))

    def _finish_collective(self, rendezvous, by_rank, ranks, inputs, done: float,
                           outputs: list | None = None) -> None:
        if outputs is None and inputs.arrays is not None:
            outputs = local_outputs(by_rank[ranks[0]][0].instruction, inputs)
        if outputs is not None:
            scatter_outputs(by_rank, ranks, inputs, outputs)
        for rank in ranks:
            for arrival in by_rank[rank]:
                self._release(arrival, done, FABRIC, block_stream=False)

    # --- the fabric's clock ------------------------------------------------------------------------
    @property
    def fabric_busy(self) -> bool:
        return bool(self.tickets)

    def advance_fabric(self, horizon: float) -> None:
        """Run the fabric up to `horizon` (or, with horizon = inf, until a collective ends) and
        release the participants of every collective that finished."""
        fabric = self.world.fabric
        while self.tickets:
            finished = [(t, info) for t, info in self.tickets if fabric.result(t) is not None]
            if finished:
                for ticket, info in finished:
                    self.tickets.remove((ticket, info))
                    result = fabric.result(ticket)
                    rendezvous, by_rank, ranks, inputs = info
                    self._finish_collective(rendezvous, by_rank, ranks, inputs, result.end_ns,
                                            result.outputs)
                return
            upcoming = fabric.next_event_ns()
            if upcoming == math.inf:
                raise TrnsimError("collectives fabric stalled with collectives outstanding")
            if upcoming > horizon:
                if horizon > fabric.now_ns:
                    fabric.advance_to(horizon)
                return
            fabric.advance_to(upcoming)

    def next_fabric_event(self) -> float:
        return self.world.fabric.next_event_ns() if self.tickets else math.inf

    # --- errors ------------------------------------------------------------------------------------
    def deadlock(self) -> TrnsimError:
        """The error for cores that wait on partners that will never arrive."""
        lines = []
        for rendezvous in self.pending.values():
            arrived = sorted(rendezvous.arrivals)
            missing = sorted(rendezvous.expected - set(arrived))
            ins = next(iter(rendezvous.arrivals.values())).instruction
            states = []
            for index in missing:
                other = self.runs[index]
                where = ("finished" if other.finished else
                         f"waiting at {other.waiting_at()}" if other.parked else "running")
                states.append(f"core {index} ({where})")
            lines.append(f"{ins.name} at {ins.source or '?'}: cores {arrived} wait for "
                         f"{', '.join(states)}")
        return TrnsimError("deadlock: " + "; ".join(lines))

