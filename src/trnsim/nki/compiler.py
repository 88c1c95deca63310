"""`nki.compiler` (ncc) hints and manual allocation for the legacy API.

Hints that only steer the real compiler's optimiser are accepted and have no effect in trnsim
(`skip_middle_end_transformations`, `enable_stack_allocator`, `force_auto_alloc`, `no_reorder`).
`sbuf.mod_alloc(base_addr=...)` / `psum.mod_alloc(base_bank=...)` place tiles at given offsets.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass


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


class _Buffer:
    def __init__(self, name: str, unit: int) -> None:
        self.name = name
        self._unit = unit

    def mod_alloc(self, *, base_addr: int | None = None, base_bank: int | None = None,
                  base_partition: int = 0, num_free_tiles=(), **kwargs) -> Placement:
        base = base_addr if base_addr is not None else (base_bank or 0) * self._unit
        return Placement(self.name, int(base), tuple(num_free_tiles))

    alloc = mod_alloc

    def auto_alloc(self) -> str:
        return self.name


sbuf = _Buffer("sbuf", 1)
psum = _Buffer("psum", 2048)


def multi_buffer(*args, **kwargs):
    return None
