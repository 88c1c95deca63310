"""numpy's BLAS held to one thread while the simulator runs instructions.

A functional run issues thousands of small matmuls (one per MultiplyMoving, [128, 128] x
[128, 512] at most). OpenBLAS starts a thread per core for each and its idle threads spin; on a
machine where another process holds a core, the spinning threads wait for time slices and a
BERT-base call went from 0.75 s to 16-27 s. One thread is as fast for tiles this small and never
waits for another core. threadpoolctl (a small pure-Python package, also used by scikit-learn)
finds the BLAS library numpy loaded and sets its thread count for the run only, so a caller's own
numpy or PyTorch work keeps its threads.

The cap does not follow the cores that are free (os.sched_getaffinity, the load): OpenBLAS with two
threads gives other bits than with one for a [128, 128].T @ [128, 512] product (the last bit of
about a tenth of its elements, on the 2-core AMD EPYC this project is measured on;
tests/sim/test_threads.py), so the same program and inputs would give other numbers under load;
and at load 4 there a two-thread call took 7.6-24 ms against 0.4-0.6 ms on one thread.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

BLAS_THREADS = 1  # threads numpy's BLAS may use inside a functional run (see above)

_controller = None


@contextlib.contextmanager
def blas_threads_capped() -> Iterator[None]:
    """Hold numpy's BLAS to `BLAS_THREADS` threads inside the block, then restore it."""
    global _controller
    from threadpoolctl import ThreadpoolController

    if _controller is None:  # finding the loaded libraries walks the process's shared objects
        _controller = ThreadpoolController()
    with _controller.limit(limits=BLAS_THREADS, user_api="blas"):
        yield
