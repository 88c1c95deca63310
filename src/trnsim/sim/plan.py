"""`Plan`: what the scheduler needs of one instruction, computed once per distinct instruction.

A plan holds the instruction's stream, its cost (from `Instruction.cost`, the only source of
timing constants), its FLOPs, the regions it reads and writes, the shared ports it holds and,
for DMA, the transfer figures.

`Planner.plan_program` is also where a program is verified: it does what `Program.verify()`
does (every instruction's `check(core)`, every HBM operand inside its tensor) before anything
runs, but checks and plans each *distinct* instruction once. An unrolled loop re-emits equal
instructions; `check` and `cost` are pure functions of the instruction's operands and attributes
and the core, so one dict lookup replaces both for every repeat. The key leaves out ``source``
and ``label``, which only name the instruction (an error is raised, with its source, by the
first instruction of a kind; an equal one elsewhere would raise the same error).

The part of a plan that depends only on the instruction's form and the core (`InstructionFacts`:
cost, transfer, FLOPs, ports, HBM bytes) is kept process-wide per *pattern*: the instruction's
key with each access pattern replaced by its form (`AccessPattern.form`: no offset, start
partition or tensor). A lowered program's thousands of distinct instructions (every matmul tile
at its own addresses) are ~100 patterns, so `cost` runs once per pattern, and only what depends
on addresses is found per distinct instruction: `check` (its facts are then also kept under the
instruction's key, so an equal instruction in another program skips check and pattern with one
look-up), regions, HBM bounds, the HBM traffic of on-chip tensors and in-place hand-offs.
A lowered model repeats itself (its layers' kernel calls are replays of the first: `isa.Repeats`,
recorded by the lowering): a replayed span takes the first call's plans by list slicing and looks
up only its HBM-touching instructions, so planning costs per distinct call, not per instruction
(`Planner.plan_program`); one whose look-up misses (another tensor, another block of one) has its
plan derived from the first call's: its facts, with only what its HBM operands change found
again (`Planner.derived`). A varying instruction equal to the latest one at its place (the same
weights read by every call of a layer) takes that one's plan without hashing its key.
In a program its front end checked, an on-chip instruction of no KIND whose pattern was met
before is a copy of that pattern's first plan (its template) with its own regions
(`Planner._templated`): the lowered first call's matmul tiles, each at its own addresses.
`TRNSIM_PLAN` chooses the path: ``patterns`` (default), ``instructions`` (facts from each
distinct instruction itself, and every instruction looked up: the reference) or ``check``
(both, a `PlanMismatchError` at the first plan field that differs by as much as one bit, at
the first plan taken from a repeat that is not the object its look-up finds, and at the first
derived plan that differs from its full build: `trnsim.sim.plan_check`; the reference
builds every plan in full, templates included).
"""

from __future__ import annotations

import bisect
import dataclasses
import operator
import os
import weakref
from collections.abc import Mapping
from itertools import repeat
from operator import attrgetter

import numpy as np

from trnsim.errors import InvalidArgumentError, LimitExceededError, UnknownNameError
from trnsim.isa import AccessPattern, Instruction, InstructionList, Memory, Program
from trnsim.sim.collector import collector_paused
from trnsim.sim.dependencies import RegionIndex
from trnsim.sim.plan_build import (  # noqa: F401  (re-exported: sim modules import Plan here)
    DmaPlan,
    InstructionFacts,
    Plan,
    PortTable,
    _copy_plan,
    _hbm_traffic,
    build_plan,
    instruction_facts,
)

# InstructionFacts per core of every checked instruction met, by its key (so an equal
# instruction skips check and facts with one look-up), and of every pattern met (so another
# instruction of that pattern skips its facts); each cleared when it holds this many (a bound on
# memory, not on correctness)
_FACTS: dict = {}
_PATTERNS: dict = {}
_FACTS_KEPT = 1_000_000

PLAN_ENV = "TRNSIM_PLAN"
PLAN_PATHS = ("patterns", "instructions", "check")


