"""`import torch_xla.distributed.xla_backend`: `dist.init_process_group("xla")`.

The "xla" backend is registered as a thin front of gloo: the numbers of collectives are reduced
by real processes on CPU (gloo), their time by trnsim's collectives layer (`collective`).
"""

from __future__ import annotations

import importlib

import torch.distributed as dist


def _create_xla_process_group(store, rank, size, timeout):
    return dist.ProcessGroupGloo(store, rank, size, timeout)


if "xla" not in dist.Backend.backend_list:
    dist.Backend.register_backend("xla", _create_xla_process_group, devices=["cpu", "xla"])

_rdzv = importlib.import_module("torch.distributed.rendezvous")
if "xla" not in _rdzv._rendezvous_handlers:  # torch-xla's "xla://": torchrun's environment
    _rdzv.register_rendezvous_handler("xla", _rdzv._rendezvous_handlers["env"])


def __getattr__(name: str):
    from trnsim.runtime.xla.api import missing

    return missing("torch_xla.distributed.xla_backend", name)
