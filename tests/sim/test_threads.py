"""numpy's BLAS held to one thread inside a run (`trnsim.sim.threads`), restored after."""

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from trnsim.sim.threads import BLAS_THREADS, blas_threads_capped


def _blas_threads() -> list[int]:
    """numpy's own BLAS pools (the ones the cap is for: another library's BLAS loaded after the
    simulator first capped, scipy's for one, is not numpy's and is not held)."""
    return [pool["num_threads"] for pool in threadpool_info()
            if pool["user_api"] == "blas" and "numpy" in pool["filepath"]]


def test_the_cap_holds_inside_the_block_and_the_callers_setting_comes_back():
    with threadpool_limits(2, user_api="blas"):
        before = _blas_threads()
        assert before  # numpy's BLAS is found
        with blas_threads_capped():
            assert all(n == BLAS_THREADS for n in _blas_threads())
        assert _blas_threads() == before


def test_matmul_bits_inside_a_run_do_not_follow_the_callers_thread_count():
    """OpenBLAS with two threads gives other bits than with one for a TensorE-sized product
    ([128, 128].T @ [128, 512]: the last bit of about a tenth of its elements on the 2-core
    machine trnsim is measured on), so a run's thread count must not follow the caller's or the
    machine's free cores: the same program and inputs would give other numbers under load."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, 128)).astype(np.float32)
    b = rng.standard_normal((128, 512)).astype(np.float32)
    with threadpool_limits(1, user_api="blas"):
        want = np.matmul(a.T, b)
    for callers in (1, 2):
        with threadpool_limits(callers, user_api="blas"), blas_threads_capped():
            got = np.matmul(a.T, b)
        assert got.view(np.uint32).tobytes() == want.view(np.uint32).tobytes()
