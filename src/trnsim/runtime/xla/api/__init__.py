"""The modules a torch-xla / torch-neuronx training script imports, served by trnsim.

`install()` registers them in `sys.modules` (as `trnsim.nki.compat` does for NKI) and switches
on the lazy device. A name trnsim does not provide raises `UnsupportedError` naming the symbol
and the script's line, instead of an AttributeError deep in the user's code.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

from trnsim.errors import UnsupportedError

MODULES = {
    "torch_xla": "trnsim.runtime.xla.api.torch_xla",
    "torch_xla.core": None,
    "torch_xla.core.xla_model": "trnsim.runtime.xla.api.xla_model",
    "torch_xla.distributed": None,
    "torch_xla.distributed.parallel_loader": "trnsim.runtime.xla.api.parallel_loader",
    "torch_xla.distributed.xla_backend": "trnsim.runtime.xla.api.xla_backend",
    "torch_xla.debug": None,
    "torch_xla.debug.metrics": "trnsim.runtime.xla.api.metrics",
    "torch_xla.runtime": "trnsim.runtime.xla.api.runtime",
    "torch_neuronx": "trnsim.runtime.xla.api.torch_neuronx",
}
ROOTS = ("torch_xla", "torch_neuronx")


def missing(module: str, name: str):
    """Raise the error for a symbol trnsim does not serve (called from module __getattr__)."""
    from trnsim.runtime.xla.lazy import user_source

    if name.startswith("__"):
        raise AttributeError(name)
    raise UnsupportedError(f"{module}.{name} is not simulated by trnsim",
                           source=user_source(3))


class _Refuse(importlib.abc.MetaPathFinder):
    """`import torch_xla.something_else`: a clear error instead of ModuleNotFoundError."""

    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in ROOTS and fullname not in MODULES:
            from trnsim.runtime.xla.lazy import user_source

            raise UnsupportedError(f"module {fullname} is not simulated by trnsim",
                                   source=user_source(2))
        return None


class _AliasLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return sys.modules[spec.name]

    def exec_module(self, module) -> None:
        """Already initialised by `install`."""


class _InstallOnImport(importlib.abc.MetaPathFinder):
    """`python -m trnsim.run`: serve torch_xla / torch_neuronx when the script first imports
    them (NKI-only scripts never pay for importing torch)."""

    def find_spec(self, fullname, path, target=None):
        if fullname in ROOTS:
            sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _InstallOnImport)]
            install()
            return importlib.util.spec_from_loader(fullname, _AliasLoader())
        return None


def register_device() -> None:
    """Register the device type with PyTorch, if PyTorch is installed. It must happen before
    the process's first backward pass (autograd's engine sizes its per-device queues then), so
    `trnsim.run` does it before the script starts rather than at `import torch_xla`."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return
    from trnsim.runtime.xla.lazy import register_backend

    register_backend()


class _RegisterAfterTorch(importlib.abc.Loader):
    """Wraps torch's own loader: once `import torch` has finished, register the device."""

    def __init__(self, real: importlib.abc.Loader) -> None:
        self.real = real

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module) -> None:
        self.real.exec_module(module)
        register_device()


class _WatchTorch(importlib.abc.MetaPathFinder):
    """Registers the device when the script first imports torch: no backward pass can come
    before that, and a script that never imports torch (an NKI kernel's tests) does not pay
    the second or two importing it costs."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "torch":
            return None
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _WatchTorch)]
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _RegisterAfterTorch(spec.loader)
        return spec


def register_device_on_import() -> None:
    """`python -m trnsim.run`: `register_device` now if torch is loaded, else at its import."""
    if "torch" in sys.modules:
        register_device()
    elif not any(isinstance(f, _WatchTorch) for f in sys.meta_path):
        sys.meta_path.insert(0, _WatchTorch())


def install_on_import() -> None:
    if not any(isinstance(f, _InstallOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _InstallOnImport())


def install() -> None:
    from trnsim.runtime.xla import modes

    for alias, target in MODULES.items():
        if target is None:
            module = sys.modules.get(alias) or types.ModuleType(alias)
            module.__path__ = []
            module.__getattr__ = lambda name, _m=alias: missing(_m, name)
            sys.modules[alias] = module
        else:
            sys.modules[alias] = importlib.import_module(target)
    for alias in MODULES:  # parents hold their children as attributes
        if "." in alias:
            parent, child = alias.rsplit(".", 1)
            setattr(sys.modules[parent], child, sys.modules[alias])
    if not any(isinstance(f, _Refuse) for f in sys.meta_path):
        sys.meta_path.insert(0, _Refuse())
    modes.activate()
    from trnsim.runtime.xla.device import DEVICE
    from trnsim.runtime.xla.precision import Precision

    DEVICE.precision = Precision.from_env()


def uninstall() -> None:
    for alias in MODULES:
        sys.modules.pop(alias, None)
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Refuse)]
