"""Do public NKI kernels run unmodified under trnsim? Conformance over AWS's own test suites.

Runs the Neuron documentation's NKI API tests (`nki/test/` of a checkout of
aws-neuron/aws-neuron-sdk) and nki-samples' unit tests (`test/unit/` of a checkout of
aws-neuron/nki-samples, with `--simulation-only` as its CI runs them) under
`python -m trnsim.run -m pytest`, a few tests of one file to a subprocess (with a timeout), two
subprocesses at a time, and prints JSON: per file the passed / failed / error counts with the
first line of each failure and the CPU seconds, per suite the totals, and the run's wall time.
A test process killed from outside (the out-of-memory killer: the numpy reference of
flash_attn_bwd's seqlen-8192 tests alone holds about 12 GB, two of them at once exhaust the
machine) has its unfinished tests run again one at a time after the rest (`rerun_alone`).

    PYTHONPATH=src python benchmarks/nki_conformance.py /work/ext/aws-neuron-sdk /work/ext/nki-samples

A test that fails for a reason outside trnsim (a package the test needs that is not installed, a
bug in the sample itself, a measurement only hardware can make) is listed under `excluded` with
the reason and is not counted; the reasons live in EXTERNAL below, one entry per test, each saying
why. Neither repository's code is copied into trnsim: the checkouts are read where they lie.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

TRNSIM_SRC = Path(__file__).resolve().parents[1] / "src"

# (suite, file, test-name pattern) -> why the failure is not trnsim's. A pattern matches the
# junit test name (with parameters) from its start.
EXTERNAL: dict[tuple[str, str, str], str] = {
    ("documentation", "test_nki_isa_activation.py", "test_activation"):
        "the test compares a dtype=nl.bfloat16 activation result with an fp32 golden at "
        "np.allclose's default rtol=1e-5; bfloat16 keeps 8 significant bits (error up to 2^-9)",
    ("documentation", "test_nki_isa_dropout.py", "test_dropout$"):
        "the test draws each row's drop probability from [0, 100) unseeded, so most rows drop "
        "everything; it passes only when some row's probability is below 1 (about 72% of runs: "
        "1 - 0.99^128); its own comment says AWS's simulator does not implement dropout",
    ("documentation", "test_nki_isa_nc_match_replace8.py", "test_nc_match_replace_indices8_mask"):
        "the kernel writes mask=(ix < n // 2 and iy < m // 2): Python's `and` drops the first "
        "comparison (NKI masks combine with &); trnsim refuses a predicate used as a bool",
    ("documentation", "test_nki_isa_range_select.py", "test_range_select_example"):
        "the kernel returns SBUF tiles (`return result, reduce_result`); NKI kernels return HBM "
        "tensors",
    ("nki-samples", "test_double_row_matmul.py", "test_"):
        "the test's get_target_string() calls warnings.warn without importing warnings "
        "(NameError) when /sys/devices/virtual/dmi/id/product_name is absent; where the file "
        "exists and is not trn2 the test returns before running the kernel",
}


# failure text -> why: packages the tests' own references import (not trnsim's)
MISSING_PACKAGE = {
    "No module named 'scipy'": "the test's numpy reference imports scipy, which is not installed "
                               "(pip install '.[conformance]')",
}


def external_reason(suite: str, file: str, test: str, failure: str = "") -> str | None:
    for (s, f, pattern), reason in EXTERNAL.items():
        if s == suite and f == file and re.match(pattern, test):
            return reason
    return next((why for text, why in MISSING_PACKAGE.items() if text in failure), None)


def first_line(text: str) -> str:
    """The line of a pytest failure that says what went wrong (`E   ...`), else the first one."""
    lines = [ln for ln in (text or "").splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("E "):
            return ln[1:].strip()[:300]
    return (lines[-1] if lines else "").strip()[:300]


def _env(pythonpath: list[Path]) -> dict:
    env = dict(os.environ)
    # one BLAS thread per test process: on a shared machine OpenBLAS's spinning worker threads
    # cost more than the tile-sized matmuls they split
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env.setdefault("OMP_NUM_THREADS", "1")
    # the suites use only their own conftest: pytest plugins installed alongside trnsim (its
    # test extra's hypothesis) would add ~1.5 CPU s of import and assertion rewriting per file
    env.setdefault("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    env["PYTHONUNBUFFERED"] = "1"  # a killed process's finished tests are still in its output
    env["PYTHONPATH"] = os.pathsep.join(
        [str(p) for p in pythonpath] + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def collect(files: list[Path], cwd: Path, extra_args: list[str],
            pythonpath: list[Path]) -> dict[str, list[str]]:
    """The test ids pytest selects in each file (one collection run for a whole suite). A file
    that fails to collect gets none and later runs whole, so its error is reported."""
    cmd = [sys.executable, "-m", "trnsim.run", "-m", "pytest", "--collect-only", "-q",
           "-p", "no:cacheprovider", *(str(p) for p in files), *extra_args]
    proc = subprocess.run(cmd, cwd=cwd, env=_env(pythonpath), capture_output=True, text=True,
                          timeout=600)
    ids: dict[str, list[str]] = {}
    for line in proc.stdout.splitlines():
        if "::" in line and not line.startswith(" "):
            ids.setdefault(line.split("::", 1)[0], []).append(line.strip())
    return ids


def run_file(suite: str, path: Path, cwd: Path, extra_args: list[str], pythonpath: list[Path],
             timeout_s: float, tests: list[str] | None = None) -> dict:
    """Run one test file (or the given tests of it) under trnsim; count outcomes from pytest's
    junit XML."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.xml"
        env = _env(pythonpath)
        cmd = [sys.executable, "-m", "trnsim.run", "-m", "pytest", "-v", "-p", "no:cacheprovider",
               f"--junitxml={report}", *(tests or [str(path)]), *extra_args]
        start = time.perf_counter()
        output, cpu_seconds, timed_out = _run_measured(cmd, cwd, env, Path(tmp) / "out.txt",
                                                       timeout_s)
        seconds = round(time.perf_counter() - start, 1)
        result = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0, "seconds": seconds,
                  "cpu_seconds": round(cpu_seconds, 1), "failures": [], "excluded": []}
        partial = output if timed_out else None
        if partial is not None:
            return _cut_short(result, partial, f"timed out after {timeout_s} s; later tests not run")
        if not report.exists():  # killed (out of memory), or pytest could not start
            tail = output.strip().splitlines()[-3:]
            result = _cut_short(result, output, " | ".join(tail)[:300])
            if tests and re.search(r"^killed by signal", output, re.M):
                # killed from outside (the out-of-memory killer, with another test process
                # holding memory): its unfinished tests are run again alone (`run_all`)
                done = set(re.findall(r"^(\S+::\S+) (?:PASSED|FAILED|ERROR|SKIPPED)", output, re.M))
                result["unfinished"] = [t for t in tests if t not in done]
            return result
        for case in ET.parse(report).getroot().iter("testcase"):
            name = case.get("name", "")
            bad = case.find("failure")
            outcome = "passed"
            if bad is None:
                bad = case.find("error")
                outcome = "errors" if bad is not None else outcome
            else:
                outcome = "failed"
            if case.find("skipped") is not None:
                outcome = "skipped"
            if outcome in ("failed", "errors"):
                reason = first_line((bad.get("message") or "") + "\n" + (bad.text or ""))
                why_external = external_reason(suite, path.name, name,
                                               (bad.get("message") or "") + (bad.text or ""))
                if why_external:
                    result["excluded"].append({"test": name, "reason": why_external,
                                               "failure": reason})
                    continue
                result["failures"].append({"test": name, "reason": reason})
            result[outcome] += 1
        return result


