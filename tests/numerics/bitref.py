"""An independent reference for float32 -> narrow float conversion: integer bit manipulation only.

It shares no code with trnsim.numerics and never calls ml_dtypes: formats are described by their
exponent and mantissa widths and their overflow rule, and every conversion is done on int64 views
of the float32 bit patterns. Tests compare trnsim's casts with it bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Format:
    name: str
    exponent_bits: int
    mantissa_bits: int
    overflow: str  # "inf": IEEE-like (top exponent = inf/NaN); "nan": fn formats (S.1111.111 = NaN)

    @property
    def bias(self) -> int:
        return (1 << (self.exponent_bits - 1)) - 1

    @property
    def min_normal_exponent(self) -> int:
        return 1 - self.bias

    @property
    def max_code(self) -> int:
        """Magnitude code of the largest finite value."""
        e, m = self.exponent_bits, self.mantissa_bits
        if self.overflow == "inf":
            return (((1 << e) - 2) << m) | ((1 << m) - 1)
        return (((1 << e) - 1) << m) | ((1 << m) - 2)

    @property
    def inf_code(self) -> int:
        return ((1 << self.exponent_bits) - 1) << self.mantissa_bits

    @property
    def nan_code(self) -> int:
        e, m = self.exponent_bits, self.mantissa_bits
        return (((1 << e) - 1) << m) | ((1 << m) - 1)

    @property
    def sign_shift(self) -> int:
        return self.exponent_bits + self.mantissa_bits


BF16 = Format("bfloat16", 8, 7, "inf")
FP16 = Format("float16", 5, 10, "inf")
E4M3 = Format("float8_e4m3", 4, 3, "inf")
E4M3FN = Format("float8_e4m3fn", 4, 3, "nan")
E5M2 = Format("float8_e5m2", 5, 2, "inf")
TF32 = Format("tfloat32", 8, 10, "inf")
FORMATS = (BF16, FP16, E4M3, E4M3FN, E5M2)


def _bit_length(v: np.ndarray) -> np.ndarray:
    """Number of significant bits of non-negative int64 values (0 -> 0), by binary search."""
    v = v.copy()
    length = np.zeros_like(v)
    for step in (32, 16, 8, 4, 2, 1):
        big = v >= (1 << step)
        length += np.where(big, step, 0)
        v = np.where(big, v >> step, v)
    return length + (v > 0)


def encode(x: np.ndarray, fmt: Format, mode: str = "rne") -> np.ndarray:
    """Codes (int64, sign included) of float32 values rounded into `fmt`; mode "rne" or "rtz".

    NaN inputs give the format's NaN code (sign kept); compare NaN-ness, not payloads.
    """
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.int64)
    sign = bits >> 31
    field = (bits >> 23) & 0xFF
    fraction = bits & 0x7FFFFF
    significand = np.where(field > 0, fraction | (1 << 23), fraction)
    exponent = np.maximum(field, 1) - 150  # |x| = significand * 2^exponent
    m = fmt.mantissa_bits
    top = _bit_length(significand) - 1 + exponent  # floor(log2 |x|) for x != 0
    quantum = np.maximum(top, fmt.min_normal_exponent) - m  # log2 of the target ulp at x
    shift = quantum - exponent  # > 0: bits to drop
    left = np.clip(-shift, 0, 62)
    right = np.clip(shift, 0, 62)
    kept = np.where(shift <= 0, significand << left, significand >> right)
    dropped = np.where(shift <= 0, 0, significand - (kept << right))
    half = np.where(shift > 0, np.int64(1) << np.maximum(right - 1, 0), 0)
    if mode == "rne":
        up = (shift > 0) & ((dropped > half) | ((dropped == half) & (kept & 1 == 1)))
    elif mode == "rtz":
        up = np.zeros_like(kept, dtype=bool)
    else:
        raise ValueError(mode)
    n = kept + up
    # rounding up may carry into the next binade: renormalise
    carry = n >= (1 << (m + 1))
    n = np.where(carry, n >> 1, n)
    quantum = quantum + carry
    normal = n >= (1 << m)
    biased = np.where(normal, quantum + m + fmt.bias, 0)
    code = np.where(normal, (biased << m) | (n - (1 << m)), n)
    code = np.where(significand == 0, 0, code)
    overflow_code = fmt.inf_code if fmt.overflow == "inf" else fmt.nan_code
    code = np.where(code > fmt.max_code, overflow_code, code)
    code = np.where(field == 0xFF, np.where(fraction == 0, overflow_code, fmt.nan_code), code)
    return code | (sign << fmt.sign_shift)


def decode(code: np.ndarray, fmt: Format) -> np.ndarray:
    """float64 values of codes (NaN / inf where the format puts them)."""
    code = np.asarray(code, dtype=np.int64)
    m = fmt.mantissa_bits
    sign = np.where((code >> fmt.sign_shift) & 1 == 1, -1.0, 1.0)
    magnitude = code & ((1 << fmt.sign_shift) - 1)
    field = magnitude >> m
    fraction = magnitude & ((1 << m) - 1)
    value = np.where(field > 0, (fraction + (1 << m)) * np.exp2(field - fmt.bias - m),
                     fraction * np.exp2(fmt.min_normal_exponent - m))
    if fmt.overflow == "inf":
        special = field == (1 << fmt.exponent_bits) - 1
        value = np.where(special & (fraction == 0), np.inf, value)
        value = np.where(special & (fraction != 0), np.nan, value)
    else:
        value = np.where(magnitude == fmt.nan_code, np.nan, value)
    return sign * value


def tf32_bits(code: np.ndarray) -> np.ndarray:
    """A TF32 code laid out as float32 bits (sign, 8-bit exponent, 10 bits + 13 zeros)."""
    code = np.asarray(code, dtype=np.int64)
    return (((code >> 18) & 1) << 31 | ((code >> 10) & 0xFF) << 23 | (code & 0x3FF) << 13).astype(
        np.uint32)


def midpoints(fmt: Format) -> np.ndarray:
    """Every exact halfway point between neighbouring finite codes, both signs, as float32."""
    codes = np.arange(0, fmt.max_code + 1, dtype=np.int64)
    values = decode(codes, fmt)
    mids = (values[:-1] + values[1:]) / 2  # exact in float64, and representable in float32
    top_ulp = 2.0 ** ((fmt.max_code >> fmt.mantissa_bits) - fmt.bias - fmt.mantissa_bits)
    mids = np.concatenate([mids, [values[-1] + top_ulp / 2]])  # max + half an ulp: overflow tie
    return np.concatenate([mids, -mids]).astype(np.float32)


def all_finite_values(fmt: Format) -> np.ndarray:
    codes = np.arange(0, fmt.max_code + 1, dtype=np.int64)
    values = decode(codes, fmt)
    return np.concatenate([values, -values]).astype(np.float32)
