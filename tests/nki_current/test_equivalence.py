"""The same algorithm in the legacy and the current API: identical outputs and timelines."""

import ml_dtypes
import numpy as np
import pytest

from tests.nki_current.kernels import twins
from trnsim import nki as legacy_nki
from trnsim.nki.current import Kernel


@pytest.mark.parametrize("target", ["trn1", "trn2", "trn3"])
def test_legacy_and_current_twins_agree_bit_for_bit_and_in_time(rng, target):
    a = rng.standard_normal((512, 128)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((512, 512)).astype(ml_dtypes.bfloat16)
    legacy = legacy_nki.jit(twins.matmul_softmax_legacy.fn, platform_target=target)
    current = Kernel(twins.matmul_softmax_current.fn, platform_target=target)
    old, new = legacy(a, b), current(a, b)
    np.testing.assert_array_equal(old.view(np.uint32), new.view(np.uint32))
    p_old, p_new = legacy.last_run.profile, current.last_run.profile
    assert [r.opcode for r in p_old.records] == [r.opcode for r in p_new.records]
    for column in ("start_ns", "end_ns", "done_ns", "stream"):
        np.testing.assert_array_equal(getattr(p_old, column), getattr(p_new, column))
    assert p_old.total_ns == p_new.total_ns
    reference = a.astype(np.float32).T @ b.astype(np.float32)
    e = np.exp(reference - reference.max(axis=1, keepdims=True))
    np.testing.assert_allclose(new, e / e.sum(axis=1, keepdims=True), rtol=1e-4, atol=1e-6)
