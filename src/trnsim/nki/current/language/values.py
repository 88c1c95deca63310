"""nl operations that return values (nl.load, nl.add, nl.exp, nl.matmul, ...) in nki 0.3+.

They are the legacy API's functions — the same pending-result machinery and lowering — minus
`mask=`, which nki 0.3+ replaced by slicing. Each keeps its NKI name, so it also works as an
operator value (``nisa.tensor_tensor(dst, a, b, op=nl.add)``, ``nisa.activation(op=nl.exp)``).
"""

from __future__ import annotations

import functools

from trnsim.errors import InvalidArgumentError
from trnsim.isa import TensorScalar
from trnsim.nki.api_boundary import legacy_only_keyword
from trnsim.nki.isa import lowering
from trnsim.nki.language import compound, control, elementwise, memory
from trnsim.nki.operands import resolve_dtype, tile_arg, wider
from trnsim.nki.tile import Tile
from trnsim.nki.trace import api, current_trace
from trnsim.numerics import dtype as as_dtype


def _without_mask(fn, name: str | None = None):
    """The legacy function, rejecting the legacy-only `mask=` keyword."""
    label = f"nl.{name or fn.__name__}"

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if "mask" in kwargs:
            raise legacy_only_keyword(label, "mask")
        return fn(*args, **kwargs)
    if name:
        call.__name__ = name
    return call


_UNARY = ("exp", "log", "tanh", "sigmoid", "relu", "gelu", "gelu_apprx_tanh", "gelu_apprx_sigmoid",
          "silu", "softplus", "mish", "sqrt", "rsqrt", "square", "erf", "erf_dx", "sin", "cos",
          "tan", "arctan", "abs", "sign", "floor", "ceil", "trunc", "reciprocal", "negative",
          "invert", "logical_not")
_BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power", "fmod", "mod",
           "equal", "not_equal", "greater", "greater_equal", "less", "less_equal", "bitwise_and",
           "bitwise_or", "bitwise_xor", "left_shift", "right_shift", "logical_and", "logical_or",
           "logical_xor", "abs_max", "abs_min")
_COMPOUND = ("sum", "max", "min", "mean", "prod", "all", "var", "softmax", "rms_norm", "matmul",
             "transpose", "dropout")
_MEMORY = ("load", "store", "load_transpose2d", "copy", "broadcast_to")

OPS = {name: _without_mask(getattr(elementwise, name)) for name in (*_UNARY, *_BINARY)}
OPS.update({name: _without_mask(getattr(compound, name)) for name in _COMPOUND})
OPS.update({name: _without_mask(getattr(memory, name)) for name in _MEMORY})
OPS["device_print"] = _without_mask(control.device_print)
OPS["expand_dims"] = control.expand_dims


def _activation_only(func: str):
    """Activations nki 0.3+ added as nl names (derivatives); usable as nisa.activation ops and as
    values."""
    @api(f"nl.{func}")
    def op(x, dtype=None):
        return elementwise.activation(func, x, dtype=dtype)
    op.__name__ = func
    return op


for _func in ("gelu_dx", "silu_dx", "gelu_apprx_sigmoid_dx"):
    OPS[_func] = _activation_only(_func)


globals().update(OPS)  # module-level names (add, exp, load, ...) for nl to import

@api("nl.where")
def where(condition, x, y, dtype=None):
    """x where condition (1.0 / 0.0, any dtype) else y: copy y, then a predicated copy of x."""
    trace = current_trace()
    cond = tile_arg(condition, "nl.where condition")
    tx = tile_arg(x, "nl.where x") if isinstance(x, Tile) else float(x)
    ty = tile_arg(y, "nl.where y") if isinstance(y, Tile) else float(y)
    dtypes = [t.dtype_spec for t in (tx, ty) if isinstance(t, Tile)] or [as_dtype("float32")]
    out_dtype = resolve_dtype(dtype) or wider(*dtypes)

    def emit(dst: Tile, accumulate: bool = False) -> None:
        predicate = cond
        if cond.dtype_spec.is_float:  # the engines' predicates are integer masks
            predicate = trace.allocate(cond.shape, "uint8", "sbuf", name="where_mask")
            trace.emit_now(TensorScalar, dst=predicate.access(), src=cond.access(),
                           op0="not_equal", operand0=0.0)
        if isinstance(ty, Tile):
            lowering.tensor_copy(dst, ty)
        else:
            lowering.memset(dst, ty)
        lowering.tensor_copy_predicated(dst, tx, predicate)
        if predicate is not cond:
            trace.release(predicate)

    return trace.defer(cond.shape, out_dtype, emit)


@api("nl.gather_flattened")
def gather_flattened(data, indices, axis=0, dtype=None):
    raise InvalidArgumentError("nl.gather_flattened is not supported by trnsim yet; use "
                               "nisa.nc_n_gather")
