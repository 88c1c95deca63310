"""Running cores together: shared HBM per chip, own engines, control flow and rendezvous.

Each core has its own SBUF, PSUM, engines, DMA engines and dependency tracking; a chip's HBM
holds every core's tensors within one capacity, a tensor named in ``shared`` is one buffer that
the cores of a group see, and all cores' DMAs on a chip draw on that chip's HBM bandwidth.

Cores are stepped one instruction at a time, always the core that is least far along in
simulated time (ties: the lower core index). So HBM bandwidth is handed out roughly in time
order, which approximates fair sharing between cores, and a functional run executes the cores'
instructions in that same deterministic order. Cores synchronise only through synchronising
instructions (`trnsim.isa.sync`): a core that reaches one stops until its partners arrive
(`trnsim.sim.sync.SyncHub`); without one, a core that reads what another writes sees whatever
the interleaving produced.

Control flow (`trnsim.isa.control`): a program with branches runs by program counter; every
executed instruction is one profile record (`CoreScheduler.pcs` maps records to instructions).
A branch's decision is a lower bound for every later instruction of the core (the engines'
sequencers wait for it); otherwise the engines run ahead exactly as in straight-line code.
"""

from __future__ import annotations

import heapq

from trnsim import hardware
from trnsim.errors import InvalidArgumentError, LimitExceededError, TrnsimError
from trnsim.isa import Branch, Jump, Memory, Program
from trnsim.sim import compiled, replay
from trnsim.sim.dma import hbm_timeline
from trnsim.sim.plan import compiled_inputs
from trnsim.sim.scheduler import CoreScheduler
from trnsim.sim.state import CoreState
from trnsim.sim.sync import CoreSlot, SyncHub

# The chip a core version runs on when none is given (the chips whose cores these are).
DEFAULT_CHIP = {1: "Inferentia", 2: "Trainium", 3: "Trainium2", 4: "Trainium3"}
_HBM_PRUNE_EVERY = 1024
# A guard against a while-loop whose condition never clears: instructions one core may execute.
MAX_EXECUTED_INSTRUCTIONS = 20_000_000


def default_chip(core):
    """Trainium for NeuronCore-v2, Trainium2 for v3, Trainium3 for v4, Inferentia for v1."""
    return hardware.chip(DEFAULT_CHIP[core.version])


