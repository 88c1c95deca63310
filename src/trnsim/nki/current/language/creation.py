"""Tensor creation in nki 0.3+: nl.ndarray (with manual `address=`), zeros/ones/full, *_like,
shared constants and identity matrices, nl.rand and nl.random_seed.

Fills are emitted as memsets when the tensor is created (the legacy API's lazy PSUM zeros, which
a first matmul could absorb, do not exist here: `nc_matmul(accumulate=...)` decides instead).
"""

from __future__ import annotations

import os

import numpy as np

from trnsim.errors import InvalidArgumentError, LimitExceededError, UnsupportedError
from trnsim.isa import Random, RngSeed
from trnsim.nki.current.language.buffers import region, sbuf
from trnsim.nki.isa import lowering
from trnsim.nki.language import creation as legacy
from trnsim.nki.operands import resolve_dtype, tile_arg
from trnsim.nki.trace import api, current_trace


def _shape(shape) -> tuple[int, ...]:
    if isinstance(shape, int):
        return (shape,)
    return tuple(int(s) for s in shape)


@api("nl.ndarray")
def ndarray(shape, dtype, buffer=sbuf, name: str = "", address=None):
    """A new tensor; `address=(partition, byte offset)` places an on-chip tensor by hand."""
    trace = current_trace()
    kind = region(buffer).value
    partition, offset = (0, None) if address is None else (int(address[0]), int(address[1]))
    plain = _shape(shape)
    if address is not None and kind not in ("sbuf", "psum"):
        raise InvalidArgumentError("address= places SBUF/PSUM tensors only")
    if offset is not None:
        _check_free(trace, kind, offset, plain, resolve_dtype(dtype), name)
    tile = trace.allocate(plain, resolve_dtype(dtype), kind, name=name or "", offset=offset)
    if partition:
        end = partition + plain[0]
        if end > trace.core.partitions:
            raise LimitExceededError(f"partition range of tensor {name or tile.name!r} ends at", end,
                                     trace.core.partitions, context=trace.core.name)
        tile._poffset = partition
    return tile


def _check_free(trace, kind: str, offset: int, shape, dtype, name: str) -> None:
    """A hand-placed tensor must not overlap a live one (AWS's simulator does not check this)."""
    ring = trace.psum if kind == "psum" else trace.sbuf
    nbytes = dtype.itemsize
    for size in shape[1:]:
        nbytes *= size
    for start, (size, other) in ring.live.items():
        if start < offset + nbytes and offset < start + size:
            raise InvalidArgumentError(
                f"nl.ndarray(address=...): {kind} bytes [{offset}, {offset + nbytes}) of "
                f"{name or 'this tensor'!r} overlap live tensor {other!r} at [{start}, {start + size})")


def _filled(shape, value: float, dtype, buffer, name: str):
    tile = ndarray(shape, dtype, buffer=buffer, name=name)
    if not tile.on_chip:
        raise UnsupportedError("filling an HBM tensor at creation is not supported; fill an SBUF "
                               "tensor and nisa.dma_copy it")
    current_trace().flush()
    lowering.memset(tile, value)
    return tile


@api("nl.full")
def full(shape, fill_value, dtype, buffer=sbuf, name: str = ""):
    return _filled(shape, float(fill_value), dtype, buffer, name)


@api("nl.zeros")
def zeros(shape, dtype, buffer=sbuf, name: str = ""):
    return _filled(shape, 0.0, dtype, buffer, name)


@api("nl.ones")
def ones(shape, dtype, buffer=sbuf, name: str = ""):
    return _filled(shape, 1.0, dtype, buffer, name)


@api("nl.zeros_like")
def zeros_like(x, dtype=None, buffer=None, name: str = ""):
    return _filled(x.shape, 0.0, dtype or x.dtype, buffer or sbuf, name)


@api("nl.empty_like")
def empty_like(x, dtype=None, buffer=None, name: str = ""):
    return ndarray(x.shape, dtype or x.dtype, buffer=buffer or x.buffer, name=name)


@api("nl.shared_constant")
def shared_constant(constant, dtype=None):
    """A shared-HBM tensor holding `constant` (an array, or the path of a .npy file)."""
    if isinstance(constant, (str, os.PathLike)):
        constant = np.load(constant)
    return legacy.shared_constant(np.asarray(constant), dtype=dtype)


@api("nl.shared_identity_matrix")
def shared_identity_matrix(n, dtype="uint8", dst=None):
    """An n x n identity in SBUF (loaded from a shared constant), or written into `dst`."""
    trace = current_trace()
    constant = legacy.shared_constant(np.eye(int(n)), dtype=dtype)
    target = dst if dst is not None else ndarray((int(n), int(n)), dtype, buffer=sbuf,
                                                  name="identity")
    trace.flush()
    lowering.dma_copy(target, tile_arg(constant, "identity"))
    return target


@api("nl.rand")
def rand(shape, dtype, buffer=sbuf, name: str = ""):
    """Uniform [0, 1) values (the GpSimd generator; seeded by nl.random_seed)."""
    tile = ndarray(shape, dtype, buffer=buffer, name=name)
    trace = current_trace()
    trace.flush()
    trace.emit_now(Random, dst=tile.access())
    return tile


@api("nl.random_seed")
def random_seed(seed):
    """Seed the generator nl.rand draws from with a [1, 1] 32-bit tensor."""
    trace = current_trace()
    trace.flush()
    trace.emit_now(RngSeed, src=tile_arg(seed, "seed").access(), engine="gpsimd")
