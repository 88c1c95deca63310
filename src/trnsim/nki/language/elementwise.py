"""Element-wise nl math: binary ops (VectorE tensor_tensor / tensor_scalar), activations (ScalarE),
comparisons, bitwise and logical ops, nl.where.

Lowering choices mirror what the NKI compiler emits: two full tiles -> tensor_tensor; a tile and a
scalar or a [P, 1] column -> tensor_scalar; transcendental functions -> ScalarE activation.
"""

from __future__ import annotations

import numpy as np

from trnsim.errors import InvalidArgumentError
from trnsim.isa import (
    Activation,
    Engine,
    TensorCopy,
    TensorCopyPredicated,
    TensorScalar,
    TensorTensor,
    alu_op,
)
from trnsim.isa.vector_elementwise import NATIVE_INT_OPS
from trnsim.nki import invariant
from trnsim.nki.operands import is_scalar, mask_of, resolve_dtype, tile_arg, wider
from trnsim.nki.tile import Tile
from trnsim.nki.trace import api, current_trace
from trnsim.numerics import dtype as as_dtype

_COMPARISONS = ("equal", "not_equal", "greater", "greater_equal", "less", "less_equal")


def _default_dtype(op: str, *dtypes):
    if op in _COMPARISONS or op.startswith("logical"):
        return as_dtype("bool_")
    return wider(*dtypes)


def _is_column(tile: Tile, other: Tile) -> bool:
    """tile is [P, 1, ...] broadcasting along the free axes of `other`."""
    return (tile.shape[0] == other.shape[0] and tile.size == tile.shape[0]
            and other.size != other.shape[0])


def binary(op: str, x, y, *, dtype=None, mask=None, engine=None, exact_int=False) -> Tile | float:
    """x op y for tiles and scalars (the engine of every binary nl op and tile operator).

    `engine` and `exact_int` are for trnsim's compiler (integer arithmetic on GpSimd, see
    trnsim.isa.integers); kernels' nl calls leave them unset."""
    extra = {"exact_int": True} if exact_int else {}
    name = alu_op(op).name
    if is_scalar(x) and is_scalar(y):
        return float(alu_op(name)(np.float32(x), np.float32(y)))
    trace = current_trace()
    predicate = mask_of(mask)
    out_dtype = resolve_dtype(dtype)
    if is_scalar(x) or is_scalar(y):
        scalar_first = is_scalar(x)
        data = tile_arg(y if scalar_first else x, f"nl.{name} operand")
        raw = x if scalar_first else y
        if out_dtype is None and not data.dtype_spec.is_float and _is_float_scalar(raw):
            out_dtype = as_dtype("float32")  # (integer, float): pick the float type
        return _tensor_scalar(trace, name, data, float(raw), scalar_first, out_dtype, predicate,
                              integer_scalar=isinstance(raw, (int, np.integer)), engine=engine,
                              extra=extra)
    a, b = tile_arg(x, f"nl.{name} operand"), tile_arg(y, f"nl.{name} operand")
    result_dtype = out_dtype or _default_dtype(name, a.dtype_spec, b.dtype_spec)
    if a.shape != b.shape and a.size != b.size:
        a, b = (_across_partitions(name, t, a, b) for t in (a, b))
        if _is_column(b, a):
            return _tensor_scalar(trace, name, a, b, False, result_dtype, predicate,
                                  engine=engine, extra=extra)
        if _is_column(a, b):
            return _tensor_scalar(trace, name, b, a, True, result_dtype, predicate,
                                  engine=engine, extra=extra)
        shape = _broadcast_shape(name, a, b)
        a, b = broadcast_view(a, shape), broadcast_view(b, shape)
    elif a.shape != b.shape and a.shape[0] != b.shape[0]:
        _broadcast_shape(name, a, b)  # same size, different partitions: refuse by name
    tags = a.tags

    def emit(dst: Tile, accumulate: bool = False) -> None:
        fields = dict(dst=dst.access(predicate, tags), in0=a.access(predicate, tags),
                      in1=b.access(predicate, tags), op=name,
                      engine=engine or _engine_for(name, (a, b, dst), True), **extra)
        if predicate is None:
            invariant.emit_once(trace, dst, (a, b), TensorTensor, **fields)
        else:
            trace.emit_now(TensorTensor, **fields)

    return trace.defer(a.shape, result_dtype, emit, tags=tags)


