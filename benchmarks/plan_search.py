"""`trnsim plan --search` speed: Llama-3-70B on 32 trn1n.32xlarge nodes, in-process and on a
local Ray, warm per-shape timing cache; prints JSON.

The first pass fills the caches (each layer and head shape simulated once, each collective
simulated once) and is reported apart as `cold_s`; the timed passes then run on the warm cache.
Both backends must return the same plans in the same order (`identical`).

    python benchmarks/plan_search.py [--seq 2048] [--tps 8,16,32] [--micro-batches 1]
"""

from __future__ import annotations

import argparse
import json
import time

from trnsim.perf.scale import Training, parse_system, resolve_model, search


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="llama-3-70b")
    parser.add_argument("--system", default="trn1n.32xlarge x 32")
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--global-batch", type=int, default=1024)
    parser.add_argument("--tps", default="8,16,32", help="TP degrees searched (NxD's for 70B)")
    parser.add_argument("--micro-batches", default="1")
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()
    model = resolve_model(args.model)
    system = parse_system(args.system)
    work = Training(args.seq, args.global_batch, 1, "mixed", "adamw")
    options = dict(tps=tuple(int(t) for t in args.tps.split(",")),
                   micro_batches=tuple(int(m) for m in args.micro_batches.split(",")))
    start = time.perf_counter()
    search(model, system, work, backend="in-process", **options)
    cold = time.perf_counter() - start
    local = search(model, system, work, backend="in-process", **options)
    out = {"model": model.name, "system": system.label(), "seq": args.seq,
           "layouts_evaluated": local.evaluated, "layouts_fitting": local.fitting,
           "cold_s": cold, "in_process_s": local.seconds,
           "best": local.plans[0].to_dict() if local.plans else None}
    if not args.no_ray:
        try:
            remote = search(model, system, work, backend="ray", **options)
        except Exception as error:  # Ray failing to start is a result to report, not a crash
            out["ray_error"] = f"{type(error).__name__}: {error}"
        else:
            out["ray_s"] = remote.seconds
            out["identical"] = [p.to_dict() for p in remote.plans] == \
                [p.to_dict() for p in local.plans]
    out["under_2_minutes"] = local.seconds < 120 and (args.no_ray or out.get("ray_s", 1e9) < 120)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
