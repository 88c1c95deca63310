"""List scheduling of one core's program: in program order, each instruction at its earliest time.

Every engine (TensorE, VectorE, ScalarE, GpSimd, Sync) runs its own in-order stream; the program
order is split into those streams and each instruction starts at the earliest time that
- its stream is free (the previous instruction of the stream finished its issue interval);
- its dependencies are met (`trnsim.sim.dependencies`: RAW waits for the producer's latency,
  WAR for the reader's busy end, WAW for the earlier write's completion unless the same in-order
  stream made it, e.g. MultiplyMovings accumulating into one PSUM bank);
- TensorE's pipelines allow it: a LoadStationary (load pipeline) may run while the previous
  MultiplyMoving streams ("background LS") but not before that MultiplyMoving has started (the
  array holds one stationary tile in use and one loading); a MultiplyMoving waits for the
  LoadStationary before it and the previous MultiplyMoving;
- on NeuronCore-v2, the shared SBUF port (VectorE/GpSimd) and PSUM port (VectorE/ScalarE) are
  free for its whole issue interval (`CoreSpec.port_conflicts`);
- DMA: see `trnsim.sim.dma`.

Durations come only from `Instruction.cost` (busy = issue interval, latency = when results are
visible) and `DmaTransfer.engine_ns`; the scheduler adds no constant of its own. Engines overlap
whenever these rules allow. The result is deterministic.
"""

from __future__ import annotations

from array import array

from trnsim.errors import InvalidArgumentError
from trnsim.isa import Instruction
from trnsim.sim.dma import DmaQueues
from trnsim.sim.engines import DMA_BASE, NO_WAIT, PIPELINE, PORT, QUEUE, TENSOR, TENSOR_LOAD
from trnsim.sim.plan import Plan, Planner, planned
from trnsim.sim.resources import BusyIntervals, RateTimeline

_PORT_PRUNE_EVERY = 512


