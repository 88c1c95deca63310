"""`cast`, `to_compute` and `round_tf32`: every value trnsim writes passes through here.

Float -> narrower float: RNE or stochastic rounding from float32 (see `trnsim.numerics.rounding`
for the algorithms and each format's overflow). Sources wider than the hardware (float64, int64)
are first rounded to float32 (RNE): the NeuronCore has no fp64 datapath, so a value reaches an
engine as fp32 at best. Integer and bool sources reach float targets through float32 too, as the
engines convert their inputs to fp32 (``nki/api/nki.api.shared.rst``, "arithmetic operators").

Float -> integer (`FLOAT_TO_INT`): round to nearest, ties to even; saturate to the integer range;
NaN -> 0. No Neuron page documents this conversion; RNE is the one rounding the hardware documents
for every generation, and saturation is what the engines' output converters do for narrow floats
(overflow to inf, never wrap-around). Stochastic rounding never applies to integer targets: the
runtime applies SR only to float targets (FP16, BF16, FP8, TF32). Integer -> narrower integer:
saturate (exact inside the range). Anything -> bool_: nonzero is True.
"""

from __future__ import annotations

import os
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np

from trnsim.errors import InvalidArgumentError, UnknownNameError, UnsupportedError
from trnsim.numerics import dtypes as _dt
from trnsim.numerics.dtypes import DType, DTypeLike, check_supported, dtype
from trnsim.numerics.packing import pack_x4, unpack_x4
from trnsim.numerics.random import CounterRNG, default_rng
from trnsim.numerics.rounding import rne_from_f32, sr_from_f32

if TYPE_CHECKING:
    from trnsim.hardware import CoreSpec

ROUNDING_ENV = "NEURON_RT_STOCHASTIC_ROUNDING_EN"
ROUNDING_MODES = ("rne", "stochastic")
# ASSUMPTION (undocumented on every NeuronCore version): how a float becomes an integer.
FLOAT_TO_INT = "round half to even, saturate to the integer range, NaN -> 0"

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


def default_rounding() -> str:
    """"stochastic" if NEURON_RT_STOCHASTIC_ROUNDING_EN enables SR, else "rne" (read per call).

    The runtime documents ``=1`` / ``=0`` (rounding-modes.rst) and ``<true/false>`` (nrt
    developer guide); both spellings are accepted, anything else is an error.
    """
    text = os.environ.get(ROUNDING_ENV)
    if text is None:
        return "rne"
    value = text.strip().lower()
    if value in _TRUE:
        return "stochastic"
    if value in _FALSE:
        return "rne"
    raise InvalidArgumentError(f"{ROUNDING_ENV}={text!r}: expected 1/0 or true/false")


def _resolve_mode(rounding: str | None, core: CoreSpec | None) -> str:
    if rounding is None:
        mode = default_rounding()
        # SR exists from NeuronCore-v2; the runtime's SR settings have no effect on inf1.
        if core is not None and core.version < 2:
            return "rne"
        return mode
    mode = str(rounding).lower()
    if mode == "sr":
        mode = "stochastic"
    if mode not in ROUNDING_MODES:
        raise InvalidArgumentError(f"rounding {rounding!r} is not one of {', '.join(ROUNDING_MODES)}")
    if mode == "stochastic" and core is not None and core.version < 2:
        raise UnsupportedError(f"stochastic rounding is not supported on {core.name} "
                               "(available from NeuronCore-v2)")
    return mode


def _source_kind(src: np.ndarray, source: DTypeLike | None) -> DType | str:
    """The registry dtype the source's storage holds, or "wide-float"/"wide-int" for fp64/int64."""
    if source is not None:
        declared = dtype(source)
        if src.dtype != declared.np_dtype:
            raise InvalidArgumentError(f"source dtype {declared.name} is stored as "
                                       f"{declared.np_dtype}, but the array holds {src.dtype}")
        return declared
    try:
        return _dt.dtype(src.dtype)
    except UnknownNameError:
        pass
    if src.dtype.kind == "f":
        return "wide-float"
    if src.dtype.kind in "iu":
        return "wide-int"
    raise InvalidArgumentError(f"cannot cast an array of {src.dtype}: not a numeric dtype")


