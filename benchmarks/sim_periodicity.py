"""Would composing repeated layers speed up timing simulation, and would it be exact? One JSON object.

Issue 27 asks for a timing path whose cost grows with distinct work: a program that repeats
(decoder layers) simulated once per pattern and its later repeats composed. This measures, on
the Llama-2-7B prefill (2048 tokens, trn1.2xlarge, weights on the meta device, as
`compile_speed.py --llama-prefill`), what such a composition could save and whether it could
be exact:

1. the CPU seconds of each phase of the latency simulation of the one 5.5M-instruction
   program: planning (`trnsim.sim.plan.planned`), the plan arrays for the compiled loop, the
   compiled loop's first call (numba import and cache load included) and a second, pure
   stepping call on a fresh scheduler, and the `Profile`. Composition replaces only stepping;
2. the repeats: kernel calls (runs of one instruction label) whose op sequence and instruction
   counts repeat with the smallest period, split into layers; for each pair of consecutive
   layers, how many records of the later one equal the earlier one's shifted by the difference
   of their first starts, bit for bit, and the largest difference. A float time plus a cost is
   rounded onto the grid of the time's binade; a shift keeps the rounding only while both
   layers' times lie in one binade (one power of two of nanoseconds).

Run: PYTHONPATH=src python benchmarks/sim_periodicity.py [--seq 2048]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _cpu(call):
    start = time.process_time()
    result = call()
    return result, round(time.process_time() - start, 3)


def phases(program, chip) -> tuple[dict, object]:
    """CPU seconds of each part of one core's timing run; the profile."""
    from trnsim.sim import compiled
    from trnsim.sim.chip import make_schedulers
    from trnsim.sim.plan import compiled_inputs, planned
    from trnsim.sim.profile import Profile

    out = {}
    (planner, plans), out["plan_s"] = _cpu(lambda: planned(program, chip.core))
    (arrays, uids), out["plan_arrays_s"] = _cpu(
        lambda: compiled_inputs(program, chip.core, planner, plans))
    for name in ("first_step_s", "step_s"):  # the first call loads the compiled loop
        scheduler = make_schedulers(chip, 1)[0]
        scheduler.prepare(program)
        _, out[name] = _cpu(lambda s=scheduler: compiled.run_with_kernel(compiled.kernel(), s,
                                                                         arrays, uids))
    profile, out["profile_s"] = _cpu(lambda: Profile(program=program, core=chip.core, chip=chip,
                                                     core_index=0, mode="timing",
                                                     scheduler=scheduler))
    return out, profile


def layers(program) -> list[tuple[int, int]]:
    """(first, end) instruction of each repeat of the longest periodic run of kernel calls."""
    labels = [ins.label for ins in program.instructions]
    heads = [0] + [i for i in range(1, len(labels)) if labels[i] != labels[i - 1]]
    bounds = [*heads, len(labels)]
    calls = [(labels[h].split(":")[0], bounds[k + 1] - h) for k, h in enumerate(heads)]
    for period in range(2, len(calls) // 4):
        run = best = first = 0
        for i in range(len(calls) - period):
            run = run + 1 if calls[i] == calls[i + period] else 0
            if run > best:
                best, first = run, i - run + 1
        if best >= 3 * period:
            count = (best + period) // period
            return [(bounds[first + k * period], bounds[first + (k + 1) * period])
                    for k in range(count)]
    return []


def shifts(profile, spans: list[tuple[int, int]]) -> list[dict]:
    """Per pair of consecutive layers: records that are the earlier layer's shifted exactly."""
    import numpy as np

    columns = (profile.start_ns, profile.end_ns, profile.done_ns)
    out = []
    for (a, a_end), (b, b_end) in itertools.pairwise(spans):
        shift = profile.start_ns[b] - profile.start_ns[a]
        same = np.ones(a_end - a, bool)
        worst = 0.0
        for column in columns:
            moved = column[a:a_end] + shift
            same &= moved == column[b:b_end]
            worst = max(worst, float(np.abs(moved - column[b:b_end]).max()))
        out.append({"layers": [len(out), len(out) + 1], "shift_ns": float(shift),
                    "binades": [int(np.floor(np.log2(profile.start_ns[a]))),
                                int(np.floor(np.log2(profile.done_ns[b:b_end].max())))],
                    "records_exact": int(same.sum()), "records": a_end - a,
                    "max_diff_ns": worst})
    return out


def prefill_program(seq: int):
    """(program of core 0, chip) of the Llama-2-7B prefill at `seq` tokens on trn1.2xlarge,
    traced on an empty compile cache (a temporary $TRNSIM_CACHE_DIR)."""
    import tempfile

    import trnsim
    from trnsim import hardware
    from trnsim.perf.bench import build_model
    from trnsim.perf.zoo import zoo_model

    with tempfile.TemporaryDirectory() as cache:
        os.environ["TRNSIM_CACHE_DIR"] = cache
        model = build_model("llama-2-7b", initialise=False)
        traced = trnsim.trace(model, (), kwargs=zoo_model("llama-2-7b").inputs(1, seq),
                              instance="trn1.2xlarge")
        program = traced.plan.program(0)
        return program, traced.chip or hardware.instance(traced.plan.instance).chip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=2048)
    args = parser.parse_args()
    program, chip = prefill_program(args.seq)
    cpu, profile = phases(program, chip)
    spans = layers(program)
    pairs = shifts(profile, spans)
    print(json.dumps({"benchmark": "sim_periodicity", "seq": args.seq,
                      "instructions": len(program.instructions),
                      "simulation_cpu_s": cpu, "layers": len(spans),
                      "layer_pairs_exact": sum(p["records_exact"] == p["records"] for p in pairs),
                      "pairs": pairs, "load_average": os.getloadavg()}, indent=1))


if __name__ == "__main__":
    main()
