"""tests.kernels.harness: one kernel on its own, functional and timing-only."""

import numpy as np

from tests.kernels.harness import ArraySpec, run, trace_kernel
from trnsim.kernels import elementwise
from trnsim.nki import language as nl


def test_functional_and_timing_runs_agree_on_time(rng):
    x = rng.standard_normal((256, 512)).astype(np.float32)
    program = lambda t: nl.exp(t[0])  # noqa: E731
    functional = run(elementwise, [[x]], x.shape, "float32", program=program)
    timing = run(elementwise, [[ArraySpec(x.shape, "float32")]], x.shape, "float32",
                 program=program)
    assert timing.output is None
    assert functional.total_ns == timing.total_ns
    np.testing.assert_allclose(functional.output, np.exp(x), rtol=1e-6)


def test_each_kernel_frees_its_on_chip_tiles():
    """Kernels called one after another in one trace (as the lowering does) do not accumulate
    SBUF: every kernel's tiles are freed when it returns."""
    def two_kernels(out, x):
        for _ in range(40):
            elementwise(out, [x], program=lambda t: nl.exp(t[0]))

    trace, _, _ = trace_kernel(two_kernels, [ArraySpec((128, 8192), "float32")], (128, 8192),
                               "float32")
    assert not trace.sbuf.live and not trace.psum.live