def _broadcast_shape(name: str, a: Tile, b: Tile) -> tuple[int, ...]:
    try:
        if a.ndim != b.ndim:
            raise ValueError
        return tuple(int(n) for n in np.broadcast_shapes(a.shape, b.shape))
    except ValueError:
        raise InvalidArgumentError(
            f"nl.{name}: shapes {list(a.shape)} and {list(b.shape)} do not broadcast (same rank, "
            f"each dimension equal or 1)") from None


def _across_partitions(name: str, tile: Tile, a: Tile, b: Tile) -> Tile:
    """A [1, F] operand of a [P, F] operation, copied to P partitions first: engines keep
    partitions, so the compiler broadcasts with TensorE (nl.broadcast_to's matmul with ones)."""
    partitions = max(a.shape[0], b.shape[0])
    if tile.shape[0] != 1 or partitions == 1:
        return tile
    if tile.shape == (1,):
        tile = _with_free_axis(tile)  # one element on one partition: a [1, 1] tile
    if tile.ndim != 2:
        raise InvalidArgumentError(f"nl.{name}: broadcasting a {list(tile.shape)} tile across "
                                   f"partitions needs a 2-D [1, F] tile")
    from trnsim.nki.language.memory import broadcast_to

    return tile_arg(broadcast_to(tile, shape=(partitions, tile.shape[1])), f"nl.{name} operand")


def _with_free_axis(tile: Tile) -> Tile:
    """A 1-D tile (partition axis only) viewed as [P, 1]: the same bytes with a free axis of one
    element, so it can be broadcast like any [1, F] tile (`nl.load(t[i, j])` gives such a tile)."""
    from trnsim.nki.tile import Axis

    return type(tile)(tile._trace, tile._storage, (*tile._axes, Axis(1, 0, 1, None)),
                      tile.dtype_spec, tile._poffset, tile._foffset, name=tile.name)


def broadcast_view(tile: Tile, shape: tuple[int, ...]) -> Tile:
    """The tile read with a stride of 0 along its size-1 free axes (a free-axis broadcast is
    part of an engine's access pattern)."""
    if tile.shape == shape:
        return tile
    from trnsim.nki.tile import Axis

    axes = tuple(Axis(n, ax.pstep, ax.fstep if s == n else 0, ax.tag)
                 for ax, s, n in zip(tile._axes, tile.shape, shape, strict=True))
    return type(tile)(tile._trace, tile._storage, axes, tile.dtype_spec, tile._poffset,
                      tile._foffset, name=tile.name)


def _tensor_scalar(trace, op: str, data: Tile, operand, reverse: bool, out_dtype, predicate,
                   integer_scalar: bool = False, engine=None, extra: dict | None = None) -> Tile:
    tags = data.tags
    result_dtype = out_dtype or _default_dtype(op, data.dtype_spec)

    def emit(dst: Tile, accumulate: bool = False) -> None:
        value = operand.access(predicate, operand.tags) if isinstance(operand, Tile) else operand
        tiles = (data, dst, operand) if isinstance(operand, Tile) else (data, dst)
        trace.emit_now(TensorScalar, dst=dst.access(predicate, tags), src=data.access(predicate, tags),
                       op0=op, operand0=value, reverse0=reverse,
                       engine=engine or _engine_for(op, tiles, isinstance(operand, Tile) or integer_scalar),
                       **(extra or {}))

    return trace.defer(data.shape, result_dtype, emit, tags=tags)


