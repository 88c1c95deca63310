"""Undefined behaviour the NKI documentation names warns with the kernel's line and leaves NaN:
accumulating a matmul into PSUM nothing has written (reads of unwritten SBUF/PSUM are covered in
test_api.py and tests/nki/test_frontend.py)."""

import numpy as np
import pytest

from trnsim.errors import UndefinedBehaviourWarning
from trnsim.nki.current import isa as nisa
from trnsim.nki.current import jit
from trnsim.nki.current import language as nl


def _matmul_kernel(accumulate_first: bool):
    @jit(platform_target="trn2")
    def k(a, b):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        ta = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
        tb = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=ta, src=a)
        nisa.dma_copy(dst=tb, src=b)
        acc = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=ta, moving=tb, accumulate=accumulate_first)
        nisa.nc_matmul(dst=acc, stationary=ta, moving=tb, accumulate=True)
        res = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_copy(dst=res, src=acc)
        nisa.dma_copy(dst=out, src=res)
        return out

    return k


def test_accumulating_into_unwritten_psum_warns_with_the_line_and_is_nan(rng):
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 64)).astype(np.float32)
    with pytest.warns(UndefinedBehaviourWarning,
                      match=r"test_undefined_behaviour.py:\d+: nisa.nc_matmul accumulates into psum"):
        got = _matmul_kernel(accumulate_first=True)(a, b)
    assert np.isnan(got).all()


def test_a_group_started_by_an_overwrite_accumulates_without_a_warning(rng, recwarn):
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 64)).astype(np.float32)
    got = _matmul_kernel(accumulate_first=False)(a, b)
    np.testing.assert_allclose(got, 2 * (a.T @ b), rtol=1e-4, atol=1e-4)
    assert not [w for w in recwarn if issubclass(w.category, UndefinedBehaviourWarning)]
