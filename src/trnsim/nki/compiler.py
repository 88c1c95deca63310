"""`nki.compiler` (ncc) hints and manual allocation for the legacy API.

Hints that only steer the real compiler's optimiser are accepted and have no effect in trnsim
(`skip_middle_end_transformations`, `enable_stack_allocator`, `force_auto_alloc`, `no_reorder`).
`sbuf.mod_alloc(base_addr=...)` / `psum.mod_alloc(base_bank=...)` place tiles at given offsets.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from math import prod

from trnsim.errors import InvalidArgumentError, UnsupportedError


def skip_middle_end_transformations(fn):
    return fn


def enable_stack_allocator(fn=None, **kwargs):
    return fn if fn is not None else (lambda f: f)


def force_auto_alloc(fn=None, **kwargs):
    return fn if fn is not None else (lambda f: f)


@contextmanager
def no_reorder():
    yield


@dataclass(frozen=True)
class Placement:
    """A buffer argument that fixes where a tile lives: ncc.sbuf.mod_alloc(base_addr=1024)."""

    buffer: str
    base_offset: int
    num_free_tiles: tuple[int, ...] = ()
    # ncc.<buffer>.alloc(func): func(block index, partitions, bytes per partition) gives
    # (partition, byte) in SBUF or (bank, partition, byte) in PSUM for each block of the tile
    function: Callable | None = None
    unit: int = 1  # bytes per PSUM bank (a bank number counts this many bytes)

    def offset_for(self, block_shape: tuple[int, ...], partitions: int,
                   bytes_per_block: int) -> tuple[int, tuple[int, ...] | None]:
        """The byte offset of the tile's first block and, for an allocation function, the bytes
        between consecutive blocks along each block dimension (None: one after another). The
        function is called as the compiler calls it, by keyword, for every block; its blocks
        must lie on a regular grid (trnsim's tiles are strided views), else it is refused."""
        if self.function is None:
            return self.base_offset, None
        offsets = {}
        for index in itertools.product(*(range(s) for s in block_shape)):
            where = tuple(int(v) for v in self.function(idx=index, pdim_size=partitions,
                                                         fdim_size=bytes_per_block))
            if len(where) >= 2 and where[-2] != 0:
                raise UnsupportedError(f"ncc.{self.buffer}.alloc: block {index} starts at "
                                       f"partition {where[-2]}; trnsim places blocks at partition 0")
            offsets[index] = where[0] * self.unit + where[2] \
                if self.buffer == "psum" and len(where) == 3 else where[-1]
        origin = (0,) * len(block_shape)
        first = offsets[origin]
        strides = tuple(
            offsets[tuple(int(d == axis) for d in range(len(block_shape)))] - first
            if size > 1 else bytes_per_block for axis, size in enumerate(block_shape))
        for index, offset in offsets.items():
            expected = first + sum(i * s for i, s in zip(index, strides, strict=True))
            if offset != expected:
                raise UnsupportedError(
                    f"ncc.{self.buffer}.alloc: block {index} at byte {offset}, not {expected}; "
                    f"trnsim supports allocation functions that place a tile's blocks on a "
                    f"regular grid (here {list(strides)} bytes apart along its block dimensions)")
        placed = sorted(offsets.values())
        if min(strides, default=0) < 0 or any(b - a < bytes_per_block
                                              for a, b in itertools.pairwise(placed)):
            raise UnsupportedError(f"ncc.{self.buffer}.alloc: blocks of {bytes_per_block} bytes "
                                   f"placed at bytes {placed[:8]} overlap or run backwards")
        dense = all(s == bytes_per_block * prod(block_shape[axis + 1:])
                    for axis, s in enumerate(strides))
        return first, None if dense else strides


class _Buffer:
    def __init__(self, name: str, unit: int) -> None:
        self.name = name
        self._unit = unit

    def mod_alloc(self, base_addr: int | None = None, *, base_bank: int | None = None,
                  base_partition: int = 0, num_free_tiles=(), num_bank_tiles=(),
                  **kwargs) -> Placement:
        """Place a tile at a fixed offset; `num_free_tiles` (SBUF) / `num_bank_tiles` (PSUM)
        give, per block dimension, how many physical blocks back its logical blocks (block i
        lives in physical block i % n)."""
        base = base_addr if base_addr is not None else (base_bank or 0) * self._unit
        if self.name == "psum" and base_bank is not None and base_addr is not None:
            base = base_bank * self._unit + base_addr
        counts = tuple(int(n) for n in (num_bank_tiles or num_free_tiles))
        if any(n < 1 for n in counts):
            raise InvalidArgumentError(f"ncc.{self.name}.mod_alloc: physical tile counts must be "
                                       f"positive; got {counts}")
        return Placement(self.name, int(base), counts, unit=self._unit)

    def alloc(self, placement=None, **kwargs) -> Placement:
        """alloc(func) places a tile by an allocation function; alloc(base_addr=...) is
        mod_alloc."""
        if callable(placement):
            return Placement(self.name, 0, function=placement, unit=self._unit)
        return self.mod_alloc(placement, **kwargs)

    def auto_alloc(self) -> str:
        return self.name


sbuf = _Buffer("sbuf", 1)
psum = _Buffer("psum", 2048)


def multi_buffer(*args, **kwargs):
    return None
