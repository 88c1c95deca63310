"""NKI dtype constants (numpy dtypes, as the legacy neuronxcc.nki exposes them) and fp32/bf16
constants."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from trnsim.numerics import DType
from trnsim.numerics import dtype as as_dtype


class _TFloat32:
    """nl.tfloat32: fp32 storage read by TensorE with a 10-bit mantissa."""

    name = "tfloat32"
    itemsize = 4

    def __repr__(self) -> str:
        return "nl.tfloat32"


tfloat32 = _TFloat32()
bool_ = np.bool_
int8, uint8, int16, uint16, int32, uint32 = np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32
float16, float32 = np.float16, np.float32
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float8_e4m3 = np.dtype(ml_dtypes.float8_e4m3)
float8_e5m2 = np.dtype(ml_dtypes.float8_e5m2)
float8_e4m3fn = np.dtype(ml_dtypes.float8_e4m3fn)
float8_e8m0fnu = np.dtype(ml_dtypes.float8_e8m0fnu)


def to_dtype(value) -> DType:
    if value is tfloat32 or (isinstance(value, str) and value == "tfloat32"):
        return as_dtype("tfloat32")
    return as_dtype(value)


class _Constant:
    def __init__(self, low: float) -> None:
        self.min = low


fp32 = _Constant(float(np.finfo(np.float32).min))
bfp16 = _Constant(float(ml_dtypes.finfo(ml_dtypes.bfloat16).min))


def finfo(dtype):
    dt = to_dtype(dtype)
    return ml_dtypes.finfo(dt.np_dtype) if dt.is_float else np.iinfo(dt.np_dtype)


def static_cast(value, dtype):
    """Host-side cast of a Python/numpy value to an NKI dtype (used outside kernels)."""
    return np.asarray(value).astype(to_dtype(dtype).np_dtype)


__all__ = [
    "DType", "bfloat16", "bfp16", "bool_", "finfo", "float8_e4m3", "float8_e4m3fn", "float8_e5m2",
    "float8_e8m0fnu", "float16", "float32", "fp32", "int8", "int16", "int32", "static_cast",
    "tfloat32", "to_dtype", "uint8", "uint16", "uint32",
]
