"""Scalar-or-vector operands shared by Vector/Scalar/GpSimd instructions.

An `Operand` is a compile-time float or an access pattern of shape [P, 1] (one value per
partition) broadcast along the free axes of the data tile.
"""

from __future__ import annotations

import numpy as np

from trnsim.isa.access import AccessPattern
from trnsim.isa.instruction import ExecutionState

Operand = float | int | AccessPattern


def operand_aps(*operands) -> tuple[AccessPattern, ...]:
    """The access patterns among operands (for reads())."""
    return tuple(o for o in operands if isinstance(o, AccessPattern))


def operand_value(state: ExecutionState, operand: Operand, ndim: int) -> np.ndarray | np.float32:
    """Float32 value of an operand, shaped to broadcast over a tile with `ndim` dimensions."""
    if isinstance(operand, AccessPattern):
        values = state.read_compute(operand).reshape(operand.partitions, -1)[:, :1]
        return values.reshape((operand.partitions,) + (1,) * (ndim - 1))
    return np.float32(operand)


def check_vector_operand(instruction, operand: Operand, data: AccessPattern, what: str) -> None:
    """A per-partition operand must cover the data's partitions with one element each."""
    from trnsim.errors import InvalidArgumentError

    if isinstance(operand, AccessPattern) and (operand.partitions != data.partitions
                                               or operand.free_size != 1):
        instruction.fail(InvalidArgumentError(
            f"{instruction.name}: {what} must be a scalar or a [{data.partitions}, 1] tile; got "
            f"{list(operand.shape)}"))


def same_elements(instruction, a: AccessPattern, b: AccessPattern, what: str) -> None:
    """Two tiles must have the same partitions and elements per partition."""
    from trnsim.errors import InvalidArgumentError

    if a.partitions != b.partitions or a.free_size != b.free_size:
        instruction.fail(InvalidArgumentError(
            f"{instruction.name}: {what} shapes differ: {list(a.shape)} vs {list(b.shape)} (the "
            f"partition count and elements per partition must match)"))


