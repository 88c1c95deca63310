"""Numerics: the dtypes, casts and rounding every other layer uses to compute the hardware's values.

The arithmetic contract (what the simulated engines do with these functions):

- Vector, Scalar and GpSimd engines read any dtype, compute in float32 and cast on write:
  ``cast(f(to_compute(a), to_compute(b)), dst_dtype)``. "The Vector Engine automatically casts
  input data types to float32 and performs all computations in float32 math. The float32 results
  are cast to the data type of output dst" (``nki.isa`` docs, e.g. scalar_tensor_tensor).
- TensorE multiplies its inputs in their own dtype (bf16, fp16, fp8 and tf32 products are exact
  in fp32) and accumulates in fp32 in PSUM; a tfloat32 operand is read as `round_tf32(x)`.
  A float32 matmul is exact fp32 arithmetic. NeuronCore-v4 can write a BF16 accumulator: the
  fp32 result is cast with RNE or SR right before the write (``trainium3_arch.rst``).
- Every narrowing float cast rounds RNE unless stochastic rounding is on, process-wide through
  NEURON_RT_STOCHASTIC_ROUNDING_EN=1 (seed NEURON_RT_STOCHASTIC_ROUNDING_SEED, default 0) or per
  call through ``cast(..., rounding="stochastic", rng=CounterRNG(seed))``; SR exists from
  NeuronCore-v2.
"""

from trnsim.numerics.cast import (
    FLOAT_TO_INT,
    ROUNDING_ENV,
    ROUNDING_MODES,
    cast,
    default_rounding,
    round_tf32,
    to_compute,
    widen_f32,
)
from trnsim.numerics.dtypes import DTYPES, DType, check_supported, dtype, dtype_of, names
from trnsim.numerics.packing import mx_max_exponent, mx_scale, pack_x4, unpack_x4
from trnsim.numerics.random import SEED_ENV, CounterRNG, default_rng, reset_default_rng
from trnsim.numerics.rounding import store_rne

__all__ = [
    "DTYPES",
    "FLOAT_TO_INT",
    "ROUNDING_ENV",
    "ROUNDING_MODES",
    "SEED_ENV",
    "CounterRNG",
    "DType",
    "cast",
    "check_supported",
    "default_rng",
    "default_rounding",
    "dtype",
    "dtype_of",
    "mx_max_exponent",
    "mx_scale",
    "names",
    "pack_x4",
    "reset_default_rng",
    "round_tf32",
    "store_rne",
    "to_compute",
    "unpack_x4",
    "widen_f32",
]
