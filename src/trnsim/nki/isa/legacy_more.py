"""Legacy nisa calls added to `neuronxcc.nki` late (neuronxcc 2.2x): the documentation's tests use
them through the legacy module, some with the current API's `dst=` form.

They emit the same instructions as the current API's calls (`trnsim.nki.current.isa`).
"""

from __future__ import annotations

from trnsim.errors import InvalidArgumentError
from trnsim.isa import SequenceBounds, TensorScalarCumulative, alu_op
from trnsim.nki.isa import lowering
from trnsim.nki.isa.enums import reduce_cmd_name
from trnsim.nki.operands import mask_of, resolve_dtype, tile_arg
from trnsim.nki.tile import Tile
from trnsim.nki.trace import api, current_trace


def _written(dst, what: str = "dst") -> Tile:
    """A destination tile given by the caller (written in place, never a kernel input)."""
    if not isinstance(dst, Tile):
        raise InvalidArgumentError(f"{what} must be a tile; got {type(dst).__name__}")
    trace = current_trace()
    dst.placed()
    trace.check_alive(dst)
    trace._check_writable(dst)
    trace._mark_written(dst)
    return dst


def _operand(value, what: str):
    return tile_arg(value, what) if isinstance(value, Tile) else value


@api("nisa.tensor_scalar_cumulative")
def tensor_scalar_cumulative(src, op0, op1, imm0, imm1=None, reduce_cmd="reset_reduce", *,
                             dst=None, dtype=None, mask=None, **kwargs):
    """Per partition, a running op1 over op0(src, imm0): written to `dst` when given (the form the
    documentation uses), else returned as a new tile."""
    trace = current_trace()
    data = tile_arg(src, "tensor_scalar_cumulative src")
    imm0, imm1 = _operand(imm0, "imm0"), _operand(imm1, "imm1")
    predicate = mask_of(mask)

    def emit(target: Tile, accumulate: bool = False) -> None:
        trace.emit_now(TensorScalarCumulative, dst=lowering.access(target, predicate),
                       src=lowering.access(data, predicate), op0=alu_op(op0).name,
                       op1=alu_op(op1).name, imm0=lowering.operand(imm0, predicate),
                       imm1=lowering.operand(imm1, predicate),
                       reduce_cmd=reduce_cmd_name(reduce_cmd))

    if dst is not None:
        trace.flush()
        emit(_written(dst))
        return dst
    return trace.defer(data.shape, resolve_dtype(dtype) or data.dtype_spec, emit)


@api("nisa.sequence_bounds")
def sequence_bounds(*, segment_ids, dtype=None, mask=None, **kwargs):
    """[1, N] segment ids -> [1, 2, N]: each element's [start, end) of its run (padding id 0 gets
    [N, -1])."""
    trace = current_trace()
    ids = tile_arg(segment_ids, "sequence_bounds segment_ids")
    if ids.ndim != 2:
        raise InvalidArgumentError(f"nisa.sequence_bounds takes segment ids [1, N]; got "
                                   f"{list(ids.shape)}")

    def emit(target: Tile, accumulate: bool = False) -> None:
        trace.emit_now(SequenceBounds, dst=target.access(), src=ids.access())

    return trace.defer((ids.shape[0], 2, ids.shape[1]), resolve_dtype(dtype) or ids.dtype_spec,
                       emit)
