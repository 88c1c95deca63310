"""Fuzz the artifact loader and the command line at length: prints one JSON object. Not part of
the test suite (CI runs the same targets briefly: tests/runtime/test_artifact_fuzz.py and
tests/cli/test_cli_fuzz.py).

For each target: cases run, accepted ("ok"), clean errors (a TrnsimError or a usage error with
exit status 2) and uncaught (anything else, each a bug; the first few are listed).

Run: PYTHONPATH=src python benchmarks/fuzz.py [--artifact-cases N] [--cli-cases N] [--seed S]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.fuzz_targets
os.environ.setdefault("TRNSIM_CACHE_DIR", "off")

from hypothesis import HealthCheck, given, seed, settings
from tests.fuzz_targets import (
    KERNEL_SOURCE,
    argvs,
    artifact_case,
    cli_case,
    make_artifact,
    mutations,
    reseal_flags,
    work_stubbed,
)


def _summary(outcomes: list[str], seconds: float) -> dict:
    counts = collections.Counter("uncaught" if o.startswith("uncaught") else o for o in outcomes)
    return {"cases": len(outcomes) - counts["skipped"], "ok": counts["ok"],
            "clean_errors": counts["clean"],
            "uncaught": counts["uncaught"], "seconds": round(seconds, 1),
            "uncaught_examples": sorted({o for o in outcomes if o.startswith("uncaught")})[:5]}


def fuzz_artifacts(cases: int, workdir: Path, rng_seed: int) -> dict:
    base = make_artifact(workdir)
    outcomes: list[str] = []

    @seed(rng_seed)
    @settings(max_examples=cases, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(changes=mutations, reseal=reseal_flags)
    def case(changes, reseal):
        outcomes.append(artifact_case(base, workdir, changes, reseal))

    start = time.perf_counter()
    case()
    return _summary(outcomes, time.perf_counter() - start)


def fuzz_cli(cases: int, workdir: Path, rng_seed: int) -> dict:
    kernel = workdir / "kernel.py"
    kernel.write_text(KERNEL_SOURCE)
    outcomes: list[str] = []

    @seed(rng_seed)
    @settings(max_examples=cases, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(argv=argvs)
    def case(argv):
        outcomes.append(cli_case(argv[0], argv[1], f"{kernel}::copy"))

    start = time.perf_counter()
    with work_stubbed():
        case()
    return _summary(outcomes, time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--artifact-cases", type=int, default=500)
    parser.add_argument("--cli-cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = {"artifact_loader": fuzz_artifacts(args.artifact_cases, Path(tmp), args.seed),
                  "cli_arguments": fuzz_cli(args.cli_cases, Path(tmp), args.seed),
                  "seed": args.seed}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