def plan_path() -> str:
    """`TRNSIM_PLAN`: how instruction facts are found (see the module doc)."""
    value = os.environ.get(PLAN_ENV, "patterns").strip().lower() or "patterns"
    if value not in PLAN_PATHS:
        raise InvalidArgumentError(f"{PLAN_ENV}={value!r} is not one of {', '.join(PLAN_PATHS)}")
    return value


class Planner:
    """Checks and plans a core's instructions; equal instructions share one plan."""

    def __init__(self, core, regions: RegionIndex | None = None, ports: PortTable | None = None,
                 by_pattern: bool = True, repeats: bool = True) -> None:
        self.core = core
        self.regions = regions if regions is not None else RegionIndex(core)
        self.ports = ports if ports is not None else PortTable(core)
        self.distinct: list[Plan] = []  # plan.uid indexes this
        self._cache: dict = {}
        self._getters: dict[type, attrgetter] = {}
        self._bounded: set[AccessPattern] = set()
        self._columns: dict[str, tuple[int, np.ndarray]] = {}
        # InstructionFacts by instruction key and by pattern: process-wide for the core's own
        # port table (by_pattern=False: by key alone, for this planner alone, the reference
        # `plan_check` compares with)
        shared = ports is None and by_pattern
        self.by_pattern = by_pattern
        # take a program's repeated spans' plans from the earlier span (`plan_program`); how
        # many plans were taken so, and the spans taken so in the last plans made (those plans,
        # the spans: `plan_uids` copies their uids alike)
        self.use_repeats = repeats
        self.copied = 0
        # make the plans of a repeated span's varying instructions from their source's
        # (`derived`; False: by look-up and a full build, as any other instruction); how many
        self.derive = repeats
        self.derived_uids: list[int] = []
        # per source instruction of a replayed span, the key and plan of the latest instruction
        # planned by its key at its place (`_plan_varying`; reset per program)
        self._slots: dict[int, tuple[tuple, Plan]] = {}
        # per pattern met in a checked program, its first plan if the others of that pattern may
        # copy it (`_templated`), else False; how many plans were made so
        self._templates: dict[tuple, Plan | bool] = {}
        self.templated = 0
        # each distinct plan's facts, and whether it is its facts' alone (no on-chip tensor)
        self._facts_of: list[InstructionFacts] = []
        self._plain: list[bool] = []
        self.copied_spans: tuple[list[Plan] | None, list] = (None, [])
        self._facts = _FACTS.setdefault(core, {}) if shared else {}
        self._patterns = _PATTERNS.setdefault(core, {}) if shared else {}
        self._on_chip: tuple[Program | None, dict[str, int]] = (None, {})
        # seen a control-flow, register-addressed or synchronising instruction (KIND != ""):
        # the program then runs by program counter (trnsim.sim.chip)
        self.has_kinds = False
        # seen a register-addressed one (KIND "dynamic"): its concrete instructions are planned
        # as the program runs, so this planner grows with each run (`planned` keeps none such)
        self.has_dynamic = False

    def plan_program(self, program: Program) -> list[Plan]:
        """One plan per instruction, in program order; raises the first legality error.

        A span the program records as a repeat of an earlier one (`isa.Repeats`, a replayed
        kernel call) takes the earlier span's plans by slicing, and only its varying
        (HBM-touching) instructions are looked up: an instruction equal to an earlier one but
        for its name has its key, so the look-up would return that one's plan (the same object)
        and plan nothing new; the varying ones, planned in program order, meet every new plan
        in the order the look-ups would. Instructions planned afresh (unhashable) are not
        copied: each is planned again, as the look-up path does."""
        # a front end's check counts for the core it checked against (`Program.checked`)
        check = not (program.checked and (program.target is self.core
                                          or program.target == self.core))
        instructions = program.instructions
        plans: list[Plan] = []
        fresh: list[int] = []  # indices planned without a key, in order
        repeats = program.repeats if self.use_repeats else None
        spans = repeats.spans if repeats is not None and repeats.describes(program) else ()
        position = 0
        copied: list = []
        self._slots = {}  # (program indices)
        with self.regions.deferred():
            for start, length, source, varying in spans:
                self._plan_range(program, position, start, check, plans, fresh)
                first = bisect.bisect_left(fresh, source)
                if first < len(fresh) and fresh[first] < source + length:
                    self._plan_range(program, start, start + length, check, plans, fresh)
                else:
                    self._plan_span(program, start, length, source, varying, check, plans,
                                    fresh)
                    self.copied += length - len(varying)
                    copied.append((start, length, source, varying))
                position = start + length
            self._plan_range(program, position, len(instructions), check, plans, fresh)
        self.copied_spans = (plans, copied)
        return plans

    def _plan_range(self, program: Program, first: int, end: int, check: bool, plans: list[Plan],
                    fresh: list[int]) -> None:
        """Append the plans of instructions [first, end), each found by its key."""
        cache, getters = self._cache, self._getters
        append = plans.append
        # instructions their front end checked: copies of their pattern's template, if any
        templated = self._templated if self.by_pattern and not check else None
        for ins in program.instructions[first:end]:
            cls = type(ins)  # (`key`, inline: this loop runs once per instruction)
            getter = getters.get(cls)
            key = (cls, (getter or self._getter(cls))(ins))
            try:
                plan = cache.get(key)
            except TypeError:  # an unhashable attribute: check and plan it every time
                fresh.append(len(plans))  # plans holds one per instruction before this one
                append(self._new(ins, program, check))
                continue
            if plan is None:
                plan = cache[key] = (self._new(ins, program, check, key) if templated is None
                                     else templated(ins, program, key))
            append(plan)

    def _plan_span(self, program: Program, start: int, length: int, source: int,
                   varying: tuple[int, ...], check: bool, plans: list[Plan],
                   fresh: list[int]) -> None:
        """Append the plans of a replayed span: its source span's, copied between its varying
        offsets, and each varying instruction's. One whose key equals the key of the latest
        instruction planned by its key at its place (`_slots`, at first the source itself: a
        source span has no fresh plan) takes that one's plan, which its look-up would find;
        any other is looked up (`_plan_varying`). The varying instructions' keys are found and
        compared with their places' all at once: a layer's call that reads the same tensors as
        the layer's previous call takes every latest plan in one step."""
        if not varying:
            plans += plans[source:source + length]
            return
        instructions, slots = program.instructions, self._slots
        places = [source + offset for offset in varying]
        lasts = list(map(slots.get, places))
        if None in lasts:
            for k, last in enumerate(lasts):
                if last is None:
                    base = places[k]
                    lasts[k] = slots[base] = (self.key(instructions[base]), plans[base])
        keys = self._keys([instructions[start + offset] for offset in varying])
        if _same_key(keys, [last[0] for last in lasts]):  # (lists compare key by key)
            span = plans[source:source + length]
            for offset, last in zip(varying, lasts, strict=True):
                span[offset] = last[1]
            plans += span
            return
        append = plans.append
        after = 0
        for offset, key, last in zip(varying, keys, lasts, strict=True):
            plans += plans[source + after:source + offset]
            after = offset + 1
            if _same_key(key, last[0]):
                append(last[1])
            else:
                self._plan_varying(program, start + offset, source + offset, key, check,
                                   plans, fresh)
        plans += plans[source + after:source + length]

    def _keys(self, instructions: list[Instruction]) -> list[tuple]:
        """`key` of each of `instructions`: by one getter over the list when they are of one
        class (a replayed call's DMAs)."""
        classes = set(map(type, instructions))
        if len(classes) != 1:
            return list(map(self.key, instructions))
        cls = classes.pop()
        getter = self._getters.get(cls) or self._getter(cls)
        return list(zip(repeat(cls), map(getter, instructions)))

    def _plan_varying(self, program: Program, index: int, source: int, key: tuple,
                      check: bool, plans: list[Plan], fresh: list[int]) -> None:
        """Append the plan of a replayed span's varying instruction `index` (its `key`), found
        by its key, or made new from the plan of its source (`source`, planned already) when it
        differs from it only in HBM operands of the same form (`derived`)."""
        ins = program.instructions[index]
        try:
            plan = self._cache.get(key)
        except TypeError:  # an unhashable attribute: as `_plan_range`
            fresh.append(len(plans))
            plans.append(self._new(ins, program, check))
            return
        if plan is None:
            base = program.instructions[source]
            plan = (self.derived(ins, base, plans[source], program)
                    if self.derive and _hbm_renamed(key[1], self.key(base)[1]) else None)
            if plan is None:
                plan = self._new(ins, program, check, key)
            self._cache[key] = plan
        self._slots[source] = (key, plan)
        plans.append(plan)

    def derived(self, ins: Instruction, base: Instruction, base_plan: Plan,
                program: Program) -> Plan:
        """The plan of `ins`, which equals `base` (planned as `base_plan`) but for the tensor or
        offset of HBM operands of the same form (`_hbm_renamed`): `base_plan` with what depends
        on those operands found again. The facts (`InstructionFacts`) are the base's: they are
        functions of the operands' forms. `check` is not run again: an HBM operand's check reads
        its form alone (its bounds are checked here, against its own tensor). What an HBM
        operand's tensor and offset change: its region, and, when it or the base touches a
        tensor kept on chip, the HBM traffic and a DMA's hand-off (then the plan is built from
        the facts, `build_plan`). ``TRNSIM_PLAN=check`` compares every derived plan with a full
        build (`trnsim.sim.plan_check.compare_derived`)."""
        facts = self._facts_of[base_plan.uid]
        reads, writes = ins.reads(), ins.writes()
        on_chip = self.on_chip(program)
        plain = self._operands_fit(ins, reads, writes, program, on_chip)
        if plain and self._plain[base_plan.uid]:
            plan = _copy_plan(base_plan)
            plan.reads, plan.read_neighbors = self._swap_hbm(reads, base_plan.reads,
                                                             base_plan.read_neighbors)
            plan.writes, plan.write_neighbors = self._swap_hbm(writes, base_plan.writes,
                                                               base_plan.write_neighbors)
        else:
            plan = build_plan(ins, self.core, self.regions, self.ports, on_chip=on_chip,
                              facts=facts, operands=(reads, writes))
        self.derived_uids.append(len(self.distinct))
        return self._add(plan, facts, plain)

    def _operands_fit(self, ins: Instruction, reads: tuple[AccessPattern, ...],
                      writes: tuple[AccessPattern, ...], program: Program,
                      on_chip: Mapping[str, int]) -> bool:
        """Check each HBM operand's bounds (once per pattern); whether none is a tensor kept on
        chip (the plan is then its facts' alone, `build_plan`: a derivation may copy it)."""
        hbm, bounded = Memory.HBM, self._bounded
        plain = True
        for ap in (*reads, *writes):
            if ap.memory is hbm:
                if ap not in bounded:
                    _check_hbm_bounds(ins, ap, program)
                    bounded.add(ap)
                if on_chip and ap.tensor in on_chip:
                    plain = False
        return plain

    def _swap_hbm(self, operands: tuple[AccessPattern, ...], uids: tuple[int, ...],
                  neighbors: tuple[list[int], ...]) -> tuple[tuple, tuple]:
        """The base plan's region uids and neighbour lists of `operands`, with each HBM
        operand's own (found in operand order, as `build_plan` finds them)."""
        hbm = Memory.HBM
        if len(operands) == 1:  # (a DMA's one source or destination)
            return self.regions.regions_of(operands) if operands[0].memory is hbm else (uids, neighbors)
        swapped = None
        for position, ap in enumerate(operands):
            if ap.memory is hbm:
                if swapped is None:
                    swapped = list(uids), list(neighbors)
                found = self.regions.region(ap)
                swapped[0][position], swapped[1][position] = found.uid, found.neighbor_ids
        return (uids, neighbors) if swapped is None else (tuple(swapped[0]), tuple(swapped[1]))

    def plan(self, ins: Instruction, program: Program) -> Plan:
        """The plan of one instruction met at run time (a register-addressed operand resolved):
        checked and planned once per distinct instruction, like `plan_program`'s."""
        key = self.key(ins)
        plan = self._cache.get(key)
        if plan is None:
            plan = self._cache[key] = self._new(ins, program, key=key)
        return plan

    def key(self, ins: Instruction) -> tuple:
        """What makes two instructions the same for checking and timing: class and attributes
        other than ``source`` and ``label``."""
        cls = type(ins)
        return cls, (self._getters.get(cls) or self._getter(cls))(ins)

    def _getter(self, cls: type) -> attrgetter:
        """The attribute getter of `key` for instructions of `cls` (made once per class)."""
        names = [f.name for f in dataclasses.fields(cls) if f.name not in ("source", "label")]
        getter = self._getters[cls] = attrgetter(*names, "engine")  # always a tuple
        return getter

    def pattern(self, key: tuple) -> tuple:
        """The instruction's pattern: its `key` with each access pattern replaced by its form
        (what its `InstructionFacts` depend on)."""
        cls, values = key
        # (`AccessPattern.form`, its number read when computed: a patterned program computes
        # its patterns' forms once and meets each in ~10^5 keys)
        return cls, tuple([(v._form if v._form is not None else v.form())
                           if type(v) is AccessPattern else v for v in values])

    def _new(self, ins: Instruction, program: Program, check: bool = True, key=None) -> Plan:
        """check=False for instructions their front end checked, on this core, when it emitted
        them. `key`: the instruction's `key` (None: not hashable), under which its
        `InstructionFacts` are kept process-wide once it is checked; they are found once per
        `pattern`."""
        kind = getattr(type(ins), "KIND", "")
        if kind:
            self.has_kinds = True
            self.has_dynamic = self.has_dynamic or kind == "dynamic"
        facts = self._facts.get(key) if key is not None else None
        if facts is None and check:
            ins.check(self.core)
        reads, writes = ins.reads(), ins.writes()
        on_chip = self.on_chip(program)
        plain = self._operands_fit(ins, reads, writes, program, on_chip)
        if facts is None:
            pattern = self.pattern(key) if key is not None and self.by_pattern else None
            facts = self._patterns.get(pattern) if pattern is not None else None
            if facts is None:
                facts = instruction_facts(ins, self.core, self.ports)
                if pattern is not None:
                    _keep(self._patterns, pattern, facts)
            if key is not None:
                _keep(self._facts, key, facts)
        return self._add(build_plan(ins, self.core, self.regions, self.ports, on_chip=on_chip,
                                    facts=facts, operands=(reads, writes)), facts, plain)

    def _templated(self, ins: Instruction, program: Program, key: tuple) -> Plan:
        """`_new` for an instruction its front end checked. The first plan of each pattern made
        so is kept as its template (`_templates`) when it is an on-chip instruction's of no KIND
        (no DMA, no HBM operand: its fields are its facts' alone, `build_plan`); another
        instruction of that pattern is a copy of it with its own regions. ``TRNSIM_PLAN=check``
        compares every plan with the reference's, each built in full (`compare_plans`)."""
        pattern = self.pattern(key)
        template = self._templates.get(pattern)
        if not template:
            plan = self._new(ins, program, False, key)
            if template is None:
                self._templates[pattern] = plan if self._may_template(ins, plan) else False
            return plan
        # (no HBM operand to bound or find: a pattern fixes its operands' memories, and the
        # template's had none, `_may_template`)
        plan = _copy_plan(template)
        plan.reads, plan.read_neighbors, plan.writes, plan.write_neighbors = \
            self.regions.operand_regions(ins.reads(), ins.writes())
        self.templated += 1
        # (its facts are not kept by its key, as `_new` keeps them: an unchecked program that
        # meets an equal instruction checks it, which passes as its front end's check did, and
        # finds its facts by pattern; `_add`, inline)
        distinct = self.distinct
        plan.uid = len(distinct)
        distinct.append(plan)
        self._facts_of.append(self._facts_of[template.uid])
        self._plain.append(True)
        return plan

    def _may_template(self, ins: Instruction, plan: Plan) -> bool:
        """Whether `plan` is its facts' and its regions' alone: not a DMA, no HBM operand or
        traffic, no KIND (which `_new` records)."""
        return (plan.code != -1 and plan.dma is None and not getattr(type(ins), "KIND", "")
                and not plan.hbm_read and not plan.hbm_write
                and all(ap.memory is not Memory.HBM for ap in (*ins.reads(), *ins.writes())))

    def _add(self, plan: Plan, facts: InstructionFacts, plain: bool) -> Plan:
        """Number `plan` as the next distinct plan, kept with its facts and whether it is
        its facts' alone (`_operands_fit`)."""
        plan.uid = len(self.distinct)
        self.distinct.append(plan)
        self._facts_of.append(facts)
        self._plain.append(plain)
        return plan

    def column(self, attribute: str) -> np.ndarray:
        """An integer figure (flops, nbytes, ...) of every distinct plan, indexed by uid; made
        once for the plans found so far (profiles gather per-record figures from it)."""
        count, values = self._columns.get(attribute, (-1, None))
        if count != len(self.distinct):
            distinct = self.distinct
            values = (np.fromiter(map(attrgetter(attribute), distinct), np.int64, len(distinct))
                      if distinct else np.zeros(1, np.int64))
            self._columns[attribute] = (len(self.distinct), values)
        return values

    def forget_program(self) -> None:
        """Drop the reference `on_chip` keeps to the last program (a kept planner must not
        keep its program alive)."""
        self._on_chip = (None, {})

    def on_chip(self, program: Program) -> dict[str, int]:
        """The program's tensors the compiler keeps in SBUF (`TensorDecl.on_chip`), each with the
        byte its on-chip rows start at (`TensorDecl.on_chip_from`)."""
        if self._on_chip[0] is not program:
            self._on_chip = (program, {n: t.on_chip_from for n, t in program.tensors.items()
                                       if t.on_chip})
        return self._on_chip[1]