class CoreRun:
    """One core's program in progress."""

    def __init__(self, index: int, program: Program, scheduler: CoreScheduler,
                 state: CoreState | None = None, slot: CoreSlot | None = None) -> None:
        self.index = index
        self.program = program
        self.instructions = program.instructions
        self.scheduler = scheduler
        self.state = state
        self.slot = slot or CoreSlot(lnc_index=index)
        self.plans = scheduler.prepare(program)  # checks the program before anything runs
        self.position = 0
        # Programs with branches, register-addressed operands or rendezvous run by program counter.
        self.dynamic = scheduler.planner.has_kinds
        self.registers = None
        if self.dynamic:
            from trnsim.isa import RegisterFile

            self.registers = RegisterFile()
            scheduler.pcs = []
        self.floor = 0.0  # latest branch decision: no later instruction starts before it
        self.parked = None  # (instruction, plan) of the rendezvous this core waits at
        self.hub: SyncHub | None = None
        self.executed = 0

    @property
    def finished(self) -> bool:
        return self.position >= len(self.instructions)

    def waiting_at(self) -> str:
        if self.parked is None:
            return "nothing"
        ins = self.parked[0]
        return f"{ins.name} ({ins.source or 'no source'})"

    def run_all(self) -> None:
        """The single-core fast path: no interleaving to decide."""
        if self.dynamic:
            while not self.finished:
                self.step()
                self.hub.released.clear()
                if self.parked is not None:
                    raise self.hub.deadlock()
            return
        step = self.scheduler.step
        state = self.state
        alone = self.scheduler.dma.hbm is None  # no HBM timeline shared with other cores
        if alone and state is not None and self._replay():
            return
        if alone and self._run_compiled():
            return
        if state is None:
            for plan, ins in zip(self.plans, self.instructions, strict=True):
                step(plan, ins)
        else:
            for plan, ins in zip(self.plans, self.instructions, strict=True):
                step(plan, ins)
                execute(ins, state)
            if alone:
                replay.keep(self.scheduler, self.plans)
        self.position = len(self.instructions)

    def _replay(self) -> bool:
        """A functional rerun of a straight-line program alone on its core: the timeline kept
        from its first functional run (`trnsim.sim.replay`), then the instructions in program
        order. False when none is kept."""
        timeline = replay.kept(self.scheduler, self.plans)
        if timeline is None:
            return False
        timeline.restore(self.scheduler)
        state = self.state
        ins = None
        try:  # `execute`, with the loop inside the try
            for ins in self.instructions:
                ins.execute(state)
        except TrnsimError as error:
            raise error.at(ins.source) from None
        self.position = len(self.instructions)
        return True

    def _run_compiled(self) -> bool:
        """Time the whole program with the compiled loop (`trnsim.sim.compiled`) if it is
        chosen and available; False to run the Python loop instead. A functional run then
        executes the instructions in program order: a straight-line program's timing does not
        depend on its values, and an error is still the first the Python loop would raise (the
        instructions before the one whose timing step fails are executed first)."""
        if not compiled.use_compiled(len(self.instructions)):
            return False
        kernel = compiled.kernel()
        if compiled.loop_choice() == "check":
            reference = CoreScheduler(self.scheduler.core, None)
            reference.prepare(self.program)
            for plan, ins in zip(self.plans, self.instructions, strict=True):
                reference.step(plan, ins)
        arrays, uids = compiled_inputs(self.program, self.scheduler.core, self.scheduler.planner,
                                       self.plans)
        failed = compiled.run_with_kernel(kernel, self.scheduler, arrays, uids)
        if self.state is not None:
            for ins in self.instructions[:failed] if failed >= 0 else self.instructions:
                execute(ins, self.state)
            if failed < 0:
                replay.keep(self.scheduler, self.plans)
        if failed >= 0:  # raise the Python loop's error for that instruction
            self.scheduler.step(self.plans[failed], self.instructions[failed])
        self.position = len(self.instructions)
        if compiled.loop_choice() == "check":
            compiled.compare(reference, self.scheduler, self.program)
        return True

    def step(self) -> None:
        ins = self.instructions[self.position]
        if not self.dynamic:
            self.scheduler.step(self.plans[self.position], ins)
            if self.state is not None:
                execute(ins, self.state)
            self.position += 1
            return
        self.executed += 1
        if self.executed > MAX_EXECUTED_INSTRUCTIONS:
            raise LimitExceededError("instructions executed by one core", self.executed,
                                     MAX_EXECUTED_INSTRUCTIONS,
                                     context=f"a dynamic loop that never ends? last at "
                                             f"{ins.source or ins.name}")
        kind = getattr(type(ins), "KIND", "")
        if kind == "control":
            self._control(ins)
        elif kind == "dynamic":
            self._register_addressed(ins)
        elif kind == "sync":
            plan = self.plans[self.position]
            arrival = self.scheduler.arrival(plan, self.floor)
            self.parked = (ins, plan)
            self.hub.arrive(self, ins, plan, arrival)
        else:
            self._record(self.plans[self.position], ins, self.floor)
            if self.state is not None:
                execute(ins, self.state)
            self.position += 1

    def _record(self, plan, ins, not_before: float) -> None:
        self.scheduler.step(plan, ins, not_before)
        self.scheduler.pcs.append(self.position)

    def _control(self, ins) -> None:
        registers = self.registers
        not_before = max(self.floor, registers.ready(ins.registers_read()))
        self._record(self.plans[self.position], ins, not_before)
        done = self.scheduler.dones[-1]
        try:
            target = ins.run(registers, self.state, done)
        except TrnsimError as error:
            raise error.at(ins.source) from None
        if isinstance(ins, (Branch, Jump)):
            self.floor = max(self.floor, done)
        if target is None:
            self.position += 1
        elif not 0 <= target <= len(self.instructions):
            ins.fail(InvalidArgumentError(f"{ins.name}: jump target {target} is outside the "
                                          f"program (0..{len(self.instructions)})"))
        else:
            self.position = target

    def _register_addressed(self, ins) -> None:
        concrete = ins.resolve(self.registers)
        if ins.skip_out_of_bounds and not self._in_bounds(concrete):
            self.position += 1
            return
        plan = self.scheduler.plan(concrete, self.program)
        not_before = max(self.floor, self.registers.ready(ins.registers_read()))
        self._record(plan, concrete, not_before)
        self.scheduler.concrete[len(self.scheduler.pcs) - 1] = concrete
        if self.state is not None:
            execute(concrete, self.state)
        self.position += 1

    def _in_bounds(self, ins) -> bool:
        core = self.scheduler.core
        for ap in (*ins.reads(), *ins.writes()):
            low, high = ap.byte_span()
            if ap.memory is Memory.HBM:
                decl = self.program.tensors.get(ap.tensor)
                limit = decl.nbytes if decl is not None else 0
            else:
                limit = (core.sbuf_bytes_per_partition if ap.memory is Memory.SBUF
                         else core.psum_bytes_per_partition)
            if low < 0 or high > limit:
                return False
        return True

    def resume(self, plan, arrival: float, done: float, cause: int, block_stream: bool) -> None:
        """Continue after a rendezvous released this core: the instruction ran from `arrival`
        (waiting) to `done`."""
        self.scheduler.complete(plan, arrival, done, cause, block_stream)
        self.scheduler.pcs.append(self.position)
        self.parked = None
        self.position += 1


