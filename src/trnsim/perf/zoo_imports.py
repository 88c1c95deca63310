"""The one place trnsim steers a third-party import: while a zoo model is built, optional modules
that importing transformers loads but no model build or capture calls are deferred.

transformers' loss modules (object detection: DETR, RT-DETR, Grounding DINO, ...) run
``from scipy.optimize import linear_sum_assignment`` when they are imported, which
``transformers.modeling_utils`` does for every model: scipy.optimize costs about 0.45 CPU s, 10% of
building Llama-2-7B, and trnsim never computes a loss with it. While `deferred_imports` is active,
a module named in `DEFERRED` is a stand-in: each function name listed for it is a forwarder that
imports the real module on its first call and calls the real function, so code holding it behaves
as if it held the real one; any other name read from the stand-in imports the real module and
returns its attribute. When the block ends the stand-in is taken out of ``sys.modules`` (and off
its parent package), so a later ``import`` loads the real module. Nothing of transformers or torch
is patched.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

# module -> the functions that may be imported from it before they are called
DEFERRED: dict[str, tuple[str, ...]] = {"scipy.optimize": ("linear_sum_assignment",)}


_WANTED: set[str] = set()  # deferred modules something has asked for for real: never stood in


def _real_module(name: str) -> ModuleType:
    """The real module `name`, importing it (past a stand-in still in sys.modules) if needed."""
    _WANTED.add(name)
    module = sys.modules.get(name)
    if isinstance(module, _StandIn):
        _remove(name, module)
    return importlib.import_module(name)


def _forwarder(module: str, name: str) -> Callable[..., Any]:
    def forward(*args: Any, **kwargs: Any) -> Any:
        return getattr(_real_module(module), name)(*args, **kwargs)

    forward.__name__ = forward.__qualname__ = name
    forward.__module__ = module
    return forward


class _StandIn(ModuleType):
    """A deferred module: its listed functions forward, any other attribute loads the real one."""

    def __getattr__(self, attr: str) -> Any:
        if attr in DEFERRED.get(self.__name__, ()):
            value = _forwarder(self.__name__, attr)
            setattr(self, attr, value)
            return value
        if attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(_real_module(self.__name__), attr)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname in DEFERRED and fullname not in _WANTED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec: Any) -> ModuleType:
        module = _StandIn(spec.name)
        # the real package's directory, so that importing a submodule inside the block works
        parent, _, _ = spec.name.rpartition(".")
        real = importlib.machinery.PathFinder.find_spec(
            spec.name, getattr(sys.modules.get(parent), "__path__", None))
        if real is not None and real.submodule_search_locations is not None:
            module.__path__ = list(real.submodule_search_locations)
        return module

    def exec_module(self, module: ModuleType) -> None:
        return None


def _remove(name: str, stand_in: ModuleType) -> None:
    if sys.modules.get(name) is stand_in:
        del sys.modules[name]
    parent, _, child = name.rpartition(".")
    if parent in sys.modules and getattr(sys.modules[parent], child, None) is stand_in:
        delattr(sys.modules[parent], child)


@contextmanager
def deferred_imports() -> Iterator[None]:
    """Modules in `DEFERRED` not yet imported are stand-ins inside the block (module docstring)."""
    finder = _Finder()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in DEFERRED:
            module = sys.modules.get(name)
            if isinstance(module, _StandIn):
                _remove(name, module)
