"""Integer element-wise steps with PyTorch's semantics, bit for bit.

PyTorch computes integers exactly in their width: int32 (and int8, uint8, int16) wrap around,
floor division and % round toward minus infinity, a float cast to an integer truncates. The
Vector and Scalar engines compute in fp32, exact only to 2^24, so integer steps run on GpSimd's
native 32-bit integer arithmetic (`trnsim.isa.integers`) in int32 tiles; narrower types are
wrapped into their width at the end of each step. Two results are refused rather than given as
another number (`exact_int`): a PyTorch int64 value past int32 (a NeuronCore holds 32-bit
integers; the step carries ``int64``), and, on a core without GpSimd (NeuronCore-v1), integers
that fp32 cannot hold exactly.
"""

from __future__ import annotations

from typing import Any

from trnsim.compiler.fused import Step
from trnsim.errors import IntegerArithmeticError
from trnsim.isa import Engine
from trnsim.kernels.layout import has_gpsimd
from trnsim.nki import language as nl
from trnsim.nki.language import elementwise as ew
from trnsim.nki.tile import Tile
from trnsim.numerics import dtype as as_dtype

_NATIVE = {"add": "add", "sub": "subtract", "mul": "multiply", "maximum": "max",
           "minimum": "min", "fmod": "mod", "pow": "pow"}
_COMPARE = {"eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal",
            "gt": "greater", "ge": "greater_equal"}
_IDENTITY = ("round", "floor", "ceil", "trunc")
HANDLED = frozenset((*_NATIVE, *_COMPARE, *_IDENTITY, "neg", "abs", "div", "remainder", "clamp",
                     "cast", "left_shift", "right_shift"))
I32 = "int32"


def applies(step: Step, args: list[Any]) -> bool:
    """An integer step this module computes: integer result (or a comparison of integers), every
    tile operand an integer, every number an integer."""
    if step.op not in HANDLED:
        return False
    tiles = [a for a in args if isinstance(a, Tile)]
    numbers = [a for a in args if not isinstance(a, Tile)]
    if step.op == "cast":
        return bool(tiles) and _is_int(step.dtype) and step.dtype != tiles[0].dtype_spec.name
    result_int = _is_int(step.dtype) or (step.op in _COMPARE and step.dtype == "bool_")
    if step.op == "div" and step.attr("true_div", True):
        return False
    return (result_int and bool(tiles) and all(t.dtype_spec.is_int or t.dtype_spec.is_bool
                                               for t in tiles)
            and all(float(n).is_integer() for n in numbers))


def lower(step: Step, args: list[Any]) -> Tile:
    ops = _Ops(exact=bool(step.attr("int64", False)))
    if step.op == "cast":
        return _cast(ops, args[0], step.dtype)
    values = [ops.word(a) for a in args]
    op = step.op
    if op in _IDENTITY:
        result = values[0]
    elif op in _COMPARE:
        return nl.copy(ops.binary(_COMPARE[op], *values), dtype=step.dtype)
    elif op in _NATIVE:
        result = ops.binary(_NATIVE[op], *values)
    elif op == "neg":
        result = ops.binary("multiply", values[0], -1)
    elif op == "abs":
        result = ops.binary("max", values[0], ops.binary("multiply", values[0], -1))
    elif op == "div":
        result = _floor_divide(ops, *values)
    elif op == "remainder":
        result = _remainder(ops, *values)
    elif op in ("left_shift", "right_shift"):
        result = _shift(ops, op, *values, bits=8 * as_dtype(step.dtype).itemsize)
    else:  # clamp
        result = values[0]
        if step.attr("min") is not None:
            result = ops.binary("max", result, int(step.attr("min")))
        if step.attr("max") is not None:
            result = ops.binary("min", result, int(step.attr("max")))
    return _narrow(ops, result, step.dtype)


class _Ops:
    """Binary integer operations on int32 tiles (or Python ints): GpSimd's native arithmetic, or
    fp32 on VectorE checked for exactness where the core has no GpSimd."""

    def __init__(self, *, exact: bool) -> None:
        self.native = has_gpsimd()
        self.engine = Engine.GPSIMD if self.native else Engine.VECTOR
        self.exact = exact or not self.native

    def word(self, value: Any) -> Any:
        if not isinstance(value, Tile):
            return int(value)
        return value if value.dtype_spec.name == I32 else nl.copy(value, dtype=I32)

    def binary(self, name: str, a: Any, b: Any) -> Any:
        if not isinstance(a, Tile) and not isinstance(b, Tile):
            return _python(name, a, b)
        if name == "divide" and not self.native:
            return self._fp32_divide(a, b)
        if name == "pow":
            self._no_negative_power(b)
        # checked: int64 values, fp32 engines, and division (PyTorch raises on a zero divisor)
        exact = self.exact or name in ("divide", "mod")
        return ew.binary(name, a, b, dtype=I32, engine=self.engine, exact_int=exact)

    def _no_negative_power(self, exponent: Any) -> None:
        """PyTorch refuses an integer to a negative number's power (a negative exponent tensor
        gives the truncated 1 / a^n, as GpSimd's native power does)."""
        if not isinstance(exponent, Tile) and exponent < 0:
            raise IntegerArithmeticError("integers to negative integer powers (PyTorch raises)")

    def _fp32_divide(self, a: Any, b: Any) -> Tile:
        """The truncated quotient through fp32 (a core without GpSimd): operands checked below
        2^24 (adding 0 under the exactness check), where the fp32 quotient never rounds across
        an integer."""
        a, b = (self.binary("add", v, 0) if isinstance(v, Tile) else v for v in (a, b))
        self.binary("mod", a, b)  # checked too: a zero divisor is refused as PyTorch does
        quotient = ew.binary("divide", a, b, dtype="float32")
        if not isinstance(quotient, Tile):
            return int(quotient)
        return _cast(self, quotient, I32)

    def bitwise(self, name: str, a: Any, b: Any) -> Any:
        """Bit operations run on VectorE on raw integers (exact on any core)."""
        if not isinstance(a, Tile) and not isinstance(b, Tile):
            return _python(name, a, b)
        if not isinstance(a, Tile):  # 1 << tensor: the number as a tile of b's shape
            a = self.binary("add", self.binary("multiply", b, 0), a)
        return ew.binary(name, a, b, dtype=I32)