def _engine_for(op: str, tiles, integer_scalars: bool) -> Engine:
    """GpSimd when every tile is a 32-bit integer outside PSUM and any scalar a Python int (its
    native integer arithmetic, NKI ISA docs for tensor_tensor: an int32/uint32-only operation
    "defaults to GpSimd Engine ... falls back to Vector Engine when any operand resides in PSUM"),
    else VectorE."""
    if (op in NATIVE_INT_OPS and integer_scalars
            and all(t.dtype_spec.name in ("int32", "uint32") and t.buffer != "psum" for t in tiles)):
        return Engine.GPSIMD
    return Engine.VECTOR


def _is_float_scalar(value) -> bool:
    """NKI type promotion ("weakly typed scalar type inference", nki.api.shared): a Python float
    is float32, so an integer tile op a float scalar gives float32 (the (float, integer) rule)."""
    return isinstance(value, (float, np.floating))


def activation(func: str, x, *, dtype=None, mask=None, scale=1.0, bias=None) -> Tile:
    """func(x * scale + bias) on ScalarE."""
    trace = current_trace()
    data = tile_arg(x, f"nl.{func} operand")
    predicate = mask_of(mask)
    tags = data.tags
    bias_tile = tile_arg(bias, "bias") if isinstance(bias, Tile) else bias
    scale_tile = tile_arg(scale, "scale") if isinstance(scale, Tile) else scale

    def emit(dst: Tile, accumulate: bool = False) -> None:
        s = scale_tile.access(predicate, scale_tile.tags) if isinstance(scale_tile, Tile) else scale_tile
        b = bias_tile.access(predicate, bias_tile.tags) if isinstance(bias_tile, Tile) else bias_tile
        trace.emit_now(Activation, dst=dst.access(predicate, tags), src=data.access(predicate, tags),
                       func=func, scale=s, bias=b)

    return trace.defer(data.shape, resolve_dtype(dtype) or data.dtype_spec, emit, tags=tags)


def _unary_api(func: str, label: str | None = None):
    @api(label or f"nl.{func}")
    def op(x, *, dtype=None, mask=None, **kwargs):
        if is_scalar(x):
            from trnsim.isa import ACTIVATIONS

            return float(ACTIVATIONS[func](np.float32([x]))[0])
        return activation(func, x, dtype=dtype, mask=mask)
    op.__name__ = label.split(".")[-1] if label else func
    return op


def _binary_api(op_name: str, label: str):
    @api(label)
    def op(x, y, *, dtype=None, mask=None, **kwargs):
        return binary(op_name, x, y, dtype=dtype, mask=mask)
    op.__name__ = label.split(".")[-1]
    return op


exp = _unary_api("exp")
log = _unary_api("log")
tanh = _unary_api("tanh")
sigmoid = _unary_api("sigmoid")
relu = _unary_api("relu")
gelu = _unary_api("gelu")
gelu_apprx_tanh = _unary_api("gelu_apprx_tanh")
silu = _unary_api("silu")
softplus = _unary_api("softplus")
mish = _unary_api("mish")
sqrt = _unary_api("sqrt")
rsqrt = _unary_api("rsqrt")
square = _unary_api("square")
erf = _unary_api("erf")
erf_dx = _unary_api("erf_dx")
sin = _unary_api("sin")
cos = _unary_api("cos")
tan = _unary_api("tan")
arctan = _unary_api("arctan")
abs = _unary_api("abs")
sign = _unary_api("sign")
floor = _unary_api("floor")
ceil = _unary_api("ceil")
reciprocal = _unary_api("reciprocal")
negative = _unary_api("negative")

