"""Kernel shapes and slices the NKI compiler rejects: each an error naming the kernel's line,
never a silently clipped slice or truncated shape."""

import numpy as np
import pytest

import trnsim.nki.language as nl
from trnsim import nki
from trnsim.errors import InvalidArgumentError, LimitExceededError

A = np.zeros((128, 512), np.float32)


def oob_slice(a):
    out = nl.ndarray((128, 768), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(a[:, 256:1024]))  # LINE oob_slice
    return out


def float_shape(a):
    nl.ndarray((128, 256.7), dtype=nl.float32, buffer=nl.sbuf)  # LINE float_shape
    return a


def negative_shape(a):
    nl.ndarray((128, -4), dtype=nl.float32, buffer=nl.sbuf)  # LINE negative_shape
    return a


def step_zero(a):
    out = nl.ndarray((128, 512), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(a[:, ::0]))  # LINE step_zero
    return out


def _line(name):
    with open(__file__) as handle:
        for number, text in enumerate(handle, start=1):
            if text.rstrip().endswith(f"# LINE {name}"):
                return f"test_bounds.py:{number}"
    raise AssertionError(name)


@pytest.mark.parametrize("kernel,error,message", [
    (oob_slice, LimitExceededError, "slice stop 1024 exceeds limit 512"),
    (float_shape, InvalidArgumentError, "dimension 256.7 is not an integer"),
    (negative_shape, InvalidArgumentError, "dimension -4 must be positive"),
    (step_zero, InvalidArgumentError, "slice step cannot be zero"),
], ids=lambda v: getattr(v, "__name__", None))
def test_bad_shapes_and_slices_name_the_kernel_line(kernel, error, message):
    with pytest.raises(error, match=message) as info:
        nki.jit(kernel)(A)
    assert str(info.value).endswith(f"at {_line(kernel.__name__)}")