class CoreScheduler:
    """Times the instructions of one core, one `step` at a time, and keeps the raw records."""

    def __init__(self, core, hbm: RateTimeline | None = None) -> None:
        self.core = core
        self.planner = Planner(core)  # replaced by the program's own in `prepare`
        self.regions = self.planner.regions
        self.ports = self.planner.ports
        # this core's bookings of each shared port (`PortTable.ports`)
        self.port_busy = [BusyIntervals() for _ in self.ports.ports]
        # per region uid (`trnsim.sim.dependencies`): when its last write is visible and which
        # stream made it; when its last read finished and which stream made it
        self.w_ready: list[float] = []
        self.w_engine: list[int] = []
        self.r_done: list[float] = []
        self.r_engine: list[int] = []
        self.dma = DmaQueues(core, hbm)
        self.stream_free = [0.0] * DMA_BASE  # when each compute stream is free
        self.last_multiply_start = 0.0
        self.stationary_loaded = False
        self.clock = 0.0  # latest start so far: how far this core has got (for interleaving cores)
        self._port_bookings = 0
        # raw per-instruction records, in program order
        self.uids: list[int] = []
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.dones: list[float] = []
        self.codes: list[int] = []
        self.causes: list[int] = []
        # how DMA records' data moved: one row per (record, start, end, share of its bytes)
        # piece at a constant rate; compact arrays (8 bytes a number) for multi-million runs
        self.moved_record = array("q")
        self.moved_times = array("d")  # start, end, share of each piece, flattened
        # programs run by program counter (trnsim.sim.chip): the instruction index of each record,
        # and the concrete instruction of a register-addressed one
        self.pcs: list[int] | None = None
        self.concrete: dict[int, Instruction] = {}

    def prepare(self, program) -> list[Plan]:
        """Check and plan every instruction (see `Planner.plan_program`), or take the plans made
        for this program object before (`trnsim.sim.plan.planned`)."""
        self.planner, plans = planned(program, self.core)
        self.regions = self.planner.regions
        self.ports = self.planner.ports
        self._grow()
        return plans

    def plan(self, ins: Instruction, program) -> Plan:
        """The plan of an instruction met at run time (see `Planner.plan`)."""
        plan = self.planner.plan(ins, program)
        self._grow()
        return plan

    def _grow(self) -> None:
        """One times entry per region found so far (never accessed: ready at 0, no engine)."""
        missing = self.regions.count - len(self.w_ready)
        if missing > 0:
            self.w_ready += [0.0] * missing
            self.w_engine += [-1] * missing
            self.r_done += [0.0] * missing
            self.r_engine += [-1] * missing

    def step(self, plan: Plan, ins: Instruction, not_before: float = 0.0) -> None:
        """Schedule the next instruction of the program (`plan` is its plan). `not_before` is
        a control-flow lower bound (a branch's decision, a register's value)."""
        code = plan.code
        # --- dependencies: the latest producer / reader / writer of overlapping bytes --------
        ready = not_before
        cause = NO_WAIT
        w_ready, w_engine = self.w_ready, self.w_engine
        for neighbors in plan.read_neighbors:
            for other in neighbors:
                if w_ready[other] > ready:
                    ready = w_ready[other]
                    cause = w_engine[other]
        if plan.writes:
            r_done, r_engine = self.r_done, self.r_engine
            same = code if code >= 0 else (DMA_BASE + plan.dma.queue if plan.dma.queue is not None
                                           else -99)
            for neighbors in plan.write_neighbors:
                for other in neighbors:
                    if r_done[other] > ready:
                        ready = r_done[other]
                        cause = r_engine[other]
                    if w_ready[other] > ready and w_engine[other] != same:
                        ready = w_ready[other]
                        cause = w_engine[other]
        # --- the stream, its pipeline and ports ------------------------------------------------
        if code < 0:
            queue, start, end = self.dma.schedule(plan, ready)
            record = len(self.uids)
            for piece in self.dma.moved:
                self.moved_record.append(record)
                self.moved_times.extend(piece)
            code = DMA_BASE + queue
            if start > ready:
                cause = QUEUE
            done = end
        else:
            start = self.stream_free[code]
            if ready > start:
                start = ready
            else:
                cause = NO_WAIT
            if code <= TENSOR:  # TensorE's load or multiply pipeline
                start, cause = self._tensor_pipeline(plan, ins, start, cause)
            if plan.ports:
                start, cause = self._book_ports(plan, start, cause)
            end = start + plan.busy
            done = start + plan.latency
            self.stream_free[code] = end
        # --- commit ---------------------------------------------------------------------------
        if plan.reads:
            r_done, r_engine = self.r_done, self.r_engine
            for region in plan.reads:
                if end > r_done[region]:
                    r_done[region] = end
                    r_engine[region] = code
        for region in plan.writes:
            if done > w_ready[region]:
                w_ready[region] = done
            w_engine[region] = code
        if start > self.clock:
            self.clock = start
        self.uids.append(plan.uid)
        self.starts.append(start)
        self.ends.append(end)
        self.dones.append(done)
        self.codes.append(code)
        self.causes.append(cause)

    # --- synchronising instructions (trnsim.sim.sync): arrive, then complete when released ----
    def arrival(self, plan: Plan, not_before: float = 0.0) -> float:
        """When a synchronising instruction would start on its own: its dependencies met and
        its stream free. It then waits for the other participants (`complete`)."""
        ready = max(not_before, self.stream_free[plan.code])
        for neighbors in plan.read_neighbors:
            for other in neighbors:
                ready = max(ready, self.w_ready[other])
        for neighbors in plan.write_neighbors:
            for other in neighbors:
                ready = max(ready, self.r_done[other], self.w_ready[other])
        return ready

    def complete(self, plan: Plan, start: float, done: float, cause: int,
                 block_stream: bool = True) -> None:
        """Record a synchronising instruction that waited from `start` (its arrival) until
        `done` (released by the rendezvous, data in place); with `block_stream` its engine's
        stream waited too (a barrier), else the work ran elsewhere (DMA, collective cores)."""
        code = plan.code
        for region in plan.reads:
            if done > self.r_done[region]:
                self.r_done[region] = done
                self.r_engine[region] = code
        for region in plan.writes:
            if done > self.w_ready[region]:
                self.w_ready[region] = done
            self.w_engine[region] = code
        if block_stream:
            self.stream_free[code] = max(self.stream_free[code], done)
        if start > self.clock:
            self.clock = start
        self.uids.append(plan.uid)
        self.starts.append(start)
        self.ends.append(done)
        self.dones.append(done)
        self.codes.append(code)
        self.causes.append(cause)

    def _tensor_pipeline(self, plan: Plan, ins: Instruction, start: float, cause: int) -> tuple[float, int]:
        if plan.is_load:
            if self.last_multiply_start > start:
                start, cause = self.last_multiply_start, PIPELINE
            self.stationary_loaded = True
            return start, cause
        if plan.is_matmul and not self.stationary_loaded:
            ins.fail(InvalidArgumentError(f"{ins.name}: MultiplyMoving with no stationary tile loaded "
                                          f"(no LoadStationary before it)"))
        load_done = self.stream_free[TENSOR_LOAD]
        if load_done > start:
            start, cause = load_done, PIPELINE
        self.last_multiply_start = start  # TensorE holds no shared port: this is its start
        return start, cause

    def _book_ports(self, plan: Plan, start: float, cause: int) -> tuple[float, int]:
        busy = plan.busy
        ports = [self.port_busy[index] for index in plan.ports]
        while True:
            moved = start
            for port in ports:
                moved = port.earliest(moved, busy)
            if moved == start:
                break
            start, cause = moved, PORT
        for port in ports:
            port.book(start, start + busy)
        self._port_bookings += 1
        if self._port_bookings % _PORT_PRUNE_EVERY == 0:
            for (streams, _), port in zip(self.ports.ports, self.port_busy, strict=True):
                port.prune(min(self.stream_free[s] for s in streams))
        return start, cause
