"""`import torch_xla`: torch_xla.device(), torch_xla.sync(), the version."""

from __future__ import annotations

import torch

__version__ = "2.9.0+trnsim"


def device(index: int | None = None) -> torch.device:
    from trnsim.runtime.xla.api.runtime import local_ordinal

    return torch.device("xla", 0 if index is None else index) if index is not None \
        else torch.device("xla", local_ordinal() * 0)


def sync(wait: bool = False, reset_scope: bool = True) -> None:
    from trnsim.runtime.xla.device import DEVICE
    from trnsim.runtime.xla.lazy import user_source

    DEVICE.mark_step(user_source(2))


def devices() -> list[torch.device]:
    return [device()]


def __getattr__(name: str):
    from trnsim.runtime.xla.api import missing

    return missing("torch_xla", name)
