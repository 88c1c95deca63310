"""One NeuronCore in motion, and the cores of one chip: memories, engines, DMA, timing, profile.

`simulate(program, inputs)` runs a `trnsim.isa.Program` on a core and returns the output arrays
(functional mode) and a `Profile` (always): one record per instruction and a summary.
`simulate_cores(programs, inputs, chip=...)` runs one program per core of a chip, sharing HBM;
`simulate_system(programs, slots=..., world=...)` runs cores of several chips that synchronise
(barriers, send/receive, collectives on a fabric). `run_plan(plan, inputs)` runs an
`ExecutionPlan` (a compiled model: programs, their core slots, shared tensors, fabric) through it;
`trnsim.sim.placement` decides which core each program occupies.
``mode="timing"`` skips the numerics and gives the same timeline, faster.

Modules: `memory` (byte-addressed SBUF/PSUM/HBM), `state` (the ExecutionState instructions
run against), `dependencies` (overlap tracking), `resources` (rate timelines, ports), `dma`
(the DMA model), `scheduler` (list scheduling), `chip` (cores together), `profile`, `report`,
`perfetto`, `run` (the entry points), `execution_plan`, `placement`, `collector` (the cycle
collector paused while a program is planned).
"""

from trnsim.sim.chip import DEFAULT_CHIP, default_chip
from trnsim.sim.execution_plan import (
    ExecutionPlan,
    PlanFabric,
    PlannedCore,
    PlanRun,
    TensorSpec,
    run_plan,
    run_plan_loaded,
)
from trnsim.sim.memory import UNINITIALISED_BYTE, HbmSpace, OnChipMemory
from trnsim.sim.perfetto import write_trace
from trnsim.sim.profile import InstructionRecord, Profile, ProfileSummary, StreamSummary
from trnsim.sim.run import RunResult, copies_contend, simulate, simulate_cores, simulate_system
from trnsim.sim.scheduler import CoreScheduler
from trnsim.sim.state import CoreState
from trnsim.sim.sync import CoreSlot, World

__all__ = [
    "DEFAULT_CHIP",
    "UNINITIALISED_BYTE",
    "CoreScheduler",
    "CoreSlot",
    "CoreState",
    "ExecutionPlan",
    "HbmSpace",
    "InstructionRecord",
    "OnChipMemory",
    "PlanFabric",
    "PlanRun",
    "PlannedCore",
    "Profile",
    "ProfileSummary",
    "RunResult",
    "StreamSummary",
    "TensorSpec",
    "World",
    "copies_contend",
    "default_chip",
    "run_plan",
    "run_plan_loaded",
    "simulate",
    "simulate_cores",
    "simulate_system",
    "write_trace",
]
