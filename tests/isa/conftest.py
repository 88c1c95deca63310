"""A semantics-only ExecutionState: every access pattern owns its own array.

It isolates instruction semantics from the simulator's byte-addressed memory model (tested in
tests/sim). References below use numpy float32/float64 and ml_dtypes casts directly.
"""

import ml_dtypes
import numpy as np
import pytest

from trnsim import hardware
from trnsim.isa import AccessPattern, psum, sbuf
from trnsim.numerics import CounterRNG, cast, to_compute


class ArrayState:
    def __init__(self, core="v2"):
        self.core = hardware.core(core)
        self.arrays: dict[AccessPattern, np.ndarray] = {}
        self.engines: dict = {}
        self.rng = CounterRNG(7)

    def put(self, ap: AccessPattern, values) -> AccessPattern:
        self.arrays[ap] = cast(np.asarray(values).reshape(ap.shape), ap.dtype, rounding="rne")
        return ap

    def read(self, ap):
        if ap not in self.arrays:
            return np.full(ap.shape, np.nan, dtype=np.float32).astype(ap.dtype.np_dtype)
        return self.arrays[ap]

    def read_compute(self, ap):
        return to_compute(self.read(ap))

    def write(self, ap, values):
        values = np.broadcast_to(np.asarray(values), ap.shape)
        self.arrays[ap] = cast(values, ap.dtype, rounding="rne")

    def accumulate(self, ap, values):
        self.arrays[ap] = (self.read_compute(ap) + values).astype(np.float32)

    def fp32_out(self, ap, shape):
        return None  # no shared storage: compute, then write

    def engine_state(self, engine):
        return self.engines.setdefault(engine, {})

    def random_uniform(self, shape):
        return self.rng.uniform(int(np.prod(shape))).reshape(shape)


@pytest.fixture
def state():
    return ArrayState("v2")


@pytest.fixture
def state_v3():
    return ArrayState("v3")


_offsets = iter(range(0, 1 << 30, 4096))


def tile(shape, dtype="float32", memory="sbuf"):
    """A fresh, distinct tile access pattern (SBUF unless memory='psum')."""
    partitions, *free = shape
    maker = psum if memory == "psum" else sbuf
    return maker(next(_offsets) % (96 * 1024), partitions, tuple(free) or (1,), dtype,
                 label=f"t{next(_offsets)}")


def ref_cast(values, dtype_name):
    """Independent reference cast: ml_dtypes/numpy astype (RNE)."""
    np_dtype = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16, "float16": np.float16,
                "float8_e4m3": ml_dtypes.float8_e4m3, "float8_e5m2": ml_dtypes.float8_e5m2}[dtype_name]
    return np.asarray(values, dtype=np.float32).astype(np_dtype)