class _Planned:
    """A program's plans on one core, with what they were made from (`planned`)."""

    __slots__ = ("arrays", "changes", "core", "instructions", "planner", "plans", "tensors")

    def __init__(self, core, program: Program, planner: Planner, plans: list[Plan]) -> None:
        self.core = core
        # held: their ids cannot be reused; a list that counts its writes (`InstructionList`,
        # whose unread replays are not built) is held itself, with its count
        instructions = program.instructions
        lazy = isinstance(instructions, InstructionList)
        self.instructions = instructions if lazy else tuple(instructions)
        self.changes = instructions.changes if lazy else None
        self.tensors = _tensor_signature(program)
        self.planner = planner
        self.plans = plans
        self.arrays = None  # (PlanArrays, uids) for the compiled loop, made on first use

    def fits(self, core, program: Program) -> bool:
        instructions, held = program.instructions, self.instructions
        if self.changes is not None:
            same = held is instructions and instructions.changes == self.changes
        else:
            same = (not isinstance(instructions, InstructionList)
                    and len(instructions) == len(held)
                    and all(map(operator.is_, instructions, held)))
        return (same and (self.core is core or self.core == core)
                and _tensor_signature(program) == self.tensors)


# id(program.instructions) -> the plans of the program that last ran that list, on its core.
# Keyed on the instruction list, not the program: a tensor-parallel rank's program is its own
# object (its shard of the weights, `sim.execution_plan.shard_program`) over the same list, and
# plans do not read tensor data. `_Planned.fits` checks instructions, tensors and core.
_PLANNED: dict[int, _Planned] = {}


