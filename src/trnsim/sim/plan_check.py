"""`TRNSIM_PLAN=check`: a program planned per pattern equals it planned per instruction.

Plans a repeated span took from its source span (`isa.Repeats`), or for a varying instruction
from the latest equal one at its place, are checked too: each must be the object the
instruction's own look-up finds (`compare_repeats`); each plan derived from its
source's for a varying (HBM-touching) instruction must equal the plan a full build (`check`,
its own facts, `build_plan`) makes of it (`compare_derived`); and the reference plans every
instruction by look-up, so uids (the order plans were made in) must agree as well.

The planner finds an instruction's `InstructionFacts` (cost, transfer, FLOPs, HBM bytes, ports)
once per pattern (`trnsim.sim.plan.Planner.pattern`: its operands without their addresses) and
reuses them for every instruction of that pattern. That is exact only if no cost reads an
address; this check plans the program again from each distinct instruction's own facts (the
reference path, ``TRNSIM_PLAN=instructions``) and raises `PlanMismatchError` at the first plan
whose fields differ by as much as one bit (floats compared by their bits).
"""

from __future__ import annotations

import struct

from trnsim.errors import TrnsimError
from trnsim.isa import Program
from trnsim.sim.collector import collector_paused
from trnsim.sim.plan import Planner
from trnsim.sim.plan_build import Plan, build_plan, instruction_facts

_FIELDS = ("uid", "code", "busy", "latency", "flops", "precision", "nbytes", "hbm_read",
           "hbm_write", "is_load", "is_multiply", "is_matmul", "reads", "writes",
           "read_neighbors", "write_neighbors", "ports")
_DMA_FIELDS = ("work", "engines", "hbm_per_work", "queue", "in_place")


class PlanMismatchError(TrnsimError):
    """The pattern and per-instruction planning paths disagree (``TRNSIM_PLAN=check``): a cost
    that depends on an address, or a planner bug."""


def compare_plans(program: Program, core, plans: list[Plan]) -> None:
    """Plan `program` on `core` per instruction and compare with `plans` (its plans per
    pattern), plan by plan and field by field."""
    reference = Planner(core, by_pattern=False, repeats=False)
    with collector_paused():
        expected = reference.plan_program(program)
    reference.forget_program()
    if len(expected) != len(plans):
        raise PlanMismatchError(f"{program.name}: {len(plans)} plans per pattern, "
                                f"{len(expected)} per instruction")
    for index, (got, want) in enumerate(zip(plans, expected, strict=True)):
        if plan_fields(got) != plan_fields(want):
            ins = program.instructions[index]
            diff = _differing(got, want)
            raise PlanMismatchError(f"{program.name}: instruction {index} ({ins.name}, "
                                    f"{ins.source or 'no source'}) planned per pattern differs "
                                    f"from per instruction in {', '.join(diff)}")


def compare_repeats(program: Program, planner: Planner, plans: list[Plan]) -> None:
    """Every plan `planner` took for a repeated span (`isa.Repeats`), copied from its source
    span or, for a varying instruction, taken from the latest equal one at its place
    (`Planner._plan_span`) or looked up, is the very plan its instruction's look-up finds in
    the planner's cache (entries are never replaced, so the cache after planning answers as it
    did during it)."""
    repeats = program.repeats
    if repeats is None or not repeats.describes(program) or not planner.use_repeats:
        return
    cache, instructions = planner._cache, program.instructions
    for start, length, _, _ in repeats.spans:
        for index in range(start, start + length):
            try:
                found = cache.get(planner.key(instructions[index]))
            except TypeError:  # planned afresh, and so was its span (by look-up)
                continue
            if found is not plans[index]:
                ins = instructions[index]
                raise PlanMismatchError(f"{program.name}: instruction {index} ({ins.name}, "
                                        f"{ins.source or 'no source'}) took the plan of a "
                                        f"repeat, not the plan its look-up finds")


def compare_derived(program: Program, planner: Planner, plans: list[Plan]) -> None:
    """Every plan `planner` derived from a repeated span's source (`Planner.derived`) equals,
    field by field, the plan of its instruction built in full: checked, its facts from the
    instruction itself, its regions looked up (all found already, so their uids agree)."""
    derived = set(planner.derived_uids)
    if not derived:
        return
    core, instructions = planner.core, program.instructions
    on_chip = planner.on_chip(program)
    try:
        for index, plan in enumerate(plans):
            if plan.uid not in derived:
                continue
            derived.discard(plan.uid)
            ins = instructions[index]
            ins.check(core)
            full = build_plan(ins, core, planner.regions, planner.ports, on_chip=on_chip,
                              facts=instruction_facts(ins, core, planner.ports))
            full.uid = plan.uid
            if plan_fields(plan) != plan_fields(full):
                diff = _differing(plan, full)
                raise PlanMismatchError(f"{program.name}: instruction {index} ({ins.name}, "
                                        f"{ins.source or 'no source'}) derived from its repeat's "
                                        f"source differs from its full build in {', '.join(diff)}")
    finally:
        planner.forget_program()


def plan_fields(plan: Plan) -> tuple:
    """Every timing-relevant field of a plan (and its DMA plan), floats as their bits."""
    dma = plan.dma
    values = [getattr(plan, name) for name in _FIELDS]
    values += [getattr(dma, name) for name in _DMA_FIELDS] if dma is not None else [None] * 5
    return tuple(_bits(v) for v in values)


def _differing(got: Plan, want: Plan) -> list[str]:
    return [name for name, a, b in zip(_FIELDS + _DMA_FIELDS, plan_fields(got),
                                       plan_fields(want), strict=True) if a != b]


def _bits(value):
    if isinstance(value, float):
        return ("float", struct.pack("<d", value))
    if isinstance(value, (tuple, list)):
        return tuple(_bits(v) for v in value)
    return value
