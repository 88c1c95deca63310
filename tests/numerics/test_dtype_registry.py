"""The dtype registry: NKI names, storage, ranges, aliases and per-NeuronCore support."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from trnsim.errors import TrnsimError, UnknownNameError, UnsupportedError
from trnsim.hardware import CORES, core
from trnsim.numerics import DTYPES, DType, cast, check_supported, dtype, dtype_of, names

NKI_NAMES = ["float32", "tfloat32", "bfloat16", "float16", "float8_e4m3", "float8_e4m3fn",
             "float8_e5m2", "float8_e8m0fnu", "int8", "uint8", "int16", "uint16", "int32", "uint32",
             "bool_", "float8_e4m3fn_x4", "float8_e5m2_x4", "float4_e2m1fn_x4"]

# name -> (storage, itemsize, precision class, finite max)
EXPECTED = {
    "float32": (np.float32, 4, "fp32", float(np.finfo(np.float32).max)),
    "tfloat32": (np.float32, 4, "tf32", float(np.finfo(np.float32).max)),
    "bfloat16": (ml_dtypes.bfloat16, 2, "bf16", (2 - 2.0 ** -7) * 2.0 ** 127),
    "float16": (np.float16, 2, "fp16", 65504.0),
    "float8_e4m3": (ml_dtypes.float8_e4m3, 1, "fp8", 240.0),
    "float8_e4m3fn": (ml_dtypes.float8_e4m3fn, 1, "fp8", 448.0),
    "float8_e5m2": (ml_dtypes.float8_e5m2, 1, "fp8", 57344.0),
    "float8_e8m0fnu": (ml_dtypes.float8_e8m0fnu, 1, "fp8", 2.0 ** 127),
    "int8": (np.int8, 1, "int8", 127),
    "uint8": (np.uint8, 1, "int8", 255),
    "int16": (np.int16, 2, None, 32767),
    "uint16": (np.uint16, 2, None, 65535),
    "int32": (np.int32, 4, None, 2 ** 31 - 1),
    "uint32": (np.uint32, 4, None, 2 ** 32 - 1),
    "bool_": (np.bool_, 1, None, 1),
    "float8_e4m3fn_x4": (np.uint32, 4, "fp8", 448.0),
    "float8_e5m2_x4": (np.uint32, 4, "fp8", 57344.0),
    "float4_e2m1fn_x4": (np.uint16, 2, "fp8", 6.0),
}


@pytest.mark.parametrize("name", NKI_NAMES)
def test_every_nki_name_has_its_storage_size_precision_and_range(name):
    dt = dtype(name)
    storage, itemsize, precision, largest = EXPECTED[name]
    assert dt.name == name
    assert dt.np_dtype == np.dtype(storage)
    assert dt.itemsize == itemsize
    assert dt.precision == precision
    assert dt.max == largest
    if name == "float8_e8m0fnu":  # unsigned: the smallest value is 2^-127
        assert dt.min == 2.0 ** -127
    elif name == "bool_" or name.startswith("uint"):
        assert dt.min == 0
    elif dt.is_int:
        assert dt.min == -largest - 1
    else:
        assert dt.min == -largest
    assert dtype(dt) is dt
    assert isinstance(hash(dt), int)
    assert sum([dt.is_float, dt.is_int, dt.is_bool]) == 1


def test_registry_lists_every_nki_name():
    assert set(NKI_NAMES) <= set(names())
    assert len({d.name for d in DTYPES}) == len(DTYPES)


@pytest.mark.parametrize("name, element, bits", [("float8_e4m3fn_x4", "float8_e4m3fn", 32),
                                                 ("float8_e5m2_x4", "float8_e5m2", 32),
                                                 ("float4_e2m1fn_x4", "float4_e2m1fn", 16)])
def test_x4_types_know_their_element(name, element, bits):
    dt = dtype(name)
    assert dt.packed == 4
    assert dt.element == dtype(element)
    assert dt.bits == bits == dt.itemsize * 8


def test_plain_types_are_not_packed():
    assert dtype("bfloat16").packed == 1 and dtype("bfloat16").element is None
    assert dtype("float8_e4m3").bits == 8


@pytest.mark.parametrize("alias, name", [("fp32", "float32"), ("bf16", "bfloat16"),
                                         ("fp16", "float16"), ("fp8_e4m3", "float8_e4m3"),
                                         ("tf32", "tfloat32"), ("BF16", "bfloat16"),
                                         ("nl.bfloat16", "bfloat16"), ("bool", "bool_"),
                                         ("fp8_e5m2", "float8_e5m2"), (" float16 ", "float16")])
def test_short_aliases(alias, name):
    assert dtype(alias).name == name


@pytest.mark.parametrize("obj, name", [(np.float32, "float32"), (np.dtype(np.int8), "int8"),
                                       (ml_dtypes.bfloat16, "bfloat16"), (np.bool_, "bool_"),
                                       (ml_dtypes.float8_e4m3, "float8_e4m3"),
                                       (ml_dtypes.float8_e4m3fn, "float8_e4m3fn"),
                                       (np.uint32, "uint32"), (np.float16, "float16")])
def test_numpy_and_ml_dtypes_types(obj, name):
    assert dtype(obj).name == name


def test_array_storage_reads_as_the_plain_type():
    assert dtype_of(np.zeros(2, np.float32)).name == "float32"  # never tfloat32
    assert dtype_of(np.zeros(2, np.uint32)).name == "uint32"  # never an x4 type


class _FakeTorchDtype:
    """Stands in for torch.dtype: same module and class name, same str()."""

    def __init__(self, text):
        self.text = text

    def __str__(self):
        return self.text


_FakeTorchDtype.__module__ = "torch"
_FakeTorchDtype.__name__ = "dtype"


@pytest.mark.parametrize("text, name", [("torch.bfloat16", "bfloat16"), ("torch.float32", "float32"),
                                        ("torch.float8_e4m3fn", "float8_e4m3fn"),
                                        ("torch.float8_e5m2", "float8_e5m2"), ("torch.bool", "bool_"),
                                        ("torch.int32", "int32"), ("torch.uint8", "uint8")])
def test_torch_dtypes_by_name_without_importing_torch(text, name):
    assert dtype(_FakeTorchDtype(text)).name == name


def test_real_torch_dtype_if_installed():
    torch = pytest.importorskip("torch")
    assert dtype(torch.bfloat16).name == "bfloat16"


@pytest.mark.parametrize("bad", ["bfloat17", "float64", "int64", np.float64, np.complex64, 3.5, None])
def test_unknown_dtypes_raise_listing_supported_names(bad):
    with pytest.raises(UnknownNameError) as info:
        dtype(bad)
    message = str(info.value)
    assert isinstance(info.value, TrnsimError)
    assert "bfloat16" in message and "float8_e4m3" in message and "uint32" in message


def test_support_follows_the_hardware_catalog():
    for spec in CORES:
        for dt in DTYPES:
            assert dt.supported_on(spec) == (dt.name in spec.supported_dtypes)
    v1, v2, v3, v4 = (core(v) for v in ("v1", "v2", "v3", "v4"))
    assert not dtype("float8_e4m3").supported_on(v1)
    assert not dtype("tfloat32").supported_on(v1)
    assert dtype("float8_e4m3").supported_on(v2) and dtype("float8_e5m2").supported_on(v3)
    assert not dtype("float8_e4m3fn").supported_on(v3)  # NCC_EVRF051: native from Trn3
    for mx in ("float8_e8m0fnu", "float8_e4m3fn_x4", "float8_e5m2_x4", "float4_e2m1fn_x4"):
        assert not dtype(mx).supported_on(v3) and dtype(mx).supported_on(v4)


@pytest.mark.parametrize("name, version", [("float8_e4m3", "v1"), ("float8_e5m2", "v1"),
                                           ("float8_e4m3fn_x4", "v2"), ("float8_e8m0fnu", "v3"),
                                           ("float4_e2m1fn_x4", "v3"), ("float8_e4m3fn", "v2")])
def test_unsupported_dtype_names_the_core_version(name, version):
    spec = core(version)
    with pytest.raises(UnsupportedError) as info:
        check_supported(name, spec, "nc_matmul")
    text = str(info.value)
    assert name in text and spec.name in text and text.startswith("nc_matmul")
    with pytest.raises(UnsupportedError, match=spec.name):
        cast(np.zeros(8, np.float32), name, core=spec)


def test_check_supported_passes_silently_where_supported():
    check_supported("bfloat16", core("v1"))
    check_supported("float8_e4m3fn_x4", core("v4"))


def test_dtype_is_a_frozen_value():
    dt = dtype("bfloat16")
    with pytest.raises(AttributeError):
        dt.name = "x"  # type: ignore[misc]
    assert DType in type(dt).__mro__
    assert str(dt) == "bfloat16"


def test_a_dtype_survives_deepcopy_after_its_info_is_cached():
    """Programs are deep-copied (copies of a model); a dtype stays its registry entry even once
    its numpy finfo (which cannot be deep-copied) is cached."""
    import copy

    from trnsim.numerics import dtype

    bf16 = dtype("bfloat16")
    assert bf16.info.bits == 16
    assert copy.deepcopy(bf16) is bf16 and copy.copy(bf16) is bf16
