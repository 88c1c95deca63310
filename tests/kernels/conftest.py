"""Shared helpers for the kernel library's tests: numpy references and tolerances."""

import ml_dtypes
import numpy as np
import pytest

BF16 = ml_dtypes.bfloat16


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def as_dtype(array, name: str) -> np.ndarray:
    return np.asarray(array).astype({"float32": np.float32, "bfloat16": BF16,
                                     "float16": np.float16, "int32": np.int32}[name])


def loaded(array, compute_dtype: str) -> np.ndarray:
    """An operand as TensorE reads it: rounded (RNE) to the compute dtype, values in fp32."""
    from trnsim.numerics import cast
    from trnsim.numerics import dtype as trnsim_dtype

    values = np.asarray(array).astype(np.float32)
    if compute_dtype in ("float32", "tfloat32"):
        return values
    return np.asarray(cast(values, trnsim_dtype(compute_dtype), rounding="rne")).astype(np.float32)


def assert_close(out, want, out_dtype: str, *, rtol: float | None = None) -> None:
    """Close relative to the reference's magnitude: fp32 outputs to 1e-4, bf16 to 1e-2."""
    out = np.asarray(out).astype(np.float64)
    want = np.asarray(want).astype(np.float64)
    assert out.shape == want.shape, (out.shape, want.shape)
    rtol = rtol if rtol is not None else (1e-4 if out_dtype == "float32" else 1.2e-2)
    scale = max(1.0, float(np.abs(want).max(initial=0.0)))
    err = float(np.abs(out - want).max(initial=0.0))
    assert err <= rtol * scale, f"max error {err:.3g} > {rtol:g} x {scale:.3g}"