def _tensor_signature(program: Program) -> tuple:
    return (program.checked, tuple((t.name, t.shape, t.dtype.name, t.on_chip, t.on_chip_from)
                                   for t in program.tensors.values()))


def planned(program: Program, core) -> tuple[Planner, list[Plan]]:
    """The planner and plans of `program` on `core`, planned once per instruction list and kept
    while a program over it lives: the copies of a model on a chip's cores, and its later runs
    (latency, then loaded throughput), share them. Plans and region geometry are pure functions
    of the instructions, their tensors' shapes and the core; each run keeps its own times
    (`CoreScheduler`). So do the tensor-parallel ranks of a plan (their programs share one
    instruction list, each with its shard's weights): collectives' rendezvous and branches are
    planned with the rest, and each rank's registers and program counter live in its own run
    (`trnsim.sim.chip.CoreRun`). Only a program with register-addressed operands is planned
    afresh for each run: it meets new (concrete) instructions while it runs, and they would
    grow a shared planner."""
    key = id(program.instructions)
    found = _PLANNED.get(key)
    if found is not None and found.fits(core, program):
        return found.planner, found.plans
    path = plan_path()
    reference = path == "instructions"
    planner = Planner(core, by_pattern=not reference, repeats=not reference)
    # (plans and regions live as long as the program: `promote`, see `trnsim.sim.collector`)
    with collector_paused(promote=True):
        plans = planner.plan_program(program)
    planner.forget_program()
    if path == "check":
        from trnsim.sim.plan_check import compare_derived, compare_plans, compare_repeats

        compare_repeats(program, planner, plans)
        compare_derived(program, planner, plans)
        compare_plans(program, core, plans)
    if not planner.has_dynamic:
        if key not in _PLANNED:
            weakref.finalize(program, _PLANNED.pop, key, None)
        _PLANNED[key] = _Planned(core, program, planner, plans)
    return planner, plans


