"""Rounding float32 into narrower float formats: round-to-nearest-even and stochastic rounding.

Every narrowing the simulated hardware does starts from float32 (the engines compute in fp32 and
cast on write), so both modes take a float32 array and return the target's storage array.

RNE (all NeuronCore versions, ``about-neuron/arch/neuron-features/rounding-modes.rst``) is
delegated to ml_dtypes / numpy ``astype``, which round float32 directly (no double rounding); the
test suite checks them bit for bit against an independent integer reference.

Overflow, per format, under RNE (a value beyond max + half an ulp):

- bfloat16, float16, float8_e4m3, float8_e5m2, tfloat32 -> +-inf. A Neuron page agrees: the
  ``range_select`` doc says an FP32_MIN fill "will become -INF" when the output is FP16/BF16/FP8
  "since HW performs a downcast" (``nki/api/nki/isa/__init__.py``).
- float8_e4m3fn (no inf) -> NaN, as ml_dtypes does; no Neuron page says the cast saturates.
  (``quantize_mx`` avoids the question by choosing its scale so values never overflow.)
- float4_e2m1fn (MX element; no inf, no NaN): saturates to +-6, and NaN becomes a zero, as
  ml_dtypes does. float8_e8m0fnu (MX scale): zero, negatives, inf and overflow give NaN (0xFF).

Stochastic rounding (NeuronCore-v2 on): a value between two neighbours lo < x < hi of the target
grid rounds to hi with probability (x - lo) / (hi - lo), so E[result] = x. The Neuron runtime
applies it to "all internal rounding operations when casting from FP32 to a reduced precision data
type (FP16, BF16, FP8, TF32)" (``frameworks/jax/api-reference-guide/neuron-envvars.rst``).
Algorithm: on the float32 bit pattern, add a uniform random integer below the target precision
(k = dropped bits) and truncate; a carry into the exponent field is exactly a round-up to the next
binade, so this is exact for every k <= 23, subnormal targets included. Below the smallest target
step s (k >= 24, |x| < s) the choice between 0 and s compares 32 random bits with |x|/s truncated
to 32 bits: a bias below 2^-32 of s. An SR result past the largest finite value is the next grid
point, which then overflows exactly as RNE would (inf, or NaN for e4m3fn). NaN and inf pass
through as under RNE.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import cache

import ml_dtypes
import numpy as np

from trnsim.numerics.dtypes import DType
from trnsim.numerics.random import CounterRNG

_CHUNK = 1 << 17  # elements per pass of the SR loop: the working set stays in cache
_U32 = np.uint32


@dataclass(frozen=True)
class FloatGrid:
    """Where a float format's values sit: fraction bits and smallest normal exponent."""

    mantissa_bits: int
    min_normal_exponent: int  # unbiased; below it the grid is uniform (subnormals)

    @property
    def dropped_bits(self) -> int:
        """float32 fraction bits below this format's precision, for a normal target value."""
        return 23 - self.mantissa_bits


@cache
def grid_of(target: DType) -> FloatGrid:
    if target.name == "tfloat32":
        return FloatGrid(10, -126)
    info = ml_dtypes.finfo(target.np_dtype)
    return FloatGrid(int(info.nmant), int(info.minexp))


# --- round to nearest even ----------------------------------------------------------------------

def rne_from_f32(x32: np.ndarray, target: DType) -> np.ndarray:
    """float32 -> `target` storage, round-to-nearest-even (tfloat32: fp32 with 10-bit mantissa)."""
    if target.name == "tfloat32":
        return rne_tf32(x32)
    if target.name == "float32":
        return x32
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf/NaN is the semantics
        return x32.astype(target.np_dtype)


def store_rne(dst: np.ndarray, x32: np.ndarray) -> None:
    """Store float32 values into `dst` (a narrower float array's view) rounded to nearest even:
    `rne_from_f32`'s conversion written in place, without the temporary it returns. Raises
    numpy's ValueError when `x32` does not broadcast to `dst`."""
    with np.errstate(over="ignore", invalid="ignore"):  # overflow to inf/NaN is the semantics
        np.copyto(dst, x32, casting="unsafe")


def rne_tf32(x32: np.ndarray) -> np.ndarray:
    """Round a float32 array's mantissa to 10 bits (RNE); inf stays inf, NaN stays NaN."""
    flat = np.ascontiguousarray(x32, dtype=np.float32).reshape(-1)
    bits = flat.view(_U32)
    lsb = (bits >> _U32(13)) & _U32(1)
    rounded = (bits + (_U32(0xFFF) + lsb)) & _U32(0xFFFFE000)
    nan = np.isnan(flat)
    if nan.any():  # keep NaN a (quiet) NaN: the carry of a full payload would reach the sign bit
        rounded[nan] = (bits[nan] & _U32(0xFFFFE000)) | _U32(0x00400000)
    return rounded.view(np.float32).reshape(np.shape(x32))


