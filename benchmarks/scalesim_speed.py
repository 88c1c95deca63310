"""Issue 27's whole-process race: a 1024^3 GEMM's cycle count from trnsim and from SCALE-Sim 3.

Each simulator runs as its own child process, started cold, as a user would run it: trnsim
times `tests.sim.synthetic.weight_stationary_gemm` (the weight-stationary dataflow SCALE-Sim
models, TensorE alone) on NeuronCore-v2; SCALE-Sim runs `python -m scalesim.scale` in GEMM mode
on a weight-stationary array of TensorE's PE rows x columns (`trnsim.hardware`), its other
settings SCALE-Sim's example defaults. Printed as JSON: each side's wall and CPU seconds (the
child's own rusage) and cycle count, and trnsim's speed-up by CPU and by wall time (target 100x).

SCALE-Sim is not a trnsim dependency. Give the Python that has it with `--scalesim-python`, e.g.

    python -m venv /tmp/scalesim && /tmp/scalesim/bin/pip install scalesim 'numpy<2' 'pandas<2.3'
    PYTHONPATH=src python benchmarks/scalesim_speed.py --scalesim-python /tmp/scalesim/bin/python

(scalesim 3.0.0 ends each layer with ``int(max(...))`` over arrays, which numpy 2 refuses:
"only 0-dimensional arrays can be converted to Python scalars"). Without it only trnsim's side
is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHAPE = (1024, 1024, 1024)  # M, K, N
TARGET_SPEEDUP = 100.0  # issue 27: at least 100x faster than SCALE-Sim 3, run side by side

TRNSIM_CHILD = """
import json, sys
sys.path.insert(0, {root!r})
from tests.sim.synthetic import weight_stationary_gemm
from trnsim import hardware
from trnsim.sim import simulate
m, k, n = {shape!r}
core = hardware.core("v2")
profile = simulate(weight_stationary_gemm(m, k, n), mode="timing").profile
print(json.dumps({{"cycles": profile.total_ns * core.tensor.clock_hz / 1e9,
                  "instructions": len(profile)}}))
"""

# SCALE-Sim's configuration file: its example's memory settings, the array of TensorE's shape
SCALESIM_CONFIG = """[general]
run_name = trnsim_race_{m}x{k}x{n}

[architecture_presets]
ArrayHeight: {rows}
ArrayWidth: {cols}
IfmapSramSzkB: 64
FilterSramSzkB: 64
OfmapSramSzkB: 64
IfmapOffset: 0
FilterOffset: 10000000
OfmapOffset: 20000000
Bandwidth: 10
Dataflow: ws
MemoryBanks: 1
ReadRequestBuffer: 512
WriteRequestBuffer: 512

[layout]
IfmapCustomLayout: False
FilterCustomLayout: False
IfmapSRAMBankBandwidth: 10
IfmapSRAMBankNum: 10
IfmapSRAMBankPort: 2
FilterSRAMBankBandwidth: 10
FilterSRAMBankNum: 10
FilterSRAMBankPort: 2

[sparsity]
SparsitySupport: false

[run_presets]
InterfaceBandwidth: CALC
UseRamulatorTrace: False
"""


def timed_child(command: list[str], **kwargs) -> tuple[subprocess.CompletedProcess, dict]:
    """Run `command` to completion; its wall time and its own CPU seconds (user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done, {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                  "exit_code": done.returncode}


def run_trnsim() -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    code = TRNSIM_CHILD.format(root=str(ROOT), shape=SHAPE)
    done, figures = timed_child([sys.executable, "-c", code], env=env)
    if done.returncode:
        raise SystemExit(f"trnsim's child failed:\n{done.stderr[-2000:]}")
    return figures | json.loads(done.stdout.strip().splitlines()[-1])


def run_scalesim(python: str) -> dict:
    from trnsim import hardware

    tensor = hardware.core("v2").tensor
    m, k, n = SHAPE
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work)
        (folder / "race.cfg").write_text(SCALESIM_CONFIG.format(
            m=m, k=k, n=n, rows=tensor.pe_rows, cols=tensor.pe_cols))
        (folder / "gemm.csv").write_text(f"Layer, M, N, K,\ngemm, {m}, {n}, {k},\n")
        (folder / "layout.csv").write_text("Layer,\n")
        done, figures = timed_child(
            [python, "-m", "scalesim.scale", "-c", "race.cfg", "-t", "gemm.csv", "-l",
             "layout.csv", "-i", "gemm", "-p", "out", "-s", "N"], cwd=folder)
    found = re.search(r"Compute cycles:\s*(\d+)", done.stdout)
    if done.returncode or found is None:
        raise SystemExit(f"SCALE-Sim failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    version = subprocess.run([python, "-c", "import importlib.metadata as m; "
                              "print(m.version('scalesim'))"], capture_output=True, text=True)
    return figures | {"compute_cycles": int(found.group(1)),
                      "version": version.stdout.strip() or None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scalesim-python", default=None,
                        help="a Python with SCALE-Sim 3 installed (module docstring)")
    args = parser.parse_args()
    out: dict = {"benchmark": "scalesim_speed", "shape_mkn": SHAPE, "cpus": os.cpu_count(),
                 "load_average_before": os.getloadavg(), "target_speedup": TARGET_SPEEDUP}
    out["trnsim"] = run_trnsim()
    if args.scalesim_python:
        out["scalesim"] = scalesim = run_scalesim(args.scalesim_python)
        for clock in ("cpu_s", "wall_s"):
            speedup = scalesim[clock] / out["trnsim"][clock]
            out[f"speedup_by_{clock[:-2]}"] = round(speedup, 1)
        out["met"] = out["speedup_by_cpu"] >= TARGET_SPEEDUP
    else:
        out["scalesim"] = None
        out["note"] = "SCALE-Sim side not run: give --scalesim-python (module docstring)"
    out["load_average_after"] = os.getloadavg()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
