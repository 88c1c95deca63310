"""The one registry of data types, under the names NKI uses (``nki.language.<name>``).

Every layer names a dtype through `dtype(x)` and gets back the same frozen `DType`, so "bfloat16",
``ml_dtypes.bfloat16``, ``torch.bfloat16`` and ``"bf16"`` can never drift apart. Storage is plain
numpy: ml_dtypes supplies the narrow floats, numpy the integers.

Names and formats (``nki/api/nki.api.shared.rst`` and the ``nki.language`` dtype pages):

- ``float8_e4m3`` is the IEEE-like F8E4M3 that Trn1/Trn2 call cFP8 e4m3: it has inf, max 240
  (= ``ml_dtypes.float8_e4m3``). ``float8_e4m3fn`` (max 448, no inf, NaN = S.1111.111) is native
  only from Trn3; the compiler rejects it on Trn1/Trn2 (NCC_EVRF051).
- ``tfloat32`` is stored as float32; TensorE reads only 10 mantissa bits (see `round_tf32`).
- ``bool_`` is stored as one byte (NKI: "boolean stored as uint8"); numpy's ``bool_`` is that.
- The x4 types pack four elements into one stored item, for ``nc_matmul_mx`` on NeuronCore-v4.
  ``float8_*_x4`` items are 32 bits (``np.uint32``); ``float4_e2m1fn_x4`` items are 16 bits
  (``np.uint16``): "The float4_*_x4 type is 16-bits wide and physically contains four float4
  elements" (``nki/deep-dives/mxfp-matmul.rst``). See `trnsim.numerics.packing` for the order.

Which NeuronCore version supports a dtype is hardware data (`CoreSpec.supported_dtypes`), read
here, never restated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import ml_dtypes
import numpy as np

from trnsim.errors import UnknownNameError, UnsupportedError

if TYPE_CHECKING:
    from trnsim.hardware import CoreSpec

DTypeLike = Any  # a DType, a name, a numpy/ml_dtypes dtype or scalar type, or a torch.dtype


class UnknownDTypeError(UnknownNameError):
    """An unknown dtype: the message lists every supported name, after any close matches."""

    def __init__(self, name: str) -> None:
        super().__init__("dtype", name, names())
        if self.suggestions:  # the base message then names only the close matches
            self.message += " supported: " + ", ".join(names())
            self.args = (self.message,)


@dataclass(frozen=True)
class DType:
    """One NKI data type: how it is stored and what range and precision its values have."""

    name: str
    np_dtype: np.dtype = field(repr=False)
    kind: str  # "float" | "int" | "bool"
    precision: str | None = field(default=None, repr=False)  # matmul precision class (hardware)
    packed: int = field(default=1, repr=False)  # elements per stored item
    element: DType | None = field(default=None, repr=False)  # element type of an x4 type
    mantissa_bits: int = field(default=0, repr=False)  # explicit fraction bits (floats)
    exponent_bits: int = field(default=0, repr=False)

    def __hash__(self) -> int:
        """By name (equal dtypes have equal names): the generated hash would hash every field,
        numpy's dtype among them, each time an access pattern or a dict key holding one is
        hashed (lowering hashes tens of thousands)."""
        return hash(self.name)

    def __copy__(self) -> DType:
        return self

    def __deepcopy__(self, memo: dict) -> DType:
        """A dtype is one registry entry: copies of programs share it (its cached `info` is a
        numpy finfo, which cannot be deep-copied)."""
        return self

    @property
    def itemsize(self) -> int:
        """Bytes per stored item (an x4 item holds `packed` elements)."""
        return self.np_dtype.itemsize

    @property
    def bits(self) -> int:
        """Bits per stored item; for an x4 type, 4 x the element's bits."""
        if self.element is not None:
            return self.packed * self.element.bits
        return _ELEMENT_BITS.get(self.name, self.itemsize * 8)

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind == "int"

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def value_dtype(self) -> DType:
        """The dtype of the values: the element type for x4 types, else itself."""
        return self.element if self.element is not None else self

    @cached_property
    def info(self) -> Any:
        """``finfo`` / ``iinfo`` of the values (ml_dtypes' for the narrow floats)."""
        value = self.value_dtype
        if value.kind == "float":
            return ml_dtypes.finfo(value.np_dtype)
        if value.kind == "int":
            return np.iinfo(value.np_dtype)
        return None

    @cached_property
    def max(self) -> float | int:
        """Largest finite value (True -> 1 for bool_)."""
        if self.value_dtype.kind == "bool":
            return 1
        info = self.info
        return float(info.max) if self.value_dtype.is_float else int(info.max)

    @cached_property
    def min(self) -> float | int:
        """Smallest finite value: -max for signed floats, the smallest power of two for the
        unsigned float8_e8m0fnu, ``iinfo.min`` for integers."""
        if self.value_dtype.kind == "bool":
            return 0
        info = self.info
        return float(info.min) if self.value_dtype.is_float else int(info.min)

    @property
    def has_inf(self) -> bool:
        return self.value_dtype.name in _HAS_INF

    def supported_on(self, core: CoreSpec) -> bool:
        """Whether this NeuronCore version can hold the dtype (catalog: `supported_dtypes`)."""
        return core.supports(self.name)

    def __str__(self) -> str:
        return self.name


