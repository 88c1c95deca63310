"""A kernel's trace, written by the simulator, shared by the report tests."""

import pytest

from trnsim import hardware
from trnsim.nki.files import load_kernel
from trnsim.nki.typing import TensorSpec
from trnsim.sim import write_trace

KERNEL = "trnsim.kernels.tutorials::matmul_optimized"


@pytest.fixture(scope="session")
def kernel_profile():
    """The NKI tutorial's optimized matmul, timing only: every engine and DMA queue is used."""
    kernel = load_kernel(KERNEL)
    kernel.run([TensorSpec((1024, 2048), "bfloat16"), TensorSpec((1024, 1024), "bfloat16")], {},
               mode="timing", target=hardware.core("trn1"))
    return kernel.last_run.results[0].profile


@pytest.fixture(scope="session")
def kernel_trace(kernel_profile, tmp_path_factory):
    return write_trace([kernel_profile], tmp_path_factory.mktemp("trace") / "matmul.json")
