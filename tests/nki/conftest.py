import ml_dtypes
import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def as_dtype(array, name):
    return array.astype({"float32": np.float32, "bfloat16": ml_dtypes.bfloat16}[name])


TOL = {"float32": dict(rtol=1e-5, atol=1e-5), "bfloat16": dict(rtol=2e-2, atol=2e-2)}