def _run_measured(cmd: list[str], cwd: Path, env: dict, out: Path,
                  timeout_s: float) -> tuple[str, float, bool]:
    """Run cmd; return its output, the CPU seconds it used (its own rusage, exact while other
    files run alongside) and whether it was killed at the timeout."""
    with out.open("w") as sink:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                text=True)
        deadline = time.perf_counter() + timeout_s
        timed_out = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                if os.WIFSIGNALED(status):  # e.g. the kernel's out-of-memory killer
                    output_note = f"\nkilled by signal {os.WTERMSIG(status)}\n"
                    with out.open("a") as tail:
                        tail.write(output_note)
                break
            if time.perf_counter() > deadline:
                proc.kill()
                _pid, _status, usage = os.wait4(proc.pid, 0)
                timed_out = True
                break
            time.sleep(0.2)
        proc.returncode = 0  # reaped above; keeps Popen from waiting for it again
    return out.read_text(errors="replace"), usage.ru_utime + usage.ru_stime, timed_out


def _cut_short(result: dict, output: str, reason: str) -> dict:
    """Count the tests pytest reported finished before the process ended without its report
    (timeout, a kill); the rest of the process's tests count as one error, with the reason."""
    for line in output.splitlines():
        match = re.match(r"^\S+::(\S+) (PASSED|FAILED|ERROR|SKIPPED)", line)
        if match:
            key = {"PASSED": "passed", "FAILED": "failed", "ERROR": "errors",
                   "SKIPPED": "skipped"}[match.group(2)]
            result[key] += 1
            if key in ("failed", "errors"):
                result["failures"].append({"test": match.group(1), "reason": "see pytest output"})
    result["errors"] += 1
    result["failures"].append({"test": "<rest of process>", "reason": reason})
    return result


