"""`simulate` and `simulate_cores`: run programs, get output arrays and profiles.

A run (1) checks the program (`Program.verify` semantics: every instruction's `check(core)`, HBM
bounds), the chip and the inputs, (2) lays out the chip's HBM (inputs copied in, constants
loaded, everything else NaN-filled) and each core's SBUF/PSUM, (3) steps the program(s) through
the scheduler and, in functional mode, through each instruction's numpy semantics, and
(4) returns outputs and a `Profile` per core. Timing-only mode skips (2)'s memories and the
semantics; the timeline is the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from trnsim import hardware
from trnsim.errors import InvalidArgumentError
from trnsim.isa import Program
from trnsim.numerics import cast
from trnsim.sim.checks import check_array, check_chip, check_inputs, check_mode
from trnsim.sim.chip import CoreRun, default_chip, make_schedulers, run_cores
from trnsim.sim.dma import hbm_timeline
from trnsim.sim.memory import HbmSpace
from trnsim.sim.profile import Profile
from trnsim.sim.state import CoreState
from trnsim.sim.sync import CoreSlot, SyncHub, World
from trnsim.sim.threads import blas_threads_capped


@dataclass
class RunResult:
    """Outputs (None in timing mode) and the timeline of one core's run.

    Output arrays are views of the run's HBM buffers with the output tensors' shapes and dtypes;
    a tensor shared between cores is the same array in every core's result.
    """

    outputs: dict[str, np.ndarray] | None
    profile: Profile
    core_index: int = 0
    # the final contents of the input tensors (current NKI kernels may write into their inputs)
    hbm_arrays: dict[str, np.ndarray] | None = None

    @property
    def total_ns(self) -> float:
        return self.profile.total_ns


def simulate(program: Program, inputs: Mapping[str, np.ndarray] | None = None, *,
             mode: str = "functional", seed: int | None = None, chip=None) -> RunResult:
    """Run one program on one core of `chip` (a ChipSpec or a name such as "trn2"; default: the
    chip of the program's core version, see `default_chip`)."""
    return simulate_cores([program], [inputs], chip=chip, mode=mode, seed=seed)[0]


def simulate_cores(programs: Sequence[Program],
                   inputs: Sequence[Mapping[str, np.ndarray] | None] | None = None, *, chip=None,
                   mode: str = "functional", seed: int | None = None,
                   shared: Mapping[str, np.ndarray | None] | Iterable[str] | None = None,
                   ) -> list[RunResult]:
    """Run one program per core of one chip, concurrently.

    inputs: one dict per program (or None). shared: HBM tensor names that are one buffer across
    cores (as NKI SPMD kernels and LNC=2 see their arguments); a mapping may give a shared
    tensor's initial value, otherwise it comes from the first core whose inputs name it. The
    cores form one logical NeuronCore: core i is its physical core i (for core barriers and
    send/receive).
    """
    slots = [CoreSlot(lnc_index=i) for i in range(len(programs))]
    return simulate_system(programs, inputs, slots=slots, chip=chip, mode=mode, seed=seed,
                           shared=shared)


def simulate_system(programs: Sequence[Program],
                    inputs: Sequence[Mapping[str, np.ndarray] | None] | None = None, *,
                    slots: Sequence[CoreSlot] | None = None, chip=None, mode: str = "functional",
                    seed: int | None = None,
                    shared: Mapping[str, np.ndarray | None] | Iterable[str] | None = None,
                    world: World | None = None) -> list[RunResult]:
    """Run programs on the cores of one or more chips of the same kind, concurrently.

    `slots` place each program (`CoreSlot`: chip, tensor-sharing group, collective rank, core
    within its logical NeuronCore; default: all on chip 0, one group). `shared` names are one
    buffer per group; `world` maps ranks onto a collectives fabric for `CollectiveOp`s. Returns
    one `RunResult` per program, in order.
    """
    programs = list(programs)
    check_mode(mode)
    if isinstance(chip, str):
        chip = hardware.chip(chip)
    elif chip is None and programs:
        chip = default_chip(programs[0].target)
    slots = list(slots) if slots is not None else [CoreSlot(lnc_index=i) for i in range(len(programs))]
    inputs = list(inputs) if inputs is not None else [None] * len(programs)
    if len(inputs) != len(programs) or len(slots) != len(programs):
        raise InvalidArgumentError(f"{len(programs)} programs but {len(inputs)} input dicts and "
                                   f"{len(slots)} slots")
    shared_values = _shared_values(shared)
    for name, value in shared_values.items():
        if value is not None and not any(name in p.tensors for p in programs):
            raise InvalidArgumentError(f"shared tensor {name!r} is not declared by any program")
    functional = mode == "functional"
    chips = sorted({slot.chip for slot in slots})
    for c in chips:
        check_chip([p for p, s in zip(programs, slots, strict=True) if s.chip == c], chip)
    for program, given, slot in zip(programs, inputs, slots, strict=True):
        provided = {k for k, v in shared_values.items() if v is not None}
        provided |= {k for other, o_slot in zip(inputs, slots, strict=True)
                     if other and o_slot.group == slot.group for k in other if k in shared_values}
        check_inputs(program, given, provided=provided, required=functional)
    hbms = {c: HbmSpace(chip.memory_bytes, chip.name) for c in chips}
    keys = [_reserve_tensors(hbms[slot.chip], program, index, shared_values, slot.group)
            for index, (program, slot) in enumerate(zip(programs, slots, strict=True))]
    schedulers: list = [None] * len(programs)
    for c in chips:
        members = [i for i, s in enumerate(slots) if s.chip == c]
        for i, scheduler in zip(members, make_schedulers(chip, len(members)), strict=True):
            schedulers[i] = scheduler
    runs = [CoreRun(i, program, schedulers[i], slot=slots[i])  # verifies
            for i, program in enumerate(programs)]
    if functional:
        from trnsim.numerics.random import env_seed

        run_seed = seed if seed is not None else env_seed()  # NEURON_RT_STOCHASTIC_ROUNDING_SEED
        for c in chips:
            members = [i for i, s in enumerate(slots) if s.chip == c]
            _load_tensors(hbms[c], [programs[i] for i in members], [inputs[i] for i in members],
                          [keys[i] for i in members], shared_values)
        for i, run in enumerate(runs):
            run.state = CoreState(chip.core, hbms[slots[i].chip], keys[i], seed=run_seed,
                                  core_index=i)
    if functional:
        with blas_threads_capped():
            run_cores(runs, SyncHub(runs, world))
        for run in runs:
            run.state.release()
            run.state = None
    else:
        run_cores(runs, SyncHub(runs, world))
    results = []
    for i, program in enumerate(programs):
        profile = Profile(program=program, core=chip.core, chip=chip, core_index=i, mode=mode,
                          scheduler=schedulers[i])
        hbm = hbms[slots[i].chip]
        outputs = ({t.name: hbm.array(keys[i][t.name]) for t in program.outputs}
                   if functional else None)
        results.append(RunResult(outputs, profile, i, hbm_arrays=(
            {t.name: hbm.array(keys[i][t.name]) for t in program.tensors.values()
             if t.kind == "input"} if functional else None)))
    return results


def _shared_values(shared) -> dict[str, np.ndarray | None]:
    if shared is None:
        return {}
    if isinstance(shared, Mapping):
        return dict(shared)
    if isinstance(shared, str):
        return {shared: None}
    return dict.fromkeys(shared)


def copies_contend(program: Program | Sequence[Program], copies: int, chip, *,
                   shared: Iterable[str] = ()) -> bool:
    """Whether `copies` copies of one program, run together on one chip, can slow each other:
    only through the chip's HBM bandwidth, and only when their DMA engines together can exceed
    it (`hbm_timeline`). If not, each copy runs exactly as it does alone, and a caller may reuse
    that profile instead of simulating them all. A copy may be several programs (the physical
    cores of a logical NeuronCore, sharing the `shared` tensors). Raises, as running them would,
    when the copies do not fit in the chip's HBM."""
    if isinstance(chip, str):
        chip = hardware.chip(chip)
    programs = [program] if isinstance(program, Program) else list(program)
    hbm = HbmSpace(chip.memory_bytes, chip.name)
    names = dict.fromkeys(shared)
    for copy in range(copies):
        for index, one in enumerate(programs):
            _reserve_tensors(hbm, one, copy * len(programs) + index, names, group=copy)
    return hbm_timeline(chip, copies * len(programs)) is not None


def _reserve_tensors(hbm: HbmSpace, program: Program, index: int,
                     shared: dict[str, np.ndarray | None], group: int = 0) -> dict[str, str]:
    """Account every HBM tensor of a program against the chip; returns name -> HBM key."""
    keys = {}
    for decl in program.tensors.values():
        key = (f"shared{group}:{decl.name}" if decl.name in shared
               else f"core{index}:{decl.name}")
        hbm.reserve(key, decl)
        keys[decl.name] = key
    return keys


def _load_tensors(hbm: HbmSpace, programs: list[Program], inputs: list, keys: list[dict[str, str]],
                  shared: dict[str, np.ndarray | None]) -> None:
    """Copy inputs and constants into HBM; everything else stays NaN-filled."""
    loaded: set[str] = set()
    for name, value in shared.items():
        if value is None:
            continue
        owner = next((k for k in keys if name in k), None)
        if owner is None:
            continue  # declared by programs on another chip
        decl = next(p.tensors[name] for p in programs if name in p.tensors)
        check_array(decl, value)
        hbm.array(owner[name], fill=False)[...] = value
        loaded.add(owner[name])
    for program, given, names in zip(programs, inputs, keys, strict=True):
        for decl in program.tensors.values():
            key = names[decl.name]
            if key in loaded:
                continue
            if given and decl.kind == "input" and decl.name in given:
                hbm.array(key, fill=False)[...] = np.asarray(given[decl.name])
                loaded.add(key)
            elif decl.data is not None:
                # a callable is lazily computed data (e.g. a weight laid out at load time)
                data = np.asarray(decl.data() if callable(decl.data) else decl.data)
                if data.dtype != decl.dtype.np_dtype:
                    data = cast(data, decl.dtype)
                if not (decl.kind == "constant" and hbm.adopt(key, data)):
                    hbm.array(key, fill=False)[...] = data.reshape(decl.shape)
                loaded.add(key)