def execute(ins, state: CoreState) -> None:
    try:
        ins.execute(state)
    except TrnsimError as error:
        raise error.at(ins.source) from None


def make_schedulers(chip, count: int) -> list[CoreScheduler]:
    """One scheduler per core, sharing the chip's HBM bandwidth timeline (if it can bind)."""
    hbm = hbm_timeline(chip, count)
    return [CoreScheduler(chip.core, hbm) for _ in range(count)]


def run_cores(runs: list[CoreRun], hub: SyncHub | None = None) -> None:
    """Step every core to the end, least-advanced core first; rendezvous through `hub`."""
    hub = hub or SyncHub(runs)
    for run in runs:
        run.hub = hub
    if len(runs) == 1:
        runs[0].run_all()
        return
    hbms = {id(r.scheduler.dma.hbm): r.scheduler.dma.hbm for r in runs
            if r.scheduler.dma.hbm is not None}
    heap = [(0.0, run.index) for run in runs if not run.finished]
    heapq.heapify(heap)
    by_index = {run.index: run for run in runs}
    steps = 0
    while True:
        if hub.fabric_busy:
            horizon = heap[0][0] if heap else float("inf")
            if hub.next_fabric_event() <= horizon:
                hub.advance_fabric(horizon)
                _push_released(hub, heap)
                continue
        if not heap:
            if hub.pending:
                raise hub.deadlock()
            return
        _, index = heapq.heappop(heap)
        run = by_index[index]
        run.step()
        if run.parked is None and not run.finished:
            heapq.heappush(heap, (run.scheduler.clock, index))
        _push_released(hub, heap, skip=run if run.parked is None else None)
        steps += 1
        if hbms and steps % _HBM_PRUNE_EVERY == 0:
            _prune(runs, hbms)


def _push_released(hub: SyncHub, heap: list, skip: CoreRun | None = None) -> None:
    for run in hub.released:
        if run is not skip and not run.finished:
            heapq.heappush(heap, (run.scheduler.clock, run.index))
    hub.released.clear()


def _prune(runs: list[CoreRun], hbms: dict) -> None:
    for hbm in hbms.values():
        active = [r.scheduler.dma.horizon for r in runs
                  if not r.finished and r.scheduler.dma.hbm is hbm]
        if active:
            hbm.prune(min(active))
