"""Where planning's time goes on a real program (issue 27), as one JSON object.

`trnsim.sim.plan.planned` was 19.6 CPU s of the Llama-2-7B prefill's (2048 tokens, 5.5M
instructions) timing simulation (`benchmarks/sim_periodicity.py`), ~3.5 us an instruction though
~96% of instructions equal one planned before. This splits it, each part a loop over the whole
program in CPU seconds of this process:

- ``plan_s``: a fresh `Planner.plan_program` with the process-wide facts tables emptied (what a
  fresh process's first planning pays), and ``new_s``, its share in `Planner._new` (the distinct
  instructions built in full: check, facts, HBM bounds, regions, `build_plan`), ``derived_s``
  its share in `Planner.derived` (the distinct varying instructions of replayed spans, made
  from their source's plan: ``plans_derived``), ``templated_s`` its share in
  `Planner._templated` (a checked program's distinct instructions not derived: each a copy of
  its pattern's template, ``plans_templated`` of them, or for the rest built in full, `_new`,
  whose time ``new_s`` counts too); ``plans_copied``, how many plans it took from
  the spans of replayed kernel calls instead of looking their instructions up;
- ``fetch_s``: fetching each instruction's key attributes alone (the class's `attrgetter`): the
  floor of any look-up done per instruction in Python;
- ``key_s``: `Planner.key` (the fetch, a method call and the key tuple);
- ``lookup_s``: `Planner.key` plus the look-up in the filled plan cache (every one a hit): the
  hashing (`AccessPattern.__hash__` is Python-level) and comparing (an equal pattern that is a
  separate object compares field by field, in Python) on top of ``key_s``.

Also the counts behind them: instructions, distinct plans, access-pattern objects among the
instructions' attributes and their distinct values.

Run: PYTHONPATH=src python benchmarks/plan_breakdown.py [--seq 2048]
"""

from __future__ import annotations

import argparse
import json
import os
import time

from sim_periodicity import prefill_program


def _cpu(call) -> tuple[object, float]:
    start = time.process_time()
    result = call()
    return result, round(time.process_time() - start, 3)


def _fresh_plan(program, core, plan_module) -> tuple[object, dict[str, float]]:
    """(planner, CPU s inside `Planner._new`, `derived` and `_templated`) of a first planning in
    a fresh process."""
    from trnsim.sim.collector import collector_paused

    plan_module._FACTS.clear()
    plan_module._PATTERNS.clear()
    planner = plan_module.Planner(core)
    inside = {"_new": 0.0, "derived": 0.0, "_templated": 0.0}
    for name in inside:
        planner.__dict__[name] = _timed(getattr(planner, name), inside, name)
    with collector_paused():
        planner.plan_program(program)
    return planner, {f"{name.strip('_')}_s": round(seconds, 3) for name, seconds in inside.items()}


def _timed(method, inside: dict, name: str):
    def timed(*args, **kwargs):
        start = time.process_time()
        try:
            return method(*args, **kwargs)
        finally:
            inside[name] += time.process_time() - start
    return timed


def _fetch(instructions, planner) -> None:
    getters = planner._getters
    for ins in instructions:
        getters[type(ins)](ins)


def _keys(instructions, planner) -> None:
    key = planner.key
    for ins in instructions:
        key(ins)


def _lookups(instructions, planner) -> None:
    key, cache = planner.key, planner._cache
    for ins in instructions:
        cache.get(key(ins))


def breakdown(program, core) -> dict:
    from trnsim.isa import AccessPattern
    from trnsim.sim import plan as plan_module

    instructions = program.instructions
    out: dict = {"instructions": len(instructions)}
    (planner, inside), out["plan_s"] = _cpu(lambda: _fresh_plan(program, core, plan_module))
    out.update(inside)
    out["distinct_plans"] = len(planner.distinct)
    out["plans_derived"] = len(planner.derived_uids)
    out["plans_templated"] = planner.templated
    out["plans_copied"] = planner.copied  # from replayed kernel calls' spans (`isa.Repeats`)
    for name, loop in (("fetch_s", _fetch), ("key_s", _keys), ("lookup_s", _lookups)):
        _, out[name] = _cpu(lambda loop=loop: loop(instructions, planner))
    patterns = {id(v): v for ins in instructions for v in planner.key(ins)[1]
                if type(v) is AccessPattern}
    out["pattern_objects"] = len(patterns)
    out["pattern_values"] = len(set(patterns.values()))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=2048)
    args = parser.parse_args()
    program, chip = prefill_program(args.seq)
    print(json.dumps({"benchmark": "plan_breakdown", "seq": args.seq,
                      **breakdown(program, chip.core), "load_average": os.getloadavg()},
                     indent=1))


if __name__ == "__main__":
    main()
