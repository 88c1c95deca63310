"""Turning user arguments into operands: tiles, scalars, dtypes and masks."""

from __future__ import annotations

import numpy as np

from trnsim.errors import InvalidArgumentError
from trnsim.nki.indexing import Predicate
from trnsim.nki.tile import Tile
from trnsim.nki.trace import current_trace
from trnsim.numerics import DType
from trnsim.numerics import dtype as as_dtype

SCALARS = (int, float, bool, np.number)


def is_scalar(value) -> bool:
    return isinstance(value, SCALARS) and not isinstance(value, Tile)


def tile_arg(value, what: str) -> Tile:
    """A tile argument ready to be read (pending results placed, PSUM zeros filled)."""
    if not isinstance(value, Tile):
        raise InvalidArgumentError(f"{what} must be a tile; got {type(value).__name__}")
    return current_trace().read_ready(value)


def resolve_dtype(dtype) -> DType | None:
    if dtype is None:
        return None
    from trnsim.nki.language.dtypes import to_dtype

    return to_dtype(dtype)


def _rank(dt: DType) -> tuple:
    return (dt.is_float, dt.itemsize, dt.name == "float32")


def wider(*dtypes: DType) -> DType:
    """The higher-precision dtype (NKI's default result dtype for two inputs)."""
    return max(dtypes, key=_rank)


def mask_of(mask) -> Predicate | None:
    if mask is None:
        return None
    if isinstance(mask, (bool, np.bool_)):  # a condition known at trace time
        return None if mask else Predicate.never()
    if not isinstance(mask, Predicate):
        raise InvalidArgumentError("mask= takes a predicate over index tiles, e.g. "
                                   "(i_p < 64) & (i_f < 256)")
    return mask


def masked(tile: Tile, mask: Predicate | None, tags) -> object:
    """Access pattern of a tile operand, shrunk by the mask."""
    return tile.access(mask, tags)


def scalar_value(value) -> float:
    return float(value)


def float_dtype(dtype) -> DType:
    return as_dtype(dtype)
