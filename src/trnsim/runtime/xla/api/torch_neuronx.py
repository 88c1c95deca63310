"""`import torch_neuronx`: trace() is trnsim.trace; utils.get_platform_target()."""

from __future__ import annotations

import types


def trace(model, example_inputs, *args, **kwargs):
    from trnsim.runtime.compile import trace as _trace
    from trnsim.runtime.xla.collective import instance

    kwargs.setdefault("instance", instance().name)
    return _trace(model, example_inputs, **kwargs)


def _platform_target() -> str:
    from trnsim.runtime.xla.collective import instance

    return instance().name.split(".")[0].rstrip("n")


utils = types.SimpleNamespace(get_platform_target=_platform_target)
__version__ = "2.9.0+trnsim"


def __getattr__(name: str):
    from trnsim.runtime.xla.api import missing

    return missing("torch_neuronx", name)
