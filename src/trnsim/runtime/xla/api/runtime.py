"""`torch_xla.runtime`: the process's place in the job (torchrun's RANK / WORLD_SIZE)."""

from __future__ import annotations

import os


def world_size() -> int:
    from trnsim.runtime.xla.collective import world_size as _world_size

    return _world_size()


def global_ordinal() -> int:
    return int(os.environ.get("RANK", "0"))


def local_ordinal() -> int:
    return int(os.environ.get("LOCAL_RANK", "0"))


def local_process_count() -> int:
    return int(os.environ.get("LOCAL_WORLD_SIZE", str(world_size())))


def addressable_device_count() -> int:
    return 1


def device_type() -> str:
    return "NEURON"


def using_pjrt() -> bool:
    return True


def __getattr__(name: str):
    from trnsim.runtime.xla.api import missing

    return missing("torch_xla.runtime", name)