def run_all(jobs: list[tuple], timeout_s: float, workers: int,
            per_process: int) -> dict[tuple[str, str], dict]:
    """Run every (suite, file, cwd, extra_args, pythonpath, test ids) job, `workers` test
    processes at a time, at most `per_process` tests to a process (so one file's long tests
    spread over the workers), largest file first (its size standing in for its running time,
    so the long ones do not start last). Returns the outcomes per (suite, file name)."""
    chunks = []
    for suite, path, cwd, extra, pythonpath, ids in sorted(
            jobs, key=lambda job: job[1].stat().st_size, reverse=True):
        groups = [ids[i:i + per_process] for i in range(0, len(ids), per_process)] if ids \
            else [None]
        chunks += [(suite, path, cwd, extra, pythonpath, group) for group in groups]

    def one(chunk) -> tuple[tuple[str, str], dict]:
        suite, path, cwd, extra, pythonpath, group = chunk
        result = run_file(suite, path, cwd, extra, pythonpath, timeout_s, group)
        print(f"{suite} {path.name} ({len(group) if group else 'all'} tests): "
              f"{result['passed']} passed, {result['failed']} failed, {result['errors']} errors "
              f"({result['seconds']} s)", file=sys.stderr)
        return (suite, path.name), result

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        outcomes = list(pool.map(one, chunks))
    # tests of a process killed from outside (out of memory beside another test process) run
    # again one at a time with nothing beside them; their first attempt's error is dropped
    for (suite, path, cwd, extra, pythonpath, _), (_, result) in zip(chunks, outcomes,
                                                                         strict=True):
        unfinished = result.pop("unfinished", [])
        if not unfinished:
            continue
        result["errors"] -= 1
        result["failures"] = [f for f in result["failures"] if f["test"] != "<rest of process>"]
        result["rerun_alone"] = unfinished
        for test in unfinished:
            _, again = one((suite, path, cwd, extra, pythonpath, [test]))
            again.pop("unfinished", None)
            for field in ("passed", "failed", "errors", "skipped", "seconds", "cpu_seconds"):
                result[field] = round(result[field] + again[field], 1)
            result["failures"] += again["failures"]
            result["excluded"] += again["excluded"]
    merged: dict[tuple[str, str], dict] = {}
    for key, result in outcomes:
        if key not in merged:
            merged[key] = result
            continue
        total = merged[key]
        for field in ("passed", "failed", "errors", "skipped", "seconds", "cpu_seconds"):
            total[field] = round(total[field] + result[field], 1)
        total["failures"] += result["failures"]
        total["excluded"] += result["excluded"]
        if result.get("rerun_alone"):
            total["rerun_alone"] = total.get("rerun_alone", []) + result["rerun_alone"]
    return merged


def summarise(per_file: dict[str, dict]) -> dict:
    per_file = dict(sorted(per_file.items()))
    totals = {key: sum(r[key] for r in per_file.values())
              for key in ("passed", "failed", "errors", "skipped")}
    totals["excluded"] = sum(len(r["excluded"]) for r in per_file.values())
    counted = totals["passed"] + totals["failed"] + totals["errors"]
    totals["pass_rate"] = round(totals["passed"] / counted, 3) if counted else None
    totals["seconds"] = round(sum(r["seconds"] for r in per_file.values()), 1)
    totals["cpu_seconds"] = round(sum(r["cpu_seconds"] for r in per_file.values()), 1)
    return {"files": per_file, "totals": totals}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sdk", type=Path, help="checkout of aws-neuron/aws-neuron-sdk")
    parser.add_argument("samples", type=Path, help="checkout of aws-neuron/nki-samples")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds per test process")
    parser.add_argument("--only", default="", help="run only files whose name contains this")
    parser.add_argument("--workers", type=int, default=2,
                        help="test processes run at once (default 2)")
    parser.add_argument("--tests-per-process", type=int, default=4,
                        help="a file's tests are split into processes of at most this many")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    docs_dir = args.sdk / "nki" / "test"
    samples_dir = args.samples / "test" / "unit"
    jobs = []
    for suite, directory, extra, path in (
            ("documentation", docs_dir, [], [TRNSIM_SRC, docs_dir]),
            ("nki-samples", samples_dir, ["--simulation-only"],
             [TRNSIM_SRC, args.samples / "src"])):
        if not directory.is_dir():
            parser.error(f"{directory} is not a directory")
        files = [p for p in sorted(directory.glob("test_*.py")) if args.only in p.name]
        ids = collect(files, directory, extra, path) if files else {}
        jobs += [(suite, p, directory, extra, path, ids.get(p.name)) for p in files]
    results = run_all(jobs, args.timeout, args.workers, max(1, args.tests_per_process))
    suites = {suite: summarise({name: r for (s, name), r in results.items() if s == suite})
              for suite in ("documentation", "nki-samples")}
    print(json.dumps({
        "command": "python benchmarks/nki_conformance.py " + " ".join(
            str(a) for a in (argv if argv is not None else sys.argv[1:])),
        "sdk": str(args.sdk), "samples": str(args.samples),
        "suites": suites,
        "totals": {name: s["totals"] for name, s in suites.items()},
        "workers": args.workers, "tests_per_process": args.tests_per_process,
        "wall_seconds": round(time.perf_counter() - start, 1),
    }, indent=1))


if __name__ == "__main__":
    main()
