"""Integer arithmetic of the element-wise instructions: GpSimd's native 32-bit integers, and the
exactness check the compiler asks for.

Vector and Scalar engines compute in fp32, so integers past 2^24 lose digits there. GpSimd is a
set of general-purpose cores: "when all input/output tiles are int32 or uint32, the operation
[tensor_tensor] defaults to GpSimd Engine, which uses native integer arithmetic. This ensures
exact results for all 32-bit integer values" (nki.isa.tensor_tensor, Neuron 2.31+). Native
integer arithmetic here is C's on 32-bit words (`NATIVE_OPS`): add, subtract, multiply and power
wrap modulo 2^32, divide truncates toward zero, mod takes the dividend's sign, comparisons give
1 or 0. A zero divisor gives 0 (C leaves it undefined: an assumption, no document says) and a
negative power truncates 1 / a^n (as PyTorch's integer power).

`exact_int` is the compiler's PyTorch contract, not a hardware feature: an instruction that
computes a PyTorch int64 value in int32, a division (PyTorch raises on a zero divisor), or
integers through fp32 on a core without GpSimd must store the exact integer; the simulator
raises `IntegerRangeError` (or `IntegerArithmeticError`) rather than store a different number.
"""

from __future__ import annotations

import numpy as np

from trnsim.errors import IntegerArithmeticError, IntegerRangeError
from trnsim.isa.access import AccessPattern
from trnsim.isa.ops import AluOp

# fp32 holds every integer of magnitude up to 2^24 exactly (24-bit significand)
FP32_EXACT_INTEGER = 2**24


def apply(op: AluOp, a, b) -> np.ndarray:
    """op on int64 values with unbounded integer semantics (the value PyTorch would want): a
    zero divisor raises as PyTorch does."""
    if op.name in ("divide", "mod"):
        _nonzero(b)
    fn = NATIVE_OPS.get(op.name)
    with np.errstate(over="ignore"):
        return np.asarray(fn(a, b) if fn is not None else op(a, b)).astype(np.int64)


def check_exact(exact, stored, dst: AccessPattern, *, native: bool) -> None:
    """Raise IntegerRangeError where the value stored is not the exact integer: outside the
    destination's range, or (through fp32) past 2^24 or rounded."""
    exact = np.asarray(exact, dtype=np.int64)
    info = np.iinfo(dst.dtype.np_dtype) if dst.dtype.is_int else None
    bad = np.asarray(stored).astype(np.float64) != exact.astype(np.float64)
    if info is not None:
        bad |= (exact < info.min) | (exact > info.max)
    if not native:
        bad |= np.abs(exact) > FP32_EXACT_INTEGER
    if exact.size and np.any(bad):
        value = int(exact.reshape(-1)[int(np.argmax(bad.reshape(-1)))])
        _refuse(value, native, info)


def check_fp32_inputs(values: np.ndarray) -> None:
    """Inputs of an integer reduction through fp32: whole numbers below 2^24 in magnitude (a
    larger one may already have been rounded when it was loaded)."""
    values = np.asarray(values, dtype=np.float64)
    bad = (np.abs(values) >= FP32_EXACT_INTEGER) | (values != np.round(values))
    if values.size and np.any(bad):
        _refuse(values.reshape(-1)[int(np.argmax(bad.reshape(-1)))], False, None)


def check_fp32_result(exact, stored) -> None:
    """An integer reduction's fp32 result must be the exact value (computed in float64)."""
    exact = np.asarray(exact, dtype=np.float64)
    bad = (np.asarray(stored, dtype=np.float64) != exact) | (np.abs(exact) > FP32_EXACT_INTEGER)
    if exact.size and np.any(bad):
        _refuse(exact.reshape(-1)[int(np.argmax(bad.reshape(-1)))], False, None)


def _refuse(value, native: bool, info) -> None:
    value = int(value) if np.isfinite(value) else value
    if native:
        raise IntegerRangeError(
            f"integer result {value}", f"int32 [{info.min}, {info.max}]: PyTorch computes this "
            f"int64 value exactly, a NeuronCore holds 32-bit integers")
    raise IntegerRangeError(
        f"integer value {value}", "the integers fp32 holds exactly (|x| < 2^24): this engine "
        "computes integers in fp32, and PyTorch's answer would differ")


def _nonzero(b) -> None:
    if np.any(np.asarray(b) == 0):
        raise IntegerArithmeticError("integer division by zero (PyTorch raises "
                                     "ZeroDivisionError; the hardware result is undefined)")


def _trunc_divide(a, b):
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(b != 0, np.abs(a) // np.where(b != 0, np.abs(b), 1), 0)
    return np.where((a < 0) != (b < 0), -q, q)


def _trunc_mod(a, b):
    return np.where(np.asarray(b) != 0, a - _trunc_divide(a, b) * b, 0)


def _power(a, b):
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))
    result = np.ones(a.shape, dtype=np.uint64)
    base, exp = a.astype(np.uint64), np.abs(b).astype(np.uint64)
    while np.any(exp):  # square and multiply modulo 2^64 (a multiple of 2^32)
        odd = (exp & np.uint64(1)).astype(bool)
        result = np.where(odd, result * base, result)
        base = base * base
        exp = exp >> np.uint64(1)
    result = result.astype(np.int64)
    # a ** -n truncates 1 / a^n (PyTorch's integer power; 0 ** -n gives 0)
    return np.where(b >= 0, result, np.where(np.abs(result) == 1, result, 0))


def _compare(fn):
    return lambda a, b: fn(a, b).astype(np.int64)


NATIVE_OPS = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
              "divide": _trunc_divide, "mod": _trunc_mod, "pow": _power,
              "max": np.maximum, "min": np.minimum,
              "equal": _compare(np.equal), "not_equal": _compare(np.not_equal),
              "greater": _compare(np.greater), "greater_equal": _compare(np.greater_equal),
              "less": _compare(np.less), "less_equal": _compare(np.less_equal)}
