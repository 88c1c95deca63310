"""Loops, SPMD program ids, device_print and other control-side nl calls."""

from __future__ import annotations

import itertools

from trnsim.errors import InvalidArgumentError, UnsupportedError
from trnsim.isa import DevicePrint
from trnsim.nki.operands import tile_arg
from trnsim.nki.stamp import stamped
from trnsim.nki.trace import api, current_trace, user_location

_loop_ids = itertools.count()


def _scoped_range(kind: str, args):
    """Iterate like range(*args); each iteration is a scope whose tiles are freed at its end.
    Iterations that differ only in affine addresses are stamped (`trnsim.nki.stamp`)."""
    trace = current_trace(required=False)
    if len(args) == 1 and not isinstance(args[0], int):
        args = (int(args[0]),)
    values = range(*[int(a) for a in args])
    if trace is None:
        yield from values
        return
    loop = next(_loop_ids)
    source = user_location()
    yield from stamped(trace, values, lambda i, value: trace.enter(loop, value, kind, source),
                       trace.exit)


def affine_range(*args, **kwargs):
    """Iterations without loop-carried dependencies (PSUM `+=` accumulation allowed)."""
    return _scoped_range("affine_range", args)


def sequential_range(*args, **kwargs):
    """Iterations with loop-carried dependencies; executed in order."""
    return _scoped_range("sequential_range", args)


def static_range(*args):
    """Fully unrolled at trace time, like a Python range."""
    return range(*[int(a) for a in args])


def program_id(axis: int = 0) -> int:
    trace = current_trace()
    if not 0 <= axis < max(len(trace.program_ids), 1):
        raise InvalidArgumentError(f"nl.program_id({axis}): the launch grid has "
                                   f"{len(trace.program_ids)} dimension(s)")
    return trace.program_ids[axis] if trace.program_ids else 0


def num_programs(axes=None) -> int:
    trace = current_trace()
    grid = trace.grid or (1,)
    if axes is None:
        total = 1
        for size in grid:
            total *= size
        return total
    if isinstance(axes, int):
        return grid[axes]
    total = 1
    for a in axes:
        total *= grid[a]
    return total


def program_ndim() -> int:
    return len(current_trace().grid)


@api("nl.device_print")
def device_print(prefix, x, *, mask=None, **kwargs) -> None:
    trace = current_trace()
    tile = tile_arg(x, "nl.device_print value")
    trace.emit(DevicePrint, src=tile.access(), prefix=str(prefix))


def all_reduce(*args, **kwargs):
    raise UnsupportedError("nl.all_reduce (legacy) is not supported; use nki.collectives.all_reduce "
                           "with the current NKI API")


@api("nl.gather_flattened")
def gather_flattened(data, indices, *, axis=0, dtype=None, mask=None, **kwargs):
    """result[p, j] = data[p, indices[p, j]] over data's flattened free dims, per partition
    (GpSimd's gather: `trnsim.isa.NGather`)."""
    from trnsim.isa import NGather

    trace = current_trace()
    src, index = tile_arg(data, "nl.gather_flattened data"), tile_arg(indices, "indices")
    if src.dtype_spec.name != (dtype or src.dtype_spec.name):
        raise InvalidArgumentError("nl.gather_flattened returns data's dtype")

    def emit(dst, accumulate: bool = False) -> None:
        trace.emit_now(NGather, dst=dst.access(), src=src.access(), indices=index.access())

    return trace.defer(index.shape, src.dtype_spec, emit)


def expand_dims(data, axis):
    """A view with a new size-1 axis."""
    from trnsim.nki.tile import Axis, Tile

    tile = tile_arg(data, "nl.expand_dims operand")
    axes = list(tile._axes)
    axis = axis % (len(axes) + 1)
    axes.insert(axis, Axis(1))
    return Tile(tile._trace, tile._storage, tuple(axes), tile.dtype_spec, tile._poffset,
                tile._foffset, name=tile.name)