# --- stochastic rounding ------------------------------------------------------------------------

def words_needed(target: DType, n: int) -> int:
    """Random 32-bit words an SR cast of `n` values to `target` consumes."""
    return (n + 1) // 2 if _is_bf16(target) else n


def sr_from_f32(x32: np.ndarray, target: DType, rng: CounterRNG) -> np.ndarray:
    """float32 -> `target` storage with stochastic rounding, drawing bits from `rng`.

    Element i of the (C-order) array uses word i of the draw; for bfloat16, which needs only 16
    bits, element 2j uses the low half of word j and element 2j+1 the high half.
    """
    flat = np.ascontiguousarray(x32, dtype=np.float32).reshape(-1)
    words = rng.bits32(words_needed(target, flat.size))
    if _is_bf16(target):
        out = _sr_bf16(flat, words)
    else:
        grid_bits = _sr_grid(flat, words, grid_of(target))
        out = grid_bits.view(np.float32)
        if target.name != "tfloat32":
            with np.errstate(over="ignore", invalid="ignore"):
                out = out.astype(target.np_dtype)  # exact, or overflows exactly as RNE would
    _copy_nan_as_rne(flat, out, target)
    return out.reshape(np.shape(x32))


def _is_bf16(target: DType) -> bool:
    return target.name == "bfloat16"


def _halves(words: np.ndarray, n: int) -> np.ndarray:
    """The low then high 16-bit half of each word, interleaved: n uint16 values."""
    pairs = words.view(np.uint16)
    if sys.byteorder == "big":  # view order follows memory; the definition follows the value
        pairs = pairs.reshape(-1, 2)[:, ::-1].reshape(-1)
    return pairs[:n]


def _sr_bf16(flat: np.ndarray, words: np.ndarray) -> np.ndarray:
    """bfloat16 keeps the top 16 bits of float32, so k = 16 for every value, subnormals too."""
    bits = flat.view(_U32)
    noise = _halves(words, flat.size)
    out = np.empty(flat.size, dtype=np.uint16)
    tmp = np.empty(min(_CHUNK, flat.size), dtype=_U32)
    for start in range(0, flat.size, _CHUNK):
        stop = min(start + _CHUNK, flat.size)
        t = tmp[: stop - start]
        np.add(bits[start:stop], noise[start:stop], out=t)
        np.right_shift(t, _U32(16), out=t)
        np.copyto(out[start:stop], t, casting="unsafe")
    return out.view(ml_dtypes.bfloat16)


def _sr_grid(flat: np.ndarray, words: np.ndarray, grid: FloatGrid) -> np.ndarray:
    """float32 bit patterns of x rounded stochastically onto `grid` (sign kept)."""
    bits = flat.view(_U32)
    out = np.empty(flat.size, dtype=_U32)
    min_biased = grid.min_normal_exponent + 127  # the target's smallest normal, as an fp32 field
    for start in range(0, flat.size, _CHUNK):
        stop = min(start + _CHUNK, flat.size)
        b = bits[start:stop]
        r = words[start:stop]
        exponent = ((b >> _U32(23)) & _U32(0xFF)).astype(np.int32)
        np.maximum(exponent, 1, out=exponent)  # fp32 subnormals share the exponent of 2^-126
        k = grid.dropped_bits + np.maximum(min_biased - exponent, 0)
        mask = (_U32(1) << np.minimum(k, 23).astype(_U32)) - _U32(1)
        rounded = (b + (r & mask)) & ~mask
        tiny = k > 23
        if tiny.any():
            rounded[tiny] = _sr_below_grid(b[tiny], r[tiny], k[tiny], grid)
        out[start:stop] = rounded
    return out


def _sr_below_grid(bits: np.ndarray, r: np.ndarray, k: np.ndarray, grid: FloatGrid) -> np.ndarray:
    """|x| below the smallest grid step s: s with probability |x|/s, else zero (sign kept).

    |x| / s = M / 2^k with M the 24-bit significand; round up iff r < floor(M * 2^32 / 2^k).
    """
    exponent = (bits >> _U32(23)) & _U32(0xFF)
    significand = (bits & _U32(0x7FFFFF)) | np.where(exponent > 0, _U32(0x800000), _U32(0))
    threshold = (significand.astype(np.uint64) << np.uint64(32)) >> np.minimum(k, 63).astype(np.uint64)
    up = r.astype(np.uint64) < threshold
    step = np.float32(2.0 ** (grid.min_normal_exponent - grid.mantissa_bits)).view(_U32)
    sign = bits & _U32(0x80000000)
    return sign | np.where(up, step, _U32(0))


def _copy_nan_as_rne(flat: np.ndarray, out: np.ndarray, target: DType) -> None:
    """NaN inputs give exactly what RNE gives (the random carry must not touch them)."""
    nan = np.isnan(flat)
    if nan.any():
        out.reshape(-1)[nan] = rne_from_f32(flat[nan], target)
