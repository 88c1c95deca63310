"""Tensor creation: nl.ndarray/zeros/ones/full/zeros_like/empty_like/shared_constant/
shared_identity_matrix."""

from __future__ import annotations

from math import prod

import numpy as np

from trnsim.errors import InvalidArgumentError
from trnsim.nki.language.buffers import BUFFERS, split_shape
from trnsim.nki.language.memory import fill
from trnsim.nki.operands import resolve_dtype
from trnsim.nki.tile import Tile
from trnsim.nki.trace import api, current_trace


def _buffer(buffer) -> str:
    name = buffer or "sbuf"
    name = getattr(name, "name", name)
    if name not in BUFFERS:
        raise InvalidArgumentError(f"unknown buffer {name!r}; use nl.sbuf, nl.psum, nl.hbm, "
                                   f"nl.shared_hbm or nl.private_hbm")
    return "private_hbm" if name == "hbm" else name


@api("nl.ndarray")
def ndarray(shape, dtype, *, buffer=None, name="", **kwargs) -> Tile:
    from trnsim.nki.compiler import Placement

    plain, par_axis = split_shape(shape)
    offset, wrap, strides = None, (), None
    if isinstance(buffer, Placement):  # ncc.sbuf.mod_alloc(base_addr=...): manual placement
        free = [n for i, n in enumerate(plain) if i != par_axis]
        block_bytes = prod(free[par_axis:]) * resolve_dtype(dtype).itemsize
        wrap = buffer.num_free_tiles[:par_axis]
        offset, strides = current_trace().loop_placement(
            buffer.offset_for(tuple(plain[:par_axis]), plain[par_axis], block_bytes))
        buffer = buffer.buffer
    return current_trace().allocate(plain, resolve_dtype(dtype), _buffer(buffer), name=name,
                                    par_axis=par_axis, offset=offset, wrap=wrap,
                                    block_strides=strides)


@api("nl.full")
def full(shape, fill_value, dtype, *, buffer=None, name="", **kwargs) -> Tile:
    tile = ndarray(shape, dtype, buffer=buffer, name=name)
    if tile.buffer == "psum" and float(fill_value) == 0.0:
        storage = tile._storage  # the first matmul into each part starts a fresh accumulation group
        storage.zero_ranges = [(storage.offset, storage.offset + storage.bytes_per_partition)]
    else:
        current_trace().flush()
        fill(tile, float(fill_value))
    return tile


@api("nl.zeros")
def zeros(shape, dtype, *, buffer=None, name="", **kwargs) -> Tile:
    return full(shape, 0.0, dtype, buffer=buffer, name=name)


@api("nl.ones")
def ones(shape, dtype, *, buffer=None, name="", **kwargs) -> Tile:
    return full(shape, 1.0, dtype, buffer=buffer, name=name)


@api("nl.zeros_like")
def zeros_like(a, dtype=None, *, buffer=None, name="", **kwargs) -> Tile:
    return zeros(a.shape, dtype or a.dtype_spec, buffer=buffer or a.buffer, name=name)


@api("nl.empty_like")
def empty_like(a, dtype=None, *, buffer=None, name="", **kwargs) -> Tile:
    return ndarray(a.shape, dtype or a.dtype_spec, buffer=buffer or a.buffer, name=name)


@api("nl.shared_constant")
def shared_constant(constant, dtype=None, **kwargs) -> Tile:
    data = np.asarray(constant)
    dt = resolve_dtype(dtype) or resolve_dtype(data.dtype)
    return current_trace().hbm_tensor("constant", data.shape, dt, kind="constant",
                                      buffer="shared_hbm", data=data)


@api("nl.shared_identity_matrix")
def shared_identity_matrix(n, dtype=np.uint8, **kwargs) -> Tile:
    return shared_constant(np.eye(int(n)), dtype=dtype)


def random_seed(seed, *, mask=None, **kwargs) -> None:
    """Accepted: the simulator's generator is seeded per run (see trnsim.sim)."""
    return None
