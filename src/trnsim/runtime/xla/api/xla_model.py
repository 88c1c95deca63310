"""`torch_xla.core.xla_model` (imported as `xm`): the calls Neuron training scripts make."""

from __future__ import annotations

import os
import sys
from typing import Any

import torch

from trnsim.runtime.xla.api import runtime
from trnsim.runtime.xla.api.torch_xla import device as _device

REDUCE_SUM, REDUCE_MUL, REDUCE_AND, REDUCE_OR, REDUCE_MIN, REDUCE_MAX = (
    "sum", "mul", "and", "or", "min", "max")


def xla_device(n: int | None = None, devkind: str | None = None) -> torch.device:
    return _device(n)


def xla_device_kind(device=None) -> str:
    from trnsim.runtime.xla.collective import instance

    return {1: "NC_v1", 2: "NC_v2", 3: "NC_v3"}.get(instance().chip.core.version, "NC_v2")


def get_xla_supported_devices(devkind=None, max_devices=None) -> list[str]:
    from trnsim.runtime.xla.collective import instance

    count = instance().logical_cores()
    return [f"xla:{i}" for i in range(count if max_devices is None else min(count, max_devices))]


def mark_step(wait: bool = False, reset_scope: bool = True) -> None:
    from trnsim.runtime.xla.device import DEVICE
    from trnsim.runtime.xla.lazy import user_source

    DEVICE.mark_step(user_source(2))


def wait_device_ops(devices=()) -> None:
    """Execution is synchronous in trnsim: nothing to wait for."""


def get_ordinal(defval: int = 0) -> int:
    return runtime.global_ordinal()


def get_local_ordinal(defval: int = 0) -> int:
    return runtime.local_ordinal()


def xrt_world_size(defval: int = 1) -> int:
    return runtime.world_size()


def world_size() -> int:
    return runtime.world_size()


def is_master_ordinal(local: bool = True) -> bool:
    return (runtime.local_ordinal() if local else runtime.global_ordinal()) == 0


def master_print(*args: Any, fd=sys.stdout, local: bool = False, flush: bool = False) -> None:
    if is_master_ordinal(local=local):
        print(*args, file=fd, flush=flush)


def all_reduce(reduce_type: str, inputs, scale: float = 1.0, groups=None, pin_layout: bool = True):
    from trnsim.runtime.xla.collective import all_reduce as _all_reduce

    return _all_reduce(reduce_type, inputs, scale, groups)


BUCKET_ENV = "ALLREDUCE_GRADIENTS_BUCKET_SIZE_MB"
# torch-neuronx's PJRT set-up (`_set_envvar_defaults`) sets the bucket size to 50 MB
NEURON_BUCKET_MB_DEFAULT = "50"


def reduce_gradients(optimizer, groups=None, pin_layout: bool = True) -> None:
    """All-reduce (mean) every gradient when world size > 1, as torch-xla does: with a bucket
    size, in buckets from the last layer back (each can start while the backward still runs,
    see `trnsim.runtime.xla.collective`); with 0, as one coalesced all-reduce."""
    count = runtime.world_size()
    if count > 1:
        grads = [p.grad for group in optimizer.param_groups for p in group["params"]
                 if p.grad is not None]
        bucket_mb = int(os.environ.get(BUCKET_ENV, NEURON_BUCKET_MB_DEFAULT))
        if bucket_mb > 0:
            all_reduce_bucketized_gradients(list(reversed(grads)), scale=1.0 / count,
                                            groups=groups, bucket_cap_mb=bucket_mb)
        else:
            all_reduce(REDUCE_SUM, grads, scale=1.0 / count, groups=groups)


def all_reduce_bucketized_gradients(gradients, scale: float, groups=None,
                                    pin_layout: bool = False, bucket_cap_mb: int = 0) -> None:
    """One all-reduce per bucket of consecutive gradients of at most `bucket_cap_mb` MB (a
    gradient larger than that is a bucket of its own)."""
    cap = bucket_cap_mb * 1024 * 1024
    bucket, size = [], 0
    for grad in gradients:
        nbytes = grad.numel() * grad.element_size()
        if bucket and size + nbytes > cap:
            all_reduce(REDUCE_SUM, bucket, scale=scale, groups=groups)
            bucket, size = [], 0
        bucket.append(grad)
        size += nbytes
    if bucket:
        all_reduce(REDUCE_SUM, bucket, scale=scale, groups=groups)


def optimizer_step(optimizer, barrier: bool = False, optimizer_args: dict | None = None,
                   groups=None, pin_layout: bool = True):
    reduce_gradients(optimizer, groups=groups)
    loss = optimizer.step(**(optimizer_args or {}))
    if barrier:
        mark_step()
    return loss


def add_step_closure(closure, args=(), run_async: bool = False) -> None:
    from trnsim.runtime.xla.device import DEVICE

    DEVICE.closures.append((closure, args))


def rendezvous(tag: str, payload: bytes = b"", replicas=()) -> list[bytes]:
    mark_step()
    import torch.distributed as dist

    if runtime.world_size() > 1 and dist.is_initialized():
        gathered: list = [None] * runtime.world_size()
        dist.all_gather_object(gathered, payload)
        return gathered
    return [payload]


def _to_cpu(data: Any) -> Any:
    from torch.utils._pytree import tree_map

    from trnsim.runtime.xla.lazy import XlaTensor

    return tree_map(lambda x: x.cpu() if isinstance(x, XlaTensor) else x, data)


def save(data: Any, file_or_path, master_only: bool = True, global_master: bool = False) -> None:
    """Tensors to CPU (a sync), then torch.save on the master (safetensors-free: the user's call)."""
    mark_step()
    cpu = _to_cpu(data)
    if not master_only or is_master_ordinal(local=not global_master):
        torch.save(cpu, file_or_path)


def set_rng_state(seed: int, device=None) -> None:
    torch.manual_seed(seed)


def get_rng_state(device=None) -> int:
    return int(torch.initial_seed())


def __getattr__(name: str):
    from trnsim.runtime.xla.api import missing

    return missing("torch_xla.core.xla_model", name)


_ = os  # the process environment is read through `runtime`
