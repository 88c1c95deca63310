"""`torch_xla.distributed.parallel_loader`: MpDeviceLoader / ParallelLoader.

Each batch is moved to the device and, as torch-xla's per-device iterator does, the graph is
cut (a sync) before the next batch is handed out, and once more when the loader is exhausted.
"""

from __future__ import annotations

from torch.utils._pytree import tree_map


def _to_device(batch):
    import torch

    from trnsim.runtime.xla.device import to_device

    return tree_map(lambda x: to_device(x) if isinstance(x, torch.Tensor) else x, batch)


class PerDeviceLoader:
    def __init__(self, loader, device, batches_per_execution: int = 1) -> None:
        self._loader = loader
        self._device = device
        self._every = max(1, batches_per_execution)

    def __iter__(self):
        from trnsim.runtime.xla.device import DEVICE

        for i, batch in enumerate(self._loader):
            if i and i % self._every == 0:
                DEVICE.mark_step("parallel_loader")
            yield _to_device(batch)
        DEVICE.mark_step("parallel_loader")

    def __len__(self) -> int:
        return len(self._loader)


class MpDeviceLoader:
    def __init__(self, loader, device, **kwargs) -> None:
        self._loader = loader
        self._device = device
        self._every = kwargs.get("batches_per_execution", 1)

    def __iter__(self):
        return iter(PerDeviceLoader(self._loader, self._device, self._every))

    def __len__(self) -> int:
        return len(self._loader)


class ParallelLoader:
    def __init__(self, loader, devices, batchdim: int = 0, batches_per_execution: int = 1,
                 **kwargs) -> None:
        self._loader = loader
        self._devices = devices
        self._every = batches_per_execution

    def per_device_loader(self, device) -> PerDeviceLoader:
        return PerDeviceLoader(self._loader, device, self._every)


def __getattr__(name: str):
    from trnsim.runtime.xla.api import missing

    return missing("torch_xla.distributed.parallel_loader", name)