# Element bit widths that differ from the numpy item size (float4 stores in one byte in ml_dtypes).
_ELEMENT_BITS = {"float4_e2m1fn": 4}
_HAS_INF = frozenset({"float32", "tfloat32", "bfloat16", "float16", "float8_e4m3", "float8_e5m2"})


def _float(name: str, np_type: Any, precision: str | None, mantissa: int, exponent: int) -> DType:
    return DType(name, np.dtype(np_type), "float", precision, mantissa_bits=mantissa,
                 exponent_bits=exponent)


def _int(name: str, np_type: Any, precision: str | None = None) -> DType:
    return DType(name, np.dtype(np_type), "int", precision)


float32 = _float("float32", np.float32, "fp32", 23, 8)
tfloat32 = _float("tfloat32", np.float32, "tf32", 10, 8)
bfloat16 = _float("bfloat16", ml_dtypes.bfloat16, "bf16", 7, 8)
float16 = _float("float16", np.float16, "fp16", 10, 5)
float8_e4m3 = _float("float8_e4m3", ml_dtypes.float8_e4m3, "fp8", 3, 4)
float8_e4m3fn = _float("float8_e4m3fn", ml_dtypes.float8_e4m3fn, "fp8", 3, 4)
float8_e5m2 = _float("float8_e5m2", ml_dtypes.float8_e5m2, "fp8", 2, 5)
float8_e8m0fnu = _float("float8_e8m0fnu", ml_dtypes.float8_e8m0fnu, "fp8", 0, 8)
# Not an NKI tensor dtype on its own: the element of float4_e2m1fn_x4 (no core lists it).
float4_e2m1fn = _float("float4_e2m1fn", ml_dtypes.float4_e2m1fn, "fp8", 1, 2)
int8 = _int("int8", np.int8, "int8")
uint8 = _int("uint8", np.uint8, "int8")
int16 = _int("int16", np.int16)
uint16 = _int("uint16", np.uint16)
int32 = _int("int32", np.int32)
uint32 = _int("uint32", np.uint32)
bool_ = DType("bool_", np.dtype(np.bool_), "bool")
float8_e4m3fn_x4 = DType("float8_e4m3fn_x4", np.dtype(np.uint32), "float", "fp8", packed=4,
                         element=float8_e4m3fn)
float8_e5m2_x4 = DType("float8_e5m2_x4", np.dtype(np.uint32), "float", "fp8", packed=4,
                       element=float8_e5m2)
float4_e2m1fn_x4 = DType("float4_e2m1fn_x4", np.dtype(np.uint16), "float", "fp8", packed=4,
                         element=float4_e2m1fn)

DTYPES: tuple[DType, ...] = (
    float32, tfloat32, bfloat16, float16, float8_e4m3, float8_e4m3fn, float8_e5m2, float8_e8m0fnu,
    int8, uint8, int16, uint16, int32, uint32, bool_,
    float8_e4m3fn_x4, float8_e5m2_x4, float4_e2m1fn_x4, float4_e2m1fn,
)
_BY_NAME: dict[str, DType] = {d.name: d for d in DTYPES}