add = _binary_api("add", "nl.add")
subtract = _binary_api("subtract", "nl.subtract")
multiply = _binary_api("multiply", "nl.multiply")
divide = _binary_api("divide", "nl.divide")
maximum = _binary_api("max", "nl.maximum")
minimum = _binary_api("min", "nl.minimum")
power = _binary_api("pow", "nl.power")
fmod = _binary_api("mod", "nl.fmod")
mod = _binary_api("mod", "nl.mod")
equal = _binary_api("equal", "nl.equal")
not_equal = _binary_api("not_equal", "nl.not_equal")
greater = _binary_api("greater", "nl.greater")
greater_equal = _binary_api("greater_equal", "nl.greater_equal")
less = _binary_api("less", "nl.less")
less_equal = _binary_api("less_equal", "nl.less_equal")
bitwise_and = _binary_api("bitwise_and", "nl.bitwise_and")
bitwise_or = _binary_api("bitwise_or", "nl.bitwise_or")
bitwise_xor = _binary_api("bitwise_xor", "nl.bitwise_xor")
left_shift = _binary_api("left_shift", "nl.left_shift")
right_shift = _binary_api("right_shift", "nl.right_shift")
logical_and = _binary_api("logical_and", "nl.logical_and")
logical_or = _binary_api("logical_or", "nl.logical_or")
logical_xor = _binary_api("logical_xor", "nl.logical_xor")
abs_max = _binary_api("abs_max", "nl.abs_max")
abs_min = _binary_api("abs_min", "nl.abs_min")


@api("nl.trunc")
def trunc(x, *, dtype=None, mask=None, **kwargs):
    positive = binary("max", x, 0.0)
    negative_part = binary("min", x, 0.0)
    return binary("add", activation("floor", positive), activation("ceil", negative_part), dtype=dtype,
                  mask=mask)


@api("nl.invert")
def invert(x, *, dtype=None, mask=None, **kwargs):
    return binary("bitwise_xor", x, -1, dtype=dtype, mask=mask)


@api("nl.logical_not")
def logical_not(x, *, dtype=None, mask=None, **kwargs):
    return binary("equal", x, 0.0, dtype=dtype or "bool_", mask=mask)


@api("nl.gelu_apprx_sigmoid")
def gelu_apprx_sigmoid(x, *, dtype=None, mask=None, **kwargs):
    """x * sigmoid(1.702 x)."""
    gate = activation("sigmoid", x, scale=1.702, mask=mask)
    return binary("multiply", x, gate, dtype=dtype, mask=mask)


@api("nl.where")
def where(condition, x, y, *, dtype=None, mask=None, **kwargs) -> Tile:
    """x where condition else y: copy y, then a predicated copy of x (VectorE)."""
    trace = current_trace()
    cond = tile_arg(condition, "nl.where condition")
    predicate = mask_of(mask)
    tags = cond.tags
    tx = tile_arg(x, "nl.where x") if isinstance(x, Tile) else float(x)
    ty = tile_arg(y, "nl.where y") if isinstance(y, Tile) else float(y)
    dtypes = [t.dtype_spec for t in (tx, ty) if isinstance(t, Tile)] or [as_dtype("float32")]
    out_dtype = resolve_dtype(dtype) or wider(*dtypes)

    def emit(dst: Tile, accumulate: bool = False) -> None:
        d = dst.access(predicate, tags)
        if isinstance(ty, Tile):
            trace.emit_now(TensorCopy, dst=d, src=ty.access(predicate, tags))
        else:
            from trnsim.isa import Memset

            trace.emit_now(Memset, dst=d, value=ty)
        src = tx.access(predicate, tags) if isinstance(tx, Tile) else tx
        pred_ap = cond.access(predicate, tags)
        if pred_ap.dtype.is_float:
            raise InvalidArgumentError("nl.where needs an integer/bool condition tile (e.g. from "
                                       "nl.greater), not a float tile")
        trace.emit_now(TensorCopyPredicated, dst=d, src=src, predicate=pred_ap)

    return trace.defer(cond.shape, out_dtype, emit, tags=tags)
