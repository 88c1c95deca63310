"""The NKI matmul tutorial's four variants in trnsim's kernel library compute the same product."""

import ml_dtypes
import numpy as np
import pytest

from trnsim.kernels import tutorials


@pytest.mark.parametrize("kernel, kwargs", [
    (tutorials.matmul_naive, {}),
    (tutorials.matmul_hoisted, {}),
    (tutorials.matmul_block_free_dim, {}),
    (tutorials.matmul_optimized, dict(tiles_in_block_m=2, tiles_in_block_n=2, tiles_in_block_k=2)),
])
def test_tutorial_variants_compute_the_product(kernel, kwargs):
    rng = np.random.default_rng(0)
    lhs_t = rng.standard_normal((256, 256)).astype(ml_dtypes.bfloat16)
    rhs = rng.standard_normal((256, 1024)).astype(ml_dtypes.bfloat16)
    out = kernel(lhs_t, rhs, **kwargs).astype(np.float32)
    ref = lhs_t.astype(np.float32).T @ rhs.astype(np.float32)
    assert np.abs(out - ref).max() / np.abs(ref).max() < 2e-2  # bf16 output
