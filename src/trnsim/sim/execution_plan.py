"""`ExecutionPlan`: the one joint between compiling and running.

A plan names the programs, the core slot each runs on (`CoreSlot`: chip, tensor-sharing group,
collective rank, physical core of its logical NeuronCore), the HBM tensors the cores of a group
share, and the fabric the ranks talk over. Every way a compiled model runs is one plan:

- one NeuronCore: one program on one slot;
- a logical NeuronCore of two physical cores (LNC=2): two programs, one group, shared tensors;
- tensor parallel: every rank runs the same programs with its own chunks of the sharded weights
  (`PlannedCore.shard`), ranks placed by `trnsim.sim.placement` and joined by `PlanFabric`;
- neuron-cc's NeuronCore Pipeline (inf1): one program per stage, run in stage order; values are
  handed between stages through the model-level names of `PlannedCore.inputs` / `outputs`.

`compiler.compile` makes a plan, `runtime` saves, loads and calls it, and `run_plan` (one
inference) and `run_plan_loaded` (the chip busy with copies, or a pipeline streaming) simulate it
through `simulate_system`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trnsim import hardware
from trnsim.isa import Program
from trnsim.sim.profile import Profile
from trnsim.sim.run import RunResult, copies_contend, simulate_system
from trnsim.sim.sync import CoreSlot, World


@dataclass(frozen=True)
class TensorSpec:
    """A model input or output: its value name, shape, the program's dtype and PyTorch's."""

    name: str
    shape: tuple[int, ...]
    dtype: str  # the program's dtype
    torch_dtype: str | None = None  # what the model was traced with / eager PyTorch returns
    # A tensor-parallel input each rank holds a chunk of (a decode step's KV cache): the
    # `rank_chunk` cut (axis, degree, groups, parts, padded). None: every rank reads all of it.
    shard: tuple[int, int, int, int, int | None] | None = None


def rank_chunk(data: np.ndarray, shard: tuple, rank: int) -> np.ndarray:
    """Rank `rank`'s chunk of `data` cut as `shard` = (axis, degree, groups, parts, padded): the
    axis in `groups` equal parts, each zero-padded at its end to ``padded // groups`` (padded
    None: not padded) and cut into `parts` (0: degree) chunks; rank r holds chunk
    ``r * parts // degree`` of every part (neighbouring ranks share a chunk if parts < degree)."""
    axis, degree, groups, parts, padded = shard
    parts = parts or degree
    grouped = data.reshape(*data.shape[:axis], groups, -1, *data.shape[axis + 1:])
    if padded is not None:
        width = [(0, 0)] * grouped.ndim
        width[axis + 1] = (0, padded // groups - grouped.shape[axis + 1])
        grouped = np.pad(grouped, width)
    size = grouped.shape[axis + 1] // parts
    index = rank * parts // degree
    chunk = grouped[(slice(None),) * (axis + 1) + (slice(index * size, (index + 1) * size),)]
    return chunk.reshape(*data.shape[:axis], groups * size, *data.shape[axis + 1:])


@dataclass(frozen=True)
class PlannedCore:
    """One program on one core. `inputs` / `outputs`: (model value name, the program's HBM
    tensor) it reads from the caller or an earlier stage, and writes for the caller or a later
    stage. `shard`: the tensor-parallel rank whose chunks of sharded weights it holds."""

    program: int  # index into ExecutionPlan.programs
    slot: CoreSlot = field(default_factory=CoreSlot)
    shard: int = 0
    stage: int = 0
    inputs: tuple[tuple[str, str], ...] = ()
    outputs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class PlanFabric:
    """The collectives fabric ranks talk over: `endpoints[rank]` is the fabric's NeuronCore of
    each rank on `nodes` x `instance` at `lnc` physical cores per rank."""

    instance: str
    lnc: int
    endpoints: tuple[int, ...]
    nodes: int = 1

    def world(self) -> World:
        from trnsim.sim.placement import FabricPort  # loads the collectives model

        return World(FabricPort(hardware.instance(self.instance), self.nodes, self.lnc),
                     self.endpoints)


@dataclass
class ExecutionPlan:
    """Programs, the cores they run on, the tensors they share, the fabric (see module doc).

    `input_structure`, `output_structure` (`trnsim.compiler.Structure`), `kernels`
    (`trnsim.compiler.lowering.KernelCall`), `placement` (the visible cores of the model's
    copies) and `meta` travel with the plan for the runtime and reports; the simulator does not
    read them."""

    name: str
    instance: str
    programs: list[Program | Callable[[], Program]]  # a program, or what lowers it on demand
    cores: list[PlannedCore]
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    shared: tuple[str, ...] = ()
    fabric: PlanFabric | None = None
    lnc: int | None = None  # the logical NeuronCore size asked for (None: the chip's default)
    input_structure: Any = None
    output_structure: Any = None
    kernels: list = field(default_factory=list)
    placement: list[int] = field(default_factory=list)  # the visible cores holding a copy
    meta: dict = field(default_factory=dict)  # what the compiler noted (timings, cache hit, ...)
    _shards: dict = field(default_factory=dict, repr=False, compare=False)

    def program(self, index: int = 0) -> Program:
        """Program `index` (lowered now if the plan came from the compile cache)."""
        source = self.programs[index]
        if not isinstance(source, Program):
            source = self.programs[index] = source()
        return source

    def core_program(self, core: int) -> Program:
        """What core `core` runs: its program with its shard's weights."""
        planned = self.cores[core]
        program = self.program(planned.program)
        if not planned.shard:
            return program
        key = (planned.program, planned.shard)
        if key not in self._shards:
            self._shards[key] = shard_program(program, planned.shard)
        return self._shards[key]

    def core_programs(self) -> list[Program]:
        return [self.core_program(i) for i in range(len(self.cores))]

    def stages(self) -> list[list[int]]:
        """Core indices of each stage, in the order the stages run."""
        by_stage: dict[int, list[int]] = {}
        for index, core in enumerate(self.cores):
            by_stage.setdefault(core.stage, []).append(index)
        return [by_stage[s] for s in sorted(by_stage)]

    @property
    def ranks(self) -> int:
        """Collective ranks (tensor-parallel degree) of one copy."""
        return len({core.slot.rank for core in self.cores})

    @property
    def physical(self) -> int:
        """Physical cores per logical NeuronCore running a kernel split between them (LNC)."""
        return 1 + max(core.slot.lnc_index for core in self.cores)

    @property
    def logical_cores(self) -> int:
        """Logical NeuronCores one copy of the model occupies."""
        return len({(core.slot.chip, core.slot.group) for core in self.cores})


def shard_program(program: Program, rank: int) -> Program:
    """Rank `rank`'s program of a tensor-parallel model: the same instructions, its own chunks
    of the sharded weights (tensors whose data knows `for_rank`)."""
    tensors = {}
    for name, decl in program.tensors.items():
        data = decl.data
        if rank and getattr(data, "sharded", False):
            decl = dataclasses.replace(decl, data=data.for_rank(rank))
        tensors[name] = decl
    return dataclasses.replace(program, tensors=tensors)


def weights_on_chip(program: Program) -> bool:
    """Whether the program keeps its weights in SBUF (a pipeline stage that caches them)."""
    return any(t.on_chip for t in program.tensors.values() if t.kind == "constant")


@dataclass
class PlanRun:
    """One inference of a plan: every model value the cores read or wrote (None in timing
    mode), and one `RunResult` per planned core, in plan order."""

    values: dict[str, np.ndarray] | None
    results: list[RunResult]

    @property
    def profiles(self) -> list[Profile]:
        return [r.profile for r in self.results]


def _chip(plan: ExecutionPlan, chip):
    return chip if chip is not None else hardware.instance(plan.instance).chip


def run_plan(plan: ExecutionPlan, inputs: Mapping[str, np.ndarray] | None = None, *,
             mode: str = "functional", chip=None, seed: int = 0) -> PlanRun:
    """Run one inference: the stages in order, the cores of a stage together (on the plan's
    fabric if it has one). `inputs`: the model's input values by name (None: timing only)."""
    chip = _chip(plan, chip)
    values = dict(inputs) if inputs is not None else None
    world = plan.fabric.world() if plan.fabric is not None else None
    results: list[RunResult | None] = [None] * len(plan.cores)
    shards = {spec.name: spec.shard for spec in plan.inputs if spec.shard is not None}

    def given_to(core: PlannedCore) -> dict[str, np.ndarray] | None:
        if not core.inputs:
            return None
        return {hbm: rank_chunk(values[value], shards[value], core.shard) if value in shards
                else values[value] for value, hbm in core.inputs}

    for members in plan.stages():
        cores = [plan.cores[i] for i in members]
        given = None if values is None else [given_to(core) for core in cores]
        runs = simulate_system([plan.core_program(i) for i in members], given,
                               slots=[core.slot for core in cores], chip=chip, mode=mode,
                               seed=seed, shared=plan.shared or None, world=world)
        for index, core, run in zip(members, cores, runs, strict=True):
            results[index] = run
            if values is not None:
                values.update({value: run.outputs[hbm] for value, hbm in core.outputs})
    return PlanRun(values, results)


def run_plan_loaded(plan: ExecutionPlan, copies: int | None, *, alone: list[Profile],
                    chip=None) -> list[Profile]:
    """Profiles with the chip busy. A plan on one logical core: `copies` copies on one chip
    (at most one per logical core; they share its HBM), each copy's slowest core. A plan over
    several cores: one copy (copies on other cores are not simulated alongside), every stage
    working at once (a pipeline streaming requests), stages of a chip sharing its DRAM; one
    profile per core. `alone`: the profiles of one inference (`run_plan`), reused where a
    loaded run cannot differ from it."""
    chip = _chip(plan, chip)
    if plan.logical_cores > 1:
        if len(plan.stages()) == 1:
            return list(alone)  # its cores already ran together
        profiles = []
        for chip_index in sorted({core.slot.chip for core in plan.cores}):
            members = [i for i, core in enumerate(plan.cores) if core.slot.chip == chip_index]
            runs = simulate_system([plan.core_program(i) for i in members], None,
                                   slots=[plan.cores[i].slot for i in members], mode="timing",
                                   chip=chip, shared=plan.shared or None)
            profiles += [r.profile for r in runs]
        return profiles
    per_chip = chip.logical_cores(plan.lnc)
    copies = min(copies or per_chip, per_chip)
    programs = plan.core_programs()
    slowest = max(alone, key=lambda p: p.total_ns)
    if not copies_contend(programs, copies, chip, shared=plan.shared):
        return [slowest] * copies  # each copy runs as it does alone
    slots = [CoreSlot(group=c, lnc_index=core.slot.lnc_index) for c in range(copies)
             for core in plan.cores]
    runs = simulate_system(programs * copies, None, slots=slots, mode="timing", chip=chip,
                           shared=plan.shared)
    per = len(programs)
    return [max((r.profile for r in runs[c * per:(c + 1) * per]), key=lambda p: p.total_ns)
            for c in range(copies)]
