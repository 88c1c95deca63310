"""TensorE against SCALE-Sim's weight-stationary closed form, and the tiled-GEMM program."""

import numpy as np
import pytest

from tests.sim.helpers import rng_array
from tests.sim.synthetic import scalesim_ws_cycles, tiled_matmul, weight_stationary_gemm
from trnsim import hardware
from trnsim.sim import simulate

SHAPES = [(128, 128, 128), (512, 512, 512), (1024, 256, 384), (100, 200, 300), (2048, 1024, 256),
          (32, 128, 128)]


def test_scalesim_closed_form():
    # one fold of a 128x128 array with M=1: 1 + 2*128 + 128 - 2 cycles, minus one
    assert scalesim_ws_cycles(1, 128, 128) == 1 + 3 * 128 - 2 - 1
    assert scalesim_ws_cycles(10, 129, 256) == 2 * 2 * (10 + 3 * 128 - 2) - 1


@pytest.mark.parametrize(("m", "k", "n"), SHAPES)
def test_tensor_engine_is_not_slower_than_scalesim(m, k, n):
    """Trainium overlaps each LoadStationary with the previous MultiplyMoving, so a fold costs
    about its streaming time alone, where SCALE-Sim also pays fill and drain (2*rows + cols)."""
    spec = hardware.core("v2")
    profile = simulate(weight_stationary_gemm(m, k, n), mode="timing").profile
    cycles = profile.total_ns * spec.tensor.clock_hz / 1e9
    assert cycles <= scalesim_ws_cycles(m, k, n)
    # and not impossibly fast: every fold streams each moving chunk for max(min(64, cols), width)
    folds = -(-k // 128)
    lower = 0
    for n0 in range(0, n, 128):
        cols = min(128, n - n0)
        lower += folds * sum(max(min(64, cols), min(512, m - c)) for c in range(0, m, 512))
    assert cycles >= lower


def test_tiled_matmul_program_computes_the_product():
    m, k, n = 256, 256, 512
    at, b = rng_array((k, m), "bfloat16", 1), rng_array((k, n), "bfloat16", 2)
    result = simulate(tiled_matmul(m, k, n), {"at": at, "b": b})
    expected = at.astype(np.float64).T @ b.astype(np.float64)
    np.testing.assert_allclose(result.outputs["c"], expected, rtol=1e-5, atol=1e-4)
    assert result.profile.summary.tensor_flops == 2 * m * k * n
