"""Whole-process speed of `trnsim` commands (issue 27): prints one JSON object.

Each case runs the command as a user would (`python -m trnsim ...`, output to a pipe) in a child
process and reports its wall seconds and its CPU seconds (user + system, from the child's own
resource usage), peak RSS, and the load average of the machine before it (the machine is shared).

- `bench`: issue 27's warm figures: `trnsim bench --models bert-large-uncased --batch 1
  --instances inf2.xlarge` (target 2 s whole process) and the default `trnsim bench` (target
  10 s), each first run once to fill the cache (`first_run`: cold on a fresh cache), then
  --repeats warm runs.
- `llama`: Llama-2-7B prefill at 2048 tokens, trace + timing (`trnsim bench --models llama-2-7b
  --seq 2048 --batch 1 --instances trn1.2xlarge`: the whole model, 32 layers, weights on the
  meta device, one NeuronCore): `first_run` (target 20 s cold) and warm.
- `importtime`: `python -X importtime` of the warm BERT-large bench command: the seconds spent
  importing, the heaviest top-level imports, and whether torch or transformers were imported.

The cache is a fresh temporary $TRNSIM_CACHE_DIR unless --cache names one (an existing warm cache
makes the first runs warm: use a fresh one for cold figures). Python's bytecode is cached as an
installed package's is (`--bytecode cached`, the default: written by the first run to a temporary
PYTHONPYCACHEPREFIX, even where PYTHONDONTWRITEBYTECODE is set); `--bytecode none` compiles
every module from source in every process, as a checkout run with PYTHONDONTWRITEBYTECODE=1 does.

    PYTHONPATH=src python benchmarks/cli_speed.py [--sections bench llama importtime]
        [--repeats 3] [--cache DIR] [--bytecode cached|none]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

BERT_LARGE = ("bench", "--models", "bert-large-uncased", "--batch", "1",
              "--instances", "inf2.xlarge")
DEFAULT_BENCH = ("bench",)
LLAMA_PREFILL = ("bench", "--models", "llama-2-7b", "--seq", "2048", "--batch", "1",
                 "--instances", "trn1.2xlarge")
TARGETS_S = {"bench_bert_large_warm_wall_s": 2.0, "bench_default_warm_wall_s": 10.0,
             "llama_2_7b_prefill_2048_cold_wall_s": 20.0}


def run(args: tuple[str, ...], env: dict, python_flags: tuple[str, ...] = ()) -> dict:
    """One child process: wall, CPU (user + sys) and peak RSS from its own rusage."""
    load = os.getloadavg()
    # files, not pipes: a child filling one pipe while we read the other would block both
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        child = subprocess.Popen([sys.executable, *python_flags, "-m", "trnsim", *args], env=env,
                                 stdout=out, stderr=err)
        # (wait4, not wait(): it reaps the child and gives its resource usage)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"trnsim {' '.join(args)} failed ({child.returncode}):\n"
                         f"{stderr.decode()[-2000:]}")
    return {"wall_s": round(wall, 3), "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
            "peak_rss_mb": round(usage.ru_maxrss / 1024), "load_average_before": load,
            "stderr": stderr.decode(), "stdout": stdout.decode()}


def _figures(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in ("stderr", "stdout")}


def cold_and_warm(args: tuple[str, ...], env: dict, repeats: int) -> dict:
    """The command once on the cache as it is (cold if empty), then `repeats` warm runs."""
    first = _figures(run(args, env))
    warm = [_figures(run(args, env)) for _ in range(repeats)]
    return {"command": "trnsim " + " ".join(args), "first_run": first, "warm_runs": warm,
            "warm_median_wall_s": statistics.median(w["wall_s"] for w in warm),
            "warm_min_wall_s": min(w["wall_s"] for w in warm),
            "warm_median_cpu_s": statistics.median(w["cpu_s"] for w in warm)}


def import_time(args: tuple[str, ...], env: dict, top: int = 12) -> dict:
    """`python -X importtime` of a (warm) command: total import seconds, the heaviest top-level
    imports (cumulative), and whether torch / transformers were loaded at all."""
    result = run(args, env, ("-X", "importtime"))
    rows = []  # "import time: SELF_US | CUMULATIVE_US | " + two spaces per nesting level + name
    for line in result["stderr"].splitlines():
        if line.startswith("import time:") and "cumulative" not in line:
            self_us, cumulative_us, name = line[len("import time:"):].split("|", 2)
            rows.append((name[1:], int(self_us), int(cumulative_us)))
    top_level = [(n.strip(), c) for n, _, c in rows if not n.startswith("  ")]
    names = {n.strip() for n, _, _ in rows}
    return {"command": "python -X importtime -m trnsim " + " ".join(args),
            "wall_s": result["wall_s"], "cpu_s": result["cpu_s"],
            "import_s": round(sum(s for _, s, _ in rows) / 1e6, 3),
            "heaviest_top_level_imports_s": {n: round(c / 1e6, 3) for n, c in
                                             sorted(top_level, key=lambda r: -r[1])[:top]},
            "imports_torch": "torch" in names, "imports_transformers": "transformers" in names,
            "modules_imported": len(rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", nargs="+", default=["bench", "llama", "importtime"],
                        choices=("bench", "llama", "importtime"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cache", default=None, help="TRNSIM_CACHE_DIR (default: a fresh one)")
    parser.add_argument("--bytecode", choices=("cached", "none"), default="cached")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as fresh:
        env = {**os.environ, "TRNSIM_CACHE_DIR": args.cache or os.path.join(fresh, "cache"),
               "COLUMNS": "200"}
        if args.bytecode == "cached":
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = os.path.join(fresh, "pycache")
        else:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        out: dict = {"benchmark": "cli_speed", "cpus": os.cpu_count(),
                     "load_average_start": os.getloadavg(), "bytecode": args.bytecode,
                     "cache": "given" if args.cache else "fresh temporary directory"}
        if "llama" in args.sections:
            out["llama_2_7b_prefill_2048"] = cold_and_warm(LLAMA_PREFILL, env, 1)
        if "bench" in args.sections:
            out["bench_bert_large"] = cold_and_warm(BERT_LARGE, env, args.repeats)
            out["bench_default"] = cold_and_warm(DEFAULT_BENCH, env, args.repeats)
        if "importtime" in args.sections:
            run(BERT_LARGE, env)  # warm the cache if nothing above did
            out["importtime_bench_bert_large_warm"] = import_time(BERT_LARGE, env)
    figures, cpu = {}, {}
    if "llama_2_7b_prefill_2048" in out:
        first = out["llama_2_7b_prefill_2048"]["first_run"]
        figures["llama_2_7b_prefill_2048_cold_wall_s"] = first["wall_s"]
        cpu["llama_2_7b_prefill_2048_cold_cpu_s"] = first["cpu_s"]
    for key, name in (("bench_bert_large_warm", "bench_bert_large"),
                      ("bench_default_warm", "bench_default")):
        if name in out:
            figures[f"{key}_wall_s"] = out[name]["warm_median_wall_s"]
            cpu[f"{key}_cpu_s"] = out[name]["warm_median_cpu_s"]
    out["cpu_figures"] = cpu  # on a loaded machine wall time includes waiting for a core
    out["figures"] = figures
    out["targets_s"] = TARGETS_S
    out["met"] = {k: v <= TARGETS_S[k] for k, v in figures.items()}
    out["load_average_end"] = os.getloadavg()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
