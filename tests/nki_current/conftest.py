import numpy as np
import pytest

from trnsim.nki import compat


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def nki_modules():
    """`import nki` resolves to trnsim for the test, as `compat.install("nki")` does for users."""
    compat.install("nki")
    try:
        import nki

        yield nki
    finally:
        compat.uninstall()
