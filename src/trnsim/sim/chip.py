"""Running the cores of one chip together: shared HBM (capacity, tensors, bandwidth), own engines.

Each core has its own SBUF, PSUM, engines, DMA engines and dependency tracking; the chip's HBM
holds every core's tensors within one capacity, a tensor named in ``shared`` is one buffer that
all cores see, and all cores' DMAs draw on the chip's HBM bandwidth.

Cores are stepped one instruction at a time, always the core that is least far along in
simulated time (ties: the lower core index). So HBM bandwidth is handed out roughly in time
order, which approximates fair sharing between cores, and a functional run executes the cores'
instructions in that same deterministic order. Cores do not synchronise through shared HBM by
themselves: a program that reads what another core writes needs a barrier instruction, which
the ISA does not have yet; until then such reads see whatever the interleaving produced.
"""

from __future__ import annotations

import heapq

from trnsim import hardware
from trnsim.errors import TrnsimError
from trnsim.isa import Program
from trnsim.sim.dma import hbm_timeline
from trnsim.sim.scheduler import CoreScheduler
from trnsim.sim.state import CoreState

# The chip a core version runs on when none is given (the chips whose cores these are).
DEFAULT_CHIP = {1: "Inferentia", 2: "Trainium", 3: "Trainium2", 4: "Trainium3"}
_HBM_PRUNE_EVERY = 1024


def default_chip(core):
    """Trainium for NeuronCore-v2, Trainium2 for v3, Trainium3 for v4, Inferentia for v1."""
    return hardware.chip(DEFAULT_CHIP[core.version])


class CoreRun:
    """One core's program in progress."""

    def __init__(self, index: int, program: Program, scheduler: CoreScheduler,
                 state: CoreState | None = None) -> None:
        self.index = index
        self.program = program
        self.instructions = program.instructions
        self.scheduler = scheduler
        self.state = state
        self.plans = scheduler.prepare(program)  # checks the program before anything runs
        self.position = 0

    @property
    def finished(self) -> bool:
        return self.position >= len(self.instructions)

    def run_all(self) -> None:
        """The single-core fast path: no interleaving to decide."""
        step = self.scheduler.step
        state = self.state
        if state is None:
            for plan, ins in zip(self.plans, self.instructions, strict=True):
                step(plan, ins)
        else:
            for plan, ins in zip(self.plans, self.instructions, strict=True):
                step(plan, ins)
                execute(ins, state)
        self.position = len(self.instructions)

    def step(self) -> None:
        ins = self.instructions[self.position]
        self.scheduler.step(self.plans[self.position], ins)
        if self.state is not None:
            execute(ins, self.state)
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


def run_cores(runs: list[CoreRun]) -> None:
    """Step every core to the end, least-advanced core first."""
    if len(runs) == 1:
        runs[0].run_all()
        return
    hbm = runs[0].scheduler.dma.hbm
    heap = [(0.0, run.index) for run in runs if not run.finished]
    heapq.heapify(heap)
    by_index = {run.index: run for run in runs}
    steps = 0
    while heap:
        _, index = heapq.heappop(heap)
        run = by_index[index]
        run.step()
        if not run.finished:
            heapq.heappush(heap, (run.scheduler.clock, index))
        steps += 1
        if hbm is not None and steps % _HBM_PRUNE_EVERY == 0:
            active = [r.scheduler.dma.horizon for r in runs if not r.finished]
            if active:
                hbm.prune(min(active))
