"""ALU operations and activation functions: values that instructions take as attributes.

Engines compute in fp32 (see trnsim.numerics), so arithmetic maps float32 arrays to float32
arrays; bitwise and shift operations act on bit patterns as int32 and return int32 (instructions
read their integer inputs raw for them, see `AluOp.is_bitwise`).
Comparisons and logical operations return 1.0 / 0.0. Front ends look operations up by name,
accepting NKI's and numpy's names (``nl.add``, ``np.add``, ``"add"``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from trnsim.errors import UnknownNameError

Array = np.ndarray


@dataclass(frozen=True)
class AluOp:
    name: str
    fn: Callable[[Array, Array], Array]
    kind: str  # "arith", "compare", "bitwise", "logical"
    identity: float | None = None  # for reductions (None: not a reduction operator)

    @property
    def is_bitwise(self) -> bool:
        return self.kind == "bitwise"

    def __call__(self, a, b) -> Array:
        return self.fn(a, b)

    def reduce(self, values: Array, axis: int) -> Array:
        """Reduce along one axis in fp32 (add: numpy's pairwise order; others: left to right)."""
        fast = _FAST_REDUCE.get(self.name)
        if fast is not None:
            return _f32(fast(values, axis))
        if self.identity is None:
            raise UnknownNameError("reduction operator", self.name,
                                   [n for n, o in ALU_OPS.items() if o.identity is not None])
        moved = np.moveaxis(values, axis, 0)
        out = moved[0]
        for item in moved[1:]:
            out = self.fn(out, item)
        return out


_FAST_REDUCE = {
    "add": lambda v, axis: np.add.reduce(v, axis=axis, dtype=np.float32),
    "multiply": lambda v, axis: np.multiply.reduce(v, axis=axis, dtype=np.float32),
    "max": lambda v, axis: np.max(v, axis=axis),
    "min": lambda v, axis: np.min(v, axis=axis),
    "abs_max": lambda v, axis: np.max(np.abs(v), axis=axis),
}


def _as_int(x) -> Array:
    x = np.asarray(x)
    if x.dtype.kind in "iub":
        return x.astype(np.int32, copy=False)
    return x.astype(np.int64).astype(np.int32)


def _f32(x) -> Array:
    return np.asarray(x, dtype=np.float32)


def _cmp(fn):
    return lambda a, b: fn(a, b).astype(np.float32)


def _bitwise(fn):
    return lambda a, b: fn(_as_int(a), _as_int(b))


def _logical(fn):
    return lambda a, b: fn(np.asarray(a) != 0, np.asarray(b) != 0).astype(np.float32)


def _divide(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        return _f32(np.divide(a, b, dtype=np.float32))


def _pow(a, b):
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return _f32(np.power(_f32(a), _f32(b)))


def _mod(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        return _f32(np.fmod(_f32(a), _f32(b)))


def _logical_shift_right(a, b):
    return (_as_int(a).view(np.uint32) >> _as_int(b).astype(np.uint32)).view(np.int32)


_TABLE = (
    AluOp("bypass", lambda a, b: _f32(a), "arith"),
    AluOp("add", lambda a, b: _f32(np.add(a, b, dtype=np.float32)), "arith", 0.0),
    AluOp("subtract", lambda a, b: _f32(np.subtract(a, b, dtype=np.float32)), "arith"),
    AluOp("multiply", lambda a, b: _f32(np.multiply(a, b, dtype=np.float32)), "arith", 1.0),
    AluOp("divide", _divide, "arith"),
    AluOp("max", lambda a, b: _f32(np.maximum(a, b)), "arith", float("-inf")),
    AluOp("min", lambda a, b: _f32(np.minimum(a, b)), "arith", float("inf")),
    AluOp("abs_max", lambda a, b: _f32(np.maximum(np.abs(a), np.abs(b))), "arith", 0.0),
    AluOp("abs_min", lambda a, b: _f32(np.minimum(np.abs(a), np.abs(b))), "arith"),
    AluOp("pow", _pow, "arith"),
    AluOp("mod", _mod, "arith"),
    AluOp("equal", _cmp(np.equal), "compare"),
    AluOp("not_equal", _cmp(np.not_equal), "compare"),
    AluOp("greater", _cmp(np.greater), "compare"),
    AluOp("greater_equal", _cmp(np.greater_equal), "compare"),
    AluOp("less", _cmp(np.less), "compare"),
    AluOp("less_equal", _cmp(np.less_equal), "compare"),
    AluOp("bitwise_and", _bitwise(np.bitwise_and), "bitwise"),
    AluOp("bitwise_or", _bitwise(np.bitwise_or), "bitwise"),
    AluOp("bitwise_xor", _bitwise(np.bitwise_xor), "bitwise"),
    AluOp("left_shift", _bitwise(np.left_shift), "bitwise"),
    AluOp("right_shift", _bitwise(np.right_shift), "bitwise"),  # arithmetic
    AluOp("logical_shift_right", _logical_shift_right, "bitwise"),
    AluOp("logical_and", _logical(np.logical_and), "logical"),
    AluOp("logical_or", _logical(np.logical_or), "logical"),
    AluOp("logical_xor", _logical(np.logical_xor), "logical"),
)

ALU_OPS: dict[str, AluOp] = {op.name: op for op in _TABLE}

_ALU_ALIASES = {
    "maximum": "max", "minimum": "min", "sub": "subtract", "mul": "multiply", "true_divide": "divide",
    "power": "pow", "fmod": "mod", "remainder": "mod", "eq": "equal", "ne": "not_equal",
    "gt": "greater", "ge": "greater_equal", "lt": "less", "le": "less_equal", "and": "bitwise_and",
    "or": "bitwise_or", "xor": "bitwise_xor", "invert": None, "arith_shift_right": "right_shift",
    "logical_shift_left": "left_shift", "copy": "bypass", "identity": "bypass", "amax": "max",
    "amin": "min", "sum": "add",
}


def alu_op(op) -> AluOp:
    """Resolve an ALU operation from an AluOp, a name, or a function with a __name__ (np.add)."""
    if isinstance(op, AluOp):
        return op
    name = op if isinstance(op, str) else getattr(op, "__name__", None) or getattr(op, "name", None)
    if name is None:
        raise UnknownNameError("ALU operation", repr(op), ALU_OPS)
    key = str(name).lower()
    key = _ALU_ALIASES.get(key, key) or key
    try:
        return ALU_OPS[key]
    except KeyError:
        raise UnknownNameError("ALU operation", str(name), ALU_OPS) from None


# --- activation functions (ScalarE) ---------------------------------------------------------------

# Numerical Recipes' Chebyshev fit of erfc: exp(-z^2 + sum c_i t^i) t, t = 1 / (1 + |z| / 2)
_ERFC_COEFFS = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807,
                -1.13520398, 1.48851587, -0.82215223, 0.17087277)


def _erfc64(z: Array) -> Array:
    """erfc for float64 input with fractional error < 1.2e-7 everywhere, so tails such as
    1 + erf(-4) keep their relative accuracy. Horner's rule in place (GELU runs it on whole
    activation tiles; the same operations in the same order as the plain formula)."""
    az = np.abs(z)
    t = 0.5 * az
    t += 1.0
    np.reciprocal(t, out=t)
    poly = t * _ERFC_COEFFS[-1]
    for c in _ERFC_COEFFS[-2:0:-1]:
        poly += c
        poly *= t
    poly += _ERFC_COEFFS[0]
    poly -= np.square(az)
    with np.errstate(over="ignore", under="ignore"):
        np.exp(poly, out=poly)
    poly *= t
    return np.where(z >= 0, poly, 2.0 - poly)


# Elements per pass of the float64 activations: whole-tile float64 temporaries (a 128 x 2048 GELU
# tile makes a dozen of 2 MiB) cost more in page faults and cache misses than the arithmetic.
_CHUNK = 32768


def _in_chunks(fn: Callable[[Array], Array]) -> Callable[[Array], Array]:
    """Run an elementwise float32 function over `_CHUNK`-element pieces of its input: the same
    operations on every element, so the same bits, with cache-sized temporaries. The result
    keeps the input's memory order, as the whole-tile formula's did (a later reduction's
    summation order follows it)."""
    def run(x) -> Array:
        x = _f32(x)
        if x.size <= _CHUNK:
            return fn(x)
        flat = x.reshape(-1)
        out = np.empty(flat.shape, np.float32)
        for start in range(0, flat.size, _CHUNK):
            out[start:start + _CHUNK] = fn(flat[start:start + _CHUNK])
        if x.flags.c_contiguous:
            return out.reshape(x.shape)
        shaped = np.empty_like(x)
        shaped[...] = out.reshape(x.shape)
        return shaped
    run.__name__ = fn.__name__
    return run


@_in_chunks
def _erf(x: Array) -> Array:
    """erf in float32 to about an ulp: Taylor series near 0, 1 - erfc elsewhere."""
    x = _f32(x).astype(np.float64)
    x2 = x * x
    series = x * (1 + x2 * (-1 / 3 + x2 * (1 / 10 + x2 * (-1 / 42 + x2 * (1 / 216 + x2 * (-1 / 1320
                                                                              + x2 / 9360))))))
    series *= 2 / np.sqrt(np.pi)
    return np.where(np.abs(x) < 0.5, series, 1.0 - _erfc64(x)).astype(np.float32)


@_in_chunks
def _gelu(x):
    x64 = _f32(x).astype(np.float64)
    return _f32(0.5 * x64 * _erfc64(-x64 / np.sqrt(2.0)))


def _gelu_tanh(x):
    x = _f32(x)
    inner = np.float32(np.sqrt(2.0 / np.pi)) * (x + np.float32(0.044715) * x * x * x)
    return _f32(0.5 * x * (1.0 + np.tanh(inner)))


def _sigmoid(x):
    with np.errstate(over="ignore"):
        return _f32(1.0 / (1.0 + np.exp(-_f32(x))))


def _softplus(x):
    x = _f32(x)
    with np.errstate(over="ignore"):
        return _f32(np.logaddexp(np.float32(0), x))


def _safe(fn):
    def run(x):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return _f32(fn(_f32(x)))
    return run


@_in_chunks
def _gelu_dx(x):
    """d/dx of x * Phi(x): Phi(x) + x * phi(x)."""
    x64 = _f32(x).astype(np.float64)
    cdf = 0.5 * _erfc64(-x64 / np.sqrt(2.0))
    pdf = np.exp(-0.5 * x64 * x64) / np.sqrt(2.0 * np.pi)
    return _f32(cdf + x64 * pdf)


def _silu_dx(x):
    s = _sigmoid(x)
    return _f32(s * (1.0 + _f32(x) * (1.0 - s)))


def _gelu_sigmoid(x):
    return _f32(_f32(x) * _sigmoid(np.float32(1.702) * _f32(x)))


def _gelu_sigmoid_dx(x):
    s = _sigmoid(np.float32(1.702) * _f32(x))
    return _f32(s + np.float32(1.702) * _f32(x) * s * (1.0 - s))


ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "identity": _f32,
    "exp": _safe(np.exp),
    "log": _safe(np.log),
    "tanh": _safe(np.tanh),
    "sigmoid": _sigmoid,
    "relu": lambda x: _f32(np.maximum(_f32(x), np.float32(0))),
    "gelu": _gelu,
    "gelu_apprx_tanh": _gelu_tanh,
    "gelu_dx": _gelu_dx,  # nki 0.3+ derivative activations
    "gelu_apprx_sigmoid": _gelu_sigmoid,
    "gelu_apprx_sigmoid_dx": _gelu_sigmoid_dx,
    "silu_dx": _silu_dx,
    "silu": lambda x: _f32(_f32(x) * _sigmoid(x)),
    "softplus": _softplus,
    "mish": lambda x: _f32(_f32(x) * np.tanh(_softplus(x))),
    "sqrt": _safe(np.sqrt),
    "rsqrt": _safe(lambda x: 1.0 / np.sqrt(x)),
    "reciprocal": _safe(lambda x: 1.0 / x),
    "square": lambda x: _f32(np.square(_f32(x))),
    "erf": _erf,
    "erf_dx": lambda x: _f32(2.0 / np.sqrt(np.pi) * np.exp(-np.square(_f32(x)))),
    "sin": _safe(np.sin),
    "cos": _safe(np.cos),
    "tan": _safe(np.tan),
    "arctan": _safe(np.arctan),
    "abs": lambda x: _f32(np.abs(x)),
    "sign": lambda x: _f32(np.sign(x)),
    "negative": lambda x: _f32(np.negative(x)),
    "floor": _safe(np.floor),
    "ceil": _safe(np.ceil),
    "softsign": _safe(lambda x: x / (1.0 + np.abs(x))),
}

_ACT_ALIASES = {"copy": "identity", "bypass": "identity", "gelu_erf": "gelu", "gelu_tanh":
                "gelu_apprx_tanh", "swish": "silu", "absolute": "abs", "sigmoid_": "sigmoid",
                "rsqrt_": "rsqrt", "divide_one": "reciprocal", "neg": "negative"}


def activation_function(func) -> tuple[str, Callable[[Array], Array]]:
    """Resolve an activation by name or by a function's __name__ (nl.exp, np.exp, "exp")."""
    if func is None:
        return "identity", ACTIVATIONS["identity"]
    name = func if isinstance(func, str) else getattr(func, "__name__", None) or getattr(func, "name", "")
    key = str(name).lower()
    key = _ACT_ALIASES.get(key, key)
    if key not in ACTIVATIONS:
        raise UnknownNameError("activation function", str(name), ACTIVATIONS)
    return key, ACTIVATIONS[key]