def _python(name: str, a: int, b: int) -> int:
    """Two integer literals (the steps' own constants): Python's exact arithmetic."""
    import numpy as np

    from trnsim.isa import alu_op
    from trnsim.isa.integers import apply

    return int(apply(alu_op(name), np.int64(a), np.int64(b)))


def _floor_divide(ops: _Ops, a: Any, b: Any) -> Any:
    """a // b: the native quotient truncates; one less where the remainder is non-zero and its
    sign differs from the divisor's."""
    quotient = ops.binary("divide", a, b)
    remainder = ops.binary("subtract", a, ops.binary("multiply", quotient, b))
    return ops.binary("subtract", quotient, _sign_fix(ops, remainder, b))


def _remainder(ops: _Ops, a: Any, b: Any) -> Any:
    """a % b takes the divisor's sign: the native (C) remainder plus b where the signs differ."""
    remainder = ops.binary("mod", a, b)
    return ops.binary("add", remainder, ops.binary("multiply", _sign_fix(ops, remainder, b), b))


def _sign_fix(ops: _Ops, remainder: Any, b: Any) -> Any:
    """1 where remainder != 0 and its sign differs from b's, else 0."""
    nonzero = ops.binary("not_equal", remainder, 0)
    differ = ops.binary("not_equal", ops.binary("less", remainder, 0), ops.binary("less", b, 0))
    return ops.binary("multiply", nonzero, differ)


def _shift(ops: _Ops, op: str, a: Any, amount: Any, *, bits: int) -> Any:
    """PyTorch's shifts: by a negative amount or by the type's width or more, a left shift gives
    0 and a right shift the sign (the right shift of the int32 word by 31; a narrower type's word
    has its sign there too). Inside that range, VectorE's shifts on the raw word."""
    limit = bits if op == "left_shift" else 32
    if not isinstance(amount, Tile):
        inside = 0 <= amount < limit
        if op == "left_shift":
            return ops.bitwise("left_shift", a, amount) if inside else ops.binary("multiply", a, 0)
        return ops.bitwise("right_shift", a, amount if inside else 31)
    inside = ops.binary("multiply", ops.binary("greater_equal", amount, 0),
                        ops.binary("less", amount, limit))
    kept = ops.binary("multiply", amount, inside)
    if op == "left_shift":
        return ops.binary("multiply", ops.bitwise("left_shift", a, kept), inside)
    # outside the range: shift by 31 (kept + 31 - 31 * inside)
    return ops.bitwise("right_shift", a, ops.binary("add", ops.binary(
        "add", kept, ops.binary("multiply", inside, -31)), 31))


def _cast(ops: _Ops, x: Tile, target: str) -> Tile:
    """.to(integer type): floats truncate toward zero (sign(x) * floor(|x|) in fp32, exact);
    integers wrap into the target's width."""
    if x.dtype_spec.is_float:
        magnitude = ew.activation("floor", ew.activation("abs", x, dtype="float32"),
                                  dtype="float32")
        truncated = ew.binary("multiply", ew.activation("sign", x, dtype="float32"), magnitude,
                              dtype="float32")
        return nl.copy(truncated, dtype=target)
    return _narrow(ops, ops.word(x), target)


def _narrow(ops: _Ops, word: Any, target: str) -> Any:
    """An int32 result wrapped into a narrower integer type's range (two's complement)."""
    if not isinstance(word, Tile):
        return word
    dt = as_dtype(target)
    if dt.is_bool or dt.itemsize >= 4:
        return word
    bits = 8 * dt.itemsize
    if dt.min == 0:
        return ops.bitwise("bitwise_and", word, (1 << bits) - 1)
    half = 1 << (bits - 1)
    shifted = ops.bitwise("bitwise_and", ops.binary("add", word, half), (1 << bits) - 1)
    return ops.binary("subtract", shifted, half)


def _is_int(name: str) -> bool:
    dt = as_dtype(name)
    return dt.is_int and not dt.is_bool
