"""The x4-packed MX storage types and the MX block scale.

Layout (``nki/deep-dives/mxfp-matmul.rst``): ``float8_*_x4`` items are 32 bits holding four fp8
elements; ``float4_e2m1fn_x4`` items are 16 bits holding four fp4 elements. The four elements are
four *contiguous* elements of the free dimension (``nki.isa.quantize_mx``), so packing groups the
last axis by 4. Within an item, element j occupies bits [j*b, (j+1)*b) of the item's integer value
(b = 8 or 4): on the little-endian hosts and devices Neuron runs on, element j of an fp8 item is
byte j, which is exactly what NKI's own reference (``mx_cpu_utils.py``: ``view(np.uint32)``; fp4:
element 2k in the low nibble) produces. Shifts, not memory views, define it here, so the result
does not depend on the host's byte order.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from trnsim.errors import InvalidArgumentError
from trnsim.numerics.dtypes import DType, DTypeLike, dtype


def _x4(dt: DTypeLike) -> DType:
    resolved = dtype(dt)
    if resolved.element is None:
        raise InvalidArgumentError(f"{resolved.name} is not an x4-packed dtype "
                                   "(float8_e4m3fn_x4, float8_e5m2_x4, float4_e2m1fn_x4)")
    return resolved


def pack_x4(values: np.ndarray, dt: DTypeLike) -> np.ndarray:
    """Pack element-typed values (last axis a multiple of 4) into x4 items of `dt`.

    `values` must already be in the element type (e.g. ``ml_dtypes.float8_e4m3fn``); use
    ``cast(array, "float8_e4m3fn_x4")`` to round and pack float data in one step.
    """
    packed = _x4(dt)
    element = packed.element
    assert element is not None
    values = np.asarray(values)
    if values.dtype != element.np_dtype:
        raise InvalidArgumentError(f"pack_x4 to {packed.name} needs {element.name} values, "
                                   f"got {values.dtype}")
    if values.ndim == 0 or values.shape[-1] % 4:
        raise InvalidArgumentError(f"pack_x4: last axis {values.shape[-1:] or '()'} is not a "
                                   "multiple of 4")
    bits = element.bits
    codes = values.view(np.uint8).astype(packed.np_dtype) & packed.np_dtype.type((1 << bits) - 1)
    groups = codes.reshape(*values.shape[:-1], values.shape[-1] // 4, 4)
    out = np.zeros(groups.shape[:-1], dtype=packed.np_dtype)
    for j in range(4):
        out |= groups[..., j] << packed.np_dtype.type(j * bits)
    return out


def unpack_x4(items: np.ndarray, dt: DTypeLike) -> np.ndarray:
    """Unpack x4 items of `dt` into element-typed values; the last axis grows 4x."""
    packed = _x4(dt)
    element = packed.element
    assert element is not None
    items = np.asarray(items)
    if items.dtype != packed.np_dtype:
        raise InvalidArgumentError(f"unpack_x4 of {packed.name} needs {packed.np_dtype} items, "
                                   f"got {items.dtype}")
    if items.ndim == 0:
        items = items.reshape(1)
    bits = element.bits
    mask = packed.np_dtype.type((1 << bits) - 1)
    codes = np.empty((*items.shape, 4), dtype=np.uint8)
    for j in range(4):
        codes[..., j] = (items >> packed.np_dtype.type(j * bits)) & mask
    return codes.reshape(*items.shape[:-1], items.shape[-1] * 4).view(element.np_dtype)


def mx_max_exponent(element: DTypeLike) -> int:
    """E_max: the largest unbiased exponent of an MX element type (8 e4m3fn, 15 e5m2, 2 e2m1fn)."""
    resolved = dtype(element).value_dtype
    return int(ml_dtypes.finfo(resolved.np_dtype).maxexp) - 1


def mx_scale(amax: np.ndarray, element: DTypeLike) -> np.ndarray:
    """The float8_e8m0fnu block scale ``nki.isa.quantize_mx`` chooses for a group's max |value|.

    X = 2^(floor(log2 amax) - (E_max - 1)): twice the OCP sample scale, so rounding the largest
    value of a group never saturates; an all-zero group gets 2^-127 (``nki.isa.quantize_mx``,
    "Scale calculation"). Exponents clamp to the e8m0 range [-127, 127].
    """
    amax = np.abs(np.asarray(amax, dtype=np.float32))
    _, exp2 = np.frexp(amax)  # amax = m * 2^exp2, m in [0.5, 1): floor(log2 amax) = exp2 - 1
    unbiased = exp2.astype(np.int32) - 1 - (mx_max_exponent(element) - 1)
    unbiased = np.where(amax > 0, unbiased, -127)
    biased = np.clip(unbiased + 127, 0, 254).astype(np.uint8)
    return biased.view(ml_dtypes.float8_e8m0fnu)
