"""ALU operations and activation functions against numpy/math references."""

import math

import numpy as np
import pytest

from trnsim.errors import UnknownNameError
from trnsim.isa.ops import ACTIVATIONS, ALU_OPS, activation_function, alu_op

rng = np.random.default_rng(0)
A = rng.standard_normal(1000).astype(np.float32) * 4
B = rng.standard_normal(1000).astype(np.float32) * 4 + 0.5
IA = rng.integers(-1000, 1000, 1000).astype(np.int32)
IB = rng.integers(0, 8, 1000).astype(np.int32)

ARITH = [
    ("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply),
    ("divide", np.divide), ("max", np.maximum), ("min", np.minimum),
    ("abs_max", lambda a, b: np.maximum(np.abs(a), np.abs(b))),
    ("equal", lambda a, b: (a == b).astype(np.float32)),
    ("greater", lambda a, b: (a > b).astype(np.float32)),
    ("less_equal", lambda a, b: (a <= b).astype(np.float32)),
    ("logical_and", lambda a, b: ((a != 0) & (b != 0)).astype(np.float32)),
]
BITWISE = [
    ("bitwise_and", np.bitwise_and), ("bitwise_or", np.bitwise_or), ("bitwise_xor", np.bitwise_xor),
    ("left_shift", np.left_shift), ("right_shift", np.right_shift),
]


@pytest.mark.parametrize("name,ref", ARITH, ids=[n for n, _ in ARITH])
def test_arithmetic_ops_match_numpy_fp32(name, ref):
    got = alu_op(name)(A, B)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, ref(A, B).astype(np.float32))


@pytest.mark.parametrize("name,ref", BITWISE, ids=[n for n, _ in BITWISE])
def test_bitwise_ops_act_on_int_bits(name, ref):
    got = alu_op(name)(IA, IB)
    np.testing.assert_array_equal(got, ref(IA, IB))


def test_logical_shift_right_is_unsigned():
    got = alu_op("logical_shift_right")(np.array([-8], np.int32), np.array([1], np.int32))
    assert got[0] == (np.uint32(2**32 - 8) >> 1)


def test_lookup_by_numpy_function_and_alias():
    assert alu_op(np.add).name == "add"
    assert alu_op(np.maximum).name == "max"
    assert alu_op("SUBTRACT").name == "subtract"
    with pytest.raises(UnknownNameError, match="did you mean"):
        alu_op("multipy")


def test_reductions():
    x = rng.standard_normal((4, 64)).astype(np.float32)
    np.testing.assert_allclose(alu_op("add").reduce(x, 1), x.sum(axis=1), rtol=1e-6)
    np.testing.assert_array_equal(alu_op("max").reduce(x, 1), x.max(axis=1))
    np.testing.assert_array_equal(alu_op("abs_max").reduce(x, 1), np.abs(x).max(axis=1))
    assert set(n for n, o in ALU_OPS.items() if o.identity is not None) >= {"add", "max", "min"}


ACT_REFS = {
    "exp": np.exp, "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, 0), "silu": lambda x: x / (1 + np.exp(-x)),
    "gelu": lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))),
    "gelu_apprx_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    "softplus": lambda x: np.log1p(np.exp(x)), "square": np.square, "erf": np.vectorize(math.erf),
    "sin": np.sin, "cos": np.cos, "abs": np.abs, "sign": np.sign, "identity": lambda x: x,
}


@pytest.mark.parametrize("name", sorted(ACT_REFS))
def test_activation_matches_float64_reference(name):
    x = np.linspace(-6, 6, 2001).astype(np.float32)
    got = ACTIVATIONS[name](x)
    want = ACT_REFS[name](x.astype(np.float64))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-7)


def test_positive_domain_activations():
    x = np.linspace(0.01, 50, 999).astype(np.float32)
    for name, ref in (("log", np.log), ("sqrt", np.sqrt), ("rsqrt", lambda v: 1 / np.sqrt(v)),
                      ("reciprocal", lambda v: 1 / v)):
        np.testing.assert_allclose(ACTIVATIONS[name](x), ref(x.astype(np.float64)), rtol=2e-6)


def test_erf_small_arguments_keep_relative_accuracy():
    x = np.array([1e-6, 1e-4, 1e-2, 0.3, 0.49, 0.51], dtype=np.float32)
    want = np.array([math.erf(float(v)) for v in x])
    np.testing.assert_allclose(ACTIVATIONS["erf"](x), want, rtol=1e-6)


def test_activation_lookup():
    assert activation_function(np.exp)[0] == "exp"
    assert activation_function("copy")[0] == "identity"
    assert activation_function(None)[0] == "identity"
    with pytest.raises(UnknownNameError):
        activation_function("expp")
