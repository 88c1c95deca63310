"""trnsim's TensorE against SCALE-Sim's closed-form weight-stationary compute cycles.

For each GEMM shape, runs the weight-stationary loop (`tests.sim.synthetic.weight_stationary_gemm`)
in timing mode on NeuronCore-v2 and prints, as one JSON object, trnsim's TensorE cycles (total
latency x TensorE clock), SCALE-Sim's ``folds * (M + 3*128 - 2) - 1`` and their ratio
(below 1: trnsim is faster, because Trainium loads the next stationary tile under the current
MultiplyMoving instead of paying SCALE-Sim's fill and drain per fold).

    PYTHONPATH=src python benchmarks/scalesim_gemm.py
"""

from __future__ import annotations

import sys
from pathlib import Path

# tests/sim/synthetic.py and tests/kernels/harness.py (helpers shared with the tests) live in the
# repository, not the installed package: make it importable however this script is started
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import json

from tests.sim.synthetic import scalesim_ws_cycles, weight_stationary_gemm

from trnsim import hardware
from trnsim.sim import simulate

SHAPES = [(128, 128, 128), (512, 512, 512), (1024, 1024, 1024), (2048, 1024, 256), (4096, 512, 512),
          (100, 200, 300), (32, 128, 128), (2048, 2048, 2048)]


def main() -> None:
    core = hardware.core("v2")
    rows = []
    for m, k, n in SHAPES:
        profile = simulate(weight_stationary_gemm(m, k, n), mode="timing").profile
        trnsim_cycles = profile.total_ns * core.tensor.clock_hz / 1e9
        scalesim = scalesim_ws_cycles(m, k, n)
        rows.append({"m": m, "k": k, "n": n, "trnsim_cycles": round(trnsim_cycles, 1),
                     "scalesim_cycles": scalesim, "ratio": round(trnsim_cycles / scalesim, 4),
                     "instructions": len(profile)})
    print(json.dumps({"core": core.name, "tensor_clock_hz": core.tensor.clock_hz, "shapes": rows},
                     indent=1))


if __name__ == "__main__":
    main()
