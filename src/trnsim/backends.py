"""Run-time services a lower layer needs from an upper one, wired by the top-level package.

Layers never import upward (DESIGN.md). `nki`'s multi-rank launcher needs the interconnect model,
which lives in `collectives`, a layer above it; so `nki` asks this registry and the top-level
`trnsim` package (which, like the CLI, may import any layer) registers `collectives` here.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

from trnsim.errors import UnsupportedError

_fabric_backend: Callable[[], SimpleNamespace] | None = None


def set_fabric_backend(provider: Callable[[], SimpleNamespace]) -> None:
    """`provider()` returns a namespace with the collectives layer's Fabric, Collective, Machine."""
    global _fabric_backend
    _fabric_backend = provider


def fabric_backend() -> SimpleNamespace:
    if _fabric_backend is None:
        raise UnsupportedError("no collectives fabric is registered (import trnsim first)")
    return _fabric_backend()