def cast(array: Any, dt: DTypeLike, rounding: str | None = None, rng: CounterRNG | None = None,
         *, source: DTypeLike | None = None, core: CoreSpec | None = None) -> np.ndarray:
    """Convert `array` to dtype `dt` as the hardware does; returns `dt`'s storage array.

    rounding: None (the process default, `default_rounding`), "rne" or "stochastic"; it matters
    only for float targets narrower than float32. rng: the `CounterRNG` for SR; None uses the
    process-wide generator (NEURON_RT_STOCHASTIC_ROUNDING_SEED), so repeated calls draw fresh,
    reproducible bits. source: how to read the storage when it is ambiguous (a float32 array
    holding tfloat32, a uint32 array holding float8_e4m3fn_x4). core: if given, `dt` must be
    supported there (`check_supported`) and SR requires NeuronCore-v2 or later.

    Same storage dtype in and out returns `array` itself (no copy), except float32 -> tfloat32,
    which rounds the mantissa to 10 bits. x4 targets pack the last axis (length / 4).
    """
    target = dtype(dt)
    if core is not None:
        check_supported(target, core, "cast")
    if rng is not None and not isinstance(rng, CounterRNG):
        raise InvalidArgumentError(f"rng must be a trnsim.numerics.CounterRNG, got {type(rng).__name__}")
    mode = _resolve_mode(rounding, core)
    src = np.asarray(array)
    kind = _source_kind(src, source)
    if src.dtype == target.np_dtype and (target.name != "tfloat32" or kind is _dt.tfloat32):
        return src
    if isinstance(kind, DType) and kind.element is not None:
        src = unpack_x4(src, kind)
    if target.element is not None:
        values = _to_float(src, target.element, mode, rng)
        if values.ndim == 0 or values.shape[-1] % 4:
            raise InvalidArgumentError(f"cast to {target.name}: last axis "
                                       f"{values.shape[-1:] or '()'} is not a multiple of 4")
        return pack_x4(values, target)
    if target.is_float:
        return _to_float(src, target, mode, rng)
    if target.is_int:
        return _to_int(src, target)
    return src != 0


_BITS = {1: np.uint8, 2: np.uint16}


def widen_f32(src: np.ndarray) -> np.ndarray:
    """float32 values of `src`: `to_compute` without its checks, for callers that know the
    storage is plain. A narrow array strided along its last axis (a tile read every few
    elements) is first copied as raw bits: ml_dtypes' own strided cast loop is several times
    slower than the copy plus its contiguous loop, and the conversion per element is the same,
    so are the bits."""
    if src.dtype == np.float32:
        return src
    bits = _BITS.get(src.dtype.itemsize)
    if bits is not None and _row_major_with_gaps(src):
        src = np.ascontiguousarray(src.view(bits)).view(src.dtype)
    return src.astype(np.float32)


def _row_major_with_gaps(src: np.ndarray) -> bool:
    """Axes in row-major order (so the cast's result is C-ordered either way) with a gap along
    the last one."""
    if not src.ndim or src.strides[-1] == src.dtype.itemsize:  # the common case: rows dense
        return False
    strides = [step for step, size in zip(src.strides, src.shape, strict=True) if size > 1]
    return (bool(strides) and strides[-1] != src.dtype.itemsize
            and all(outer >= inner > 0 for outer, inner in pairwise(strides))
            and strides[-1] > 0)


def _to_float(src: np.ndarray, target: DType, mode: str, rng: CounterRNG | None) -> np.ndarray:
    if src.dtype == target.np_dtype and target.name != "tfloat32":
        return src
    x32 = widen_f32(src)
    if target.name == "float32":
        return x32
    if mode == "stochastic":
        return sr_from_f32(x32, target, rng if rng is not None else default_rng())
    return rne_from_f32(x32, target)


def _to_int(src: np.ndarray, target: DType) -> np.ndarray:
    info = np.iinfo(target.np_dtype)
    if src.dtype == np.uint64:
        return np.minimum(src, np.uint64(info.max)).astype(target.np_dtype)
    if src.dtype.kind in "iub":
        return np.clip(src.astype(np.int64), info.min, info.max).astype(target.np_dtype)
    x = widen_f32(src).astype(np.float64)  # float64 holds every float32 and every int32 bound
    x = np.rint(x)  # ties to even
    x = np.nan_to_num(x, nan=0.0, posinf=info.max, neginf=info.min)
    return np.clip(x, info.min, info.max).astype(target.np_dtype)


def to_compute(array: Any, dt: DTypeLike | None = None) -> np.ndarray:
    """The float32 values an engine computes on (Vector/Scalar/GpSimd arithmetic is fp32).

    Narrow floats widen exactly; integers and bool convert to float32 (RNE beyond 2^24), as the
    engines' arithmetic operators do; bit-vector operators read the integer storage instead, so
    they do not call this. `dt` matters only where storage is ambiguous: x4 types, stored as plain
    uint, unpack when `dt` names them; otherwise the array's own dtype decides (a float32 array is
    returned as is, whatever `dt` says).
    """
    src = np.asarray(array)
    if src.dtype == np.float32:  # an engine's own fp32 data: nothing to check or convert
        return src
    if dt is not None:
        declared = dtype(dt)
        if declared.element is not None and src.dtype == declared.np_dtype:
            src = unpack_x4(src, declared)
    _source_kind(src, None)  # rejects non-numeric arrays
    return widen_f32(src)


def round_tf32(array: Any, rounding: str = "rne", rng: CounterRNG | None = None) -> np.ndarray:
    """float32 values with the mantissa rounded to 10 bits: what TensorE reads of a tfloat32
    operand. RNE unless `rounding` says "stochastic"."""
    return cast(widen_f32(np.asarray(array)), _dt.tfloat32, rounding, rng, source=_dt.float32)