def compiled_inputs(program: Program, core, planner: Planner, plans: list[Plan]):
    """(`PlanArrays` of the planner's distinct plans, the plan uid of each instruction) for the
    compiled loop (`trnsim.sim.compiled`), kept beside the plans `planned` keeps."""
    from trnsim.sim.compiled import PlanArrays

    found = _PLANNED.get(id(program.instructions))
    if found is not None and found.plans is plans and found.arrays is not None:
        return found.arrays
    with collector_paused():
        columns = PlanArrays(planner.distinct, planner.regions.neighbor_lists())
    arrays = (columns, plan_uids(planner, plans))
    if found is not None and found.plans is plans:
        found.arrays = arrays
    return arrays


def plan_uids(planner: Planner, plans: list[Plan]) -> np.ndarray:
    """The uid of each plan of `plans`; a span whose plans the planner copied from an earlier
    span (`Planner.plan_program`) copies that span's uids, then takes its varying ones."""
    owner, spans = planner.copied_spans
    spans = spans if owner is plans else ()
    uids = np.empty(len(plans), np.int64)
    position = 0
    for start, length, source, varying in (*spans, (len(plans), 0, 0, ())):
        uids[position:start] = np.fromiter((p.uid for p in plans[position:start]), np.int64,
                                           start - position)
        uids[start:start + length] = uids[source:source + length]
        for offset in varying:
            uids[start + offset] = plans[start + offset].uid
        position = start + length
    return uids


