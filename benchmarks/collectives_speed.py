"""How fast trnsim times collectives, and how close it lands to the calibration rows: one JSON
object on stdout. Not part of the test suite.

Speed targets (timing only, the chooser's algorithm, best of --repeats runs):
- a 1 GiB fp32 all-reduce over the 64 chips of a Trn2 UltraServer (256 ranks at LNC=2): < 1 s;
- the same over 16 trn2.48xlarge instances (256 chips, 1024 ranks, EFA between them): < 10 s;
plus the peak Python heap of each run (tracemalloc, separate run), which stays proportional to
the schedule, not to the message.

Calibration (shared/calibration/measurements.csv, rows nccom-allreduce-2r-1MiB and -1GiB: the
nccom-test documentation's 2-rank fp32 all-reduce on trn1.32xlarge): trnsim's nccom-test time
and its error against the measurement; the target is within 20%.

Run: PYTHONPATH=src python benchmarks/collectives_speed.py [--repeats R]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import tracemalloc

from trnsim.collectives import Collective, Fabric, iteration_time_ns, simulate

GIB = 2**30
SPEED_CASES = {
    "ultraserver_64_chips_1GiB_allreduce": dict(instance="trn2-ultraserver", nodes=1, ranks=256,
                                                target_s=1.0),
    "trn2_16_instances_256_chips_1GiB_allreduce": dict(instance="trn2.48xlarge", nodes=16,
                                                       ranks=1024, target_s=10.0),
}
# measurements.csv: id -> (size in bytes, measured time:avg in us)
MEASURED_US = {"nccom-allreduce-2r-1MiB": (2**20, 68.0), "nccom-allreduce-2r-1GiB": (GIB, 18930.0)}


def _speed(case: dict, repeats: int) -> dict:
    def once():
        return simulate("all_reduce", GIB, case["ranks"], case["instance"], case["nodes"],
                        "float32")

    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        results, timeline = once()
        best = min(best, time.perf_counter() - start)
    tracemalloc.start()
    once()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    result = results[0]
    return {"wall_s": round(best, 4), "target_s": case["target_s"],
            "meets_target": best < case["target_s"], "peak_heap_mb": round(peak / 1e6, 1),
            "algorithm": result.algorithm, "detail": result.detail, "steps": result.steps,
            "timeline_events": len(timeline.events),
            "simulated_time_us": round(result.duration_ns / 1e3, 1),
            "busbw_GiB_s": round(GIB / (result.duration_ns * 1e-9) / GIB
                                 * 2 * (case["ranks"] - 1) / case["ranks"], 2)}


def _calibration() -> dict:
    fabric = Fabric("trn1.32xlarge")
    out = {}
    for row, (size, measured_us) in MEASURED_US.items():
        time_ns, result = iteration_time_ns(fabric, Collective("all_reduce", size, "float32", 2))
        predicted_us = time_ns / 1e3
        error = (predicted_us - measured_us) / measured_us * 100
        out[row] = {"size_bytes": size, "measured_us": measured_us,
                    "predicted_us": round(predicted_us, 2), "error_pct": round(error, 2),
                    "within_20pct": abs(error) <= 20, "algorithm": result.algorithm}
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    report = {
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "speed": {name: _speed(case, args.repeats) for name, case in SPEED_CASES.items()},
        "calibration": _calibration(),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
