"""`trnsim plan` speed; prints JSON.

search (issue #22's target): `--search` over Llama-3-70B's layouts on 32 trn1n.32xlarge nodes,
in-process and on a local Ray, on a warm per-shape timing cache. The first pass fills the caches
(each distinct layer and head shape simulated once on the training path, timing only, each
collective simulated once) and is reported apart as `cold_s`, with the peak resident memory of
the measuring process (`cold_child_peak_rss_mb`); the timed passes then run warm. Both
backends must return the same plans in the same order (`identical`). `ray_start_s` is the part
of `ray_s` spent starting the local Ray (ray.init), which a `--ray-address` cluster does not pay.

inference: `trnsim plan MODEL --prompt P --output O` in a fresh process on an empty cache
(`cold_s`: the serving path's steps compiled and simulated), then again on the filled cache
(`warm_s`); both wall and CPU seconds of the child.

    python benchmarks/plan_speed.py [--sections search,inference] [--seq 2048] [--tps 8,16,32]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time


def search_section(args) -> dict:
    from trnsim.perf.scale import Training, parse_system, resolve_model, search

    model = resolve_model(args.model)
    system = parse_system(args.system)
    work = Training(args.seq, args.global_batch, 1, "mixed", "adamw")
    options = dict(tps=tuple(int(t) for t in args.tps.split(",")),
                   micro_batches=tuple(int(m) for m in args.micro_batches.split(",")))
    start = time.perf_counter()
    search(model, system, work, backend="in-process", **options)
    cold = time.perf_counter() - start
    # the largest child so far: the measuring process (shapes only: host memory for its graph)
    child_rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    local = search(model, system, work, backend="in-process", **options)
    out = {"model": model.name, "system": system.label(), "seq": args.seq,
           "layouts_evaluated": local.evaluated, "layouts_fitting": local.fitting,
           "cold_s": cold, "cold_child_peak_rss_mb": child_rss_mb,
           "in_process_s": local.seconds,
           "best": local.plans[0].to_dict() if local.plans else None}
    if not args.no_ray:
        try:
            remote = search(model, system, work, backend="ray", **options)
        except Exception as error:  # Ray failing to start is a result to report, not a crash
            out["ray_error"] = f"{type(error).__name__}: {error}"
        else:
            out["ray_s"] = remote.seconds
            out["ray_start_s"] = remote.start_seconds
            out["identical"] = [p.to_dict() for p in remote.plans] == \
                [p.to_dict() for p in local.plans]
    out["under_2_minutes"] = local.seconds < 120 and (args.no_ray or out.get("ray_s", 1e9) < 120)
    return out


def _child(command: list[str], cache: str) -> dict:
    env = dict(os.environ, TRNSIM_CACHE_DIR=cache)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out = {"wall_s": wall, "cpu_s": cpu, "returncode": done.returncode}
    if done.returncode == 0:
        out["plan"] = json.loads(done.stdout)
    else:
        out["error"] = done.stderr.strip().splitlines()[-1:] or ["?"]
    return out


def inference_section(args) -> dict:
    command = [sys.executable, "-m", "trnsim", "plan", args.inference_model, "--system",
               args.inference_system, "--layout", f"TP{args.inference_tp}", "--prompt",
               str(args.prompt), "--output", str(args.output), "--json"]
    with tempfile.TemporaryDirectory(prefix="trnsim-plan-cold-") as cache:
        cold = _child(command, cache)
        warm = _child(command, cache)
    plan = cold.pop("plan", None)
    warm.pop("plan", None)
    return {"command": " ".join(command[1:]), "cold": cold, "warm": warm,
            "ttft_ms": plan and plan["ttft_ms"], "tpot_ms": plan and plan["tpot_ms"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sections", default="search,inference")
    parser.add_argument("--model", default="llama-3-70b")
    parser.add_argument("--system", default="trn1n.32xlarge x 32")
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--global-batch", type=int, default=1024)
    parser.add_argument("--tps", default="8,16,32", help="TP degrees searched (NxD's for 70B)")
    parser.add_argument("--micro-batches", default="1")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--inference-model", default="llama-3.1-8b")
    parser.add_argument("--inference-system", default="trn1.32xlarge")
    parser.add_argument("--inference-tp", type=int, default=32)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--output", type=int, default=128)
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    out = {}
    if "search" in sections:
        out["search"] = search_section(args)
    if "inference" in sections:
        out["inference"] = inference_section(args)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
