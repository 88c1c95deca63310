"""A tile view as an instruction operand (`trnsim.nki.tile.to_access_pattern_raw`, one pass over
the axes): the same access pattern as the rule written out step by step (drop size-1 axes, take
out the partition axis on chip or the first axis in HBM, merge the rest), and the same errors."""

import itertools

import numpy as np
import pytest

from trnsim import hardware
from trnsim.errors import InvalidArgumentError
from trnsim.isa import AccessPattern, Memory
from trnsim.nki.tile import Axis, Tile, _merge, index_view, to_access_pattern_raw
from trnsim.nki.trace import Trace, tracing


def _reference(tile: Tile) -> AccessPattern:
    storage, dtype = tile._storage, tile._dtype
    axes = [a for a in tile._axes if a.size != 1]
    if storage.memory is Memory.HBM:
        first, rest = (axes or [Axis(1, 0, 1)])[0], axes[1:]
        return AccessPattern(Memory.HBM, dtype, first.size, _merge(rest) or ((1, 1),),
                             tile._foffset * dtype.itemsize, 0, first.fstep, storage.name)
    part = next((a for a in axes if a.pstep), None)
    free = [a for a in axes if a is not part]
    return AccessPattern(storage.memory, dtype, part.size if part else 1, _merge(free) or ((1, 1),),
                         storage.offset + tile._foffset * dtype.itemsize, tile._poffset, 0,
                         storage.name)


@pytest.mark.parametrize("buffer,shape,par_axis", [("sbuf", (128, 6, 40), 0),
                                                   ("sbuf", (4, 128, 8), 1),
                                                   ("psum", (128, 512), 0),
                                                   ("hbm", (7, 9, 5), 0), ("hbm", (3,), 0)])
def test_operands_follow_the_rule(buffer, shape, par_axis):
    trace = Trace("operands", hardware.core("trn1"))
    with tracing(trace):
        tile = trace.allocate(shape, "bfloat16", buffer, name="t", par_axis=par_axis)
        parts = [[0, n - 1, slice(None), slice(1, n), slice(0, n, 2)] for n in shape]
        for key in itertools.product(*parts):
            view = index_view(tile, key)
            if any(a.pstep > 1 for a in view._axes if a.size > 1):
                with pytest.raises(InvalidArgumentError, match="strides over partitions"):
                    to_access_pattern_raw(view)
                continue
            assert to_access_pattern_raw(view) == _reference(view), key
            assert to_access_pattern_raw(view) is to_access_pattern_raw(view)  # interned


def test_operand_errors_are_unchanged():
    trace = Trace("operands", hardware.core("trn1"))
    with tracing(trace):
        tile = trace.allocate((128, 64), "float32", "sbuf", name="t")
        strided = Tile(trace, tile._storage, (Axis(64, 2, 0), Axis(64, 0, 1)), tile._dtype)
        with pytest.raises(InvalidArgumentError, match="strides over partitions"):
            to_access_pattern_raw(strided)
        mixed = Tile(trace, tile._storage, (Axis(128, 1, 1), Axis(64, 0, 1)), tile._dtype)
        with pytest.raises(InvalidArgumentError, match="mixes its partition"):
            to_access_pattern_raw(mixed)
        # an empty axis is reported before a partition problem, as the step-by-step rule did
        empty = Tile(trace, tile._storage, (Axis(64, 2, 0), Axis(0, 0, 1)), tile._dtype)
        with pytest.raises(InvalidArgumentError, match="selects no elements"):
            to_access_pattern_raw(empty)


def test_a_pending_results_axes_keep_numpy_sizes():
    """Pending results of one shape share their (immutable) axes, but a numpy size is never
    swapped for an equal int from an earlier result."""
    trace = Trace("pending", hardware.core("trn1"))
    with tracing(trace):
        axes = []
        for shape in [(128, 64), (128, 64), (np.int64(128), 64)]:
            pending = trace.defer(shape, "float32", lambda dst, acc: None)
            axes.append(pending._axes)
            assert pending.shape == (128, 64)
    assert axes[0] is axes[1] and axes[0][0] is not axes[0][1]
    assert type(axes[2][0].size) is np.int64 and type(axes[0][0].size) is int