def _keep(kept: dict, key: tuple, facts: InstructionFacts) -> None:
    if len(kept) >= _FACTS_KEPT:
        kept.clear()
    kept[key] = facts


def _check_hbm_bounds(ins: Instruction, ap: AccessPattern, program: Program) -> None:
    decl = program.tensors.get(ap.tensor)
    if decl is None:
        ins.fail(UnknownNameError("HBM tensor", ap.tensor, program.tensors))
    low, high = ap.byte_span()
    if low < 0 or high > decl.nbytes:
        ins.fail(LimitExceededError(f"{ins.name}: access {ap.describe()} reaches byte", high, decl.nbytes,
                                    context=f"HBM tensor {decl.name} size"))




def _same_key(key: tuple | list, other: tuple | list) -> bool:
    """Whether two `Planner.key`s (or two lists of them, key by key) are equal, as the plan
    cache would find (False for keys that cannot be compared, e.g. holding arrays: those are
    planned by their look-up)."""
    try:
        return key == other
    except (TypeError, ValueError):
        return False


def _hbm_renamed(values: tuple, base: tuple) -> bool:
    """Whether two instructions' key values (`Planner.key`) are equal but for HBM operands of
    the same form (another tensor or offset; `AccessPattern.form`), top level or in a tuple."""
    for a, b in zip(values, base, strict=True):
        if a is b:
            continue
        kind = type(a)
        if kind is AccessPattern:
            if not (type(b) is AccessPattern and (_same_hbm_form(a, b) or a == b)):
                return False
        elif kind is tuple:
            if type(b) is not tuple or len(a) != len(b) or not _hbm_renamed(a, b):
                return False
        elif a != b:
            return False
    return True


def _same_hbm_form(a: AccessPattern, b: AccessPattern) -> bool:
    """Two HBM patterns of one `AccessPattern.form` (`AccessPattern.same_form`)."""
    return a.memory is Memory.HBM and a.same_form(b)