# Short names people type; every NKI name is also accepted as is.
ALIASES: dict[str, str] = {
    "fp32": "float32", "f32": "float32", "float": "float32",
    "tf32": "tfloat32",
    "bf16": "bfloat16",
    "fp16": "float16", "f16": "float16", "half": "float16",
    "fp8_e4m3": "float8_e4m3", "e4m3": "float8_e4m3", "cfp8_e4m3": "float8_e4m3",
    "fp8_e4m3fn": "float8_e4m3fn", "e4m3fn": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2", "e5m2": "float8_e5m2", "cfp8_e5m2": "float8_e5m2",
    "fp8_e8m0fnu": "float8_e8m0fnu", "e8m0": "float8_e8m0fnu", "e8m0fnu": "float8_e8m0fnu",
    "fp4_e2m1fn": "float4_e2m1fn", "e2m1": "float4_e2m1fn",
    "bool": "bool_",
}
_PREFIXES = ("nki.language.", "neuronxcc.nki.language.", "nl.", "numpy.", "np.", "torch.",
             "ml_dtypes.")

# numpy storage dtype -> DType, for inference from an array. float32 means float32 (not tfloat32),
# uint32 means uint32 (not an x4 type): ambiguous storage always reads as the plain type.
_BY_NUMPY: dict[np.dtype, DType] = {}
for _d in DTYPES:
    if _d.packed == 1 and _d.name != "tfloat32":
        _BY_NUMPY.setdefault(_d.np_dtype, _d)


_BY_TEXT: dict[str, DType] = {}  # every spelling resolved so far


def names() -> list[str]:
    """Every registered dtype name (NKI spelling)."""
    return [d.name for d in DTYPES]


def dtype(x: DTypeLike) -> DType:
    """Resolve anything that names a dtype to its `DType`.

    Accepts a DType, an NKI name or short alias ("bfloat16", "bf16", "nl.float8_e4m3"), a numpy
    dtype or scalar type (``np.float32``, ``ml_dtypes.bfloat16``) and a ``torch.dtype`` (matched by
    name, so torch is never imported here). Anything else raises `UnknownNameError`.
    """
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        found = _BY_TEXT.get(x)  # the hot path: a name seen before
        if found is None:
            found = _BY_TEXT.setdefault(x, _from_name(x)) if len(_BY_TEXT) < 4096 else _from_name(x)
        return found
    if isinstance(x, np.dtype) and x in _BY_NUMPY:
        return _BY_NUMPY[x]
    if type(x).__module__ == "torch" and type(x).__name__ == "dtype":
        return _from_name(str(x))
    try:
        np_dt = np.dtype(x)
    except (TypeError, ValueError):
        raise UnknownDTypeError(repr(x)) from None
    found = _BY_NUMPY.get(np_dt)
    if found is None:
        raise UnknownDTypeError(np_dt.name)
    return found


def _from_name(text: str) -> DType:
    key = text.strip()
    for prefix in _PREFIXES:
        if key.startswith(prefix):
            key = key[len(prefix):]
            break
    found = _BY_NAME.get(key) or _BY_NAME.get(ALIASES.get(key.lower(), key.lower()))
    if found is None:
        raise UnknownDTypeError(text)
    return found


def dtype_of(array: Any) -> DType:
    """The registry dtype of a numpy array's storage (float32 -> float32, uint32 -> uint32)."""
    return dtype(np.asarray(array).dtype)


def check_supported(dt: DTypeLike, core: CoreSpec, what: str = "") -> None:
    """Raise `UnsupportedError` if NeuronCore `core` cannot hold dtype `dt`.

    The message names the dtype, the core version and its chips' family, e.g.
    "float8_e4m3 is not supported on NeuronCore-v1 (Inferentia)".
    """
    resolved = dtype(dt)
    if resolved.supported_on(core):
        return
    prefix = f"{what}: " if what else ""
    family = _CORE_FAMILY.get(core.version)
    where = f"{core.name} ({family})" if family else core.name
    supported_here = sorted(core.supported_dtypes)
    raise UnsupportedError(f"{prefix}{resolved.name} is not supported on {where}; "
                           f"supported: {', '.join(supported_here)}")


# The chips built from each NeuronCore version, for error messages (hardware.md section 2).
_CORE_FAMILY = {1: "Inferentia", 2: "Trainium/Inferentia2", 3: "Trainium2", 4: "Trainium3"}
