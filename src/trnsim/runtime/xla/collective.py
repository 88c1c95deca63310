"""Collectives between data-parallel ranks: numbers by gloo, time by trnsim's fabric model.

`all_reduce` reduces the values of real processes through `torch.distributed` (gloo on CPU),
coalescing a list into one buffer, and records the reduction in the lazy graph as its scale
(the elementwise part of the op). The time of the all-reduce itself is simulated by
`trnsim.collectives` on the instance's fabric for the job's rank count, in the graph's
collectives phase.

Overlap with the backward: `xm.optimizer_step` calls `reduce_gradients` once `loss.backward()`
has returned, but the ops are only recorded; the device runs the compiled graph, in which an
all-reduce waits only for the gradients it reduces. torch-xla buckets the gradients (reversed,
last layer first, `ALLREDUCE_GRADIENTS_BUCKET_SIZE_MB`, which torch-neuronx sets to 50) "so
that allreduce [can] trigger as soon as the bucket fills up and overlap with backward pass".
`overlap` replays that on the simulated timeline: each bucket's all-reduce starts when the
last of its gradients is written (their times come from the compiled program's profile) and
the fabric is free; what the step waits for is the part that outlasts the backward.
"""

from __future__ import annotations

import functools
import os

import torch

from trnsim.runtime.xla.lazy import PHASE, XlaTensor

_REDUCE = {"sum": "SUM", "mul": "PRODUCT", "min": "MIN", "max": "MAX", "and": "BAND",
           "or": "BOR"}


SIMULATED_WORLD_ENV = "TRNSIM_XLA_SIMULATED_WORLD"


def simulated_world() -> int | None:
    """Ranks a one-process run stands for (timing mode: one rank simulated, its collectives
    timed for this many identical ranks), or None for a real torchrun job."""
    text = os.environ.get(SIMULATED_WORLD_ENV)
    return int(text) if text else None


def world_size() -> int:
    return simulated_world() or int(os.environ.get("WORLD_SIZE", "1"))


def instance():
    from trnsim import hardware

    return hardware.instance(os.environ.get("TRNSIM_INSTANCE", "trn1.2xlarge"))


def all_reduce(reduce_type: str, inputs, scale: float = 1.0, groups=None):
    from trnsim.errors import UnsupportedError
    from trnsim.runtime.xla.device import DEVICE
    from trnsim.runtime.xla.lazy import user_source

    if reduce_type not in _REDUCE:
        raise UnsupportedError(f"all_reduce type {reduce_type!r}; known: {', '.join(_REDUCE)}",
                               source=user_source(3))
    if groups:
        raise UnsupportedError("all_reduce with replica groups", source=user_source(3))
    single = isinstance(inputs, torch.Tensor)
    tensors = [inputs] if single else list(inputs)
    world = world_size()
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    if world > 1 and simulated_world() is None:
        import torch.distributed as dist

        values = [t.value if isinstance(t, XlaTensor) else t for t in tensors]
        flat = torch.cat([v.reshape(-1).to(torch.float32) for v in values]) if values else None
        if flat is not None:
            dist.all_reduce(flat, op=getattr(dist.ReduceOp, _REDUCE[reduce_type]))
            offset = 0
            for v in values:
                v.copy_(flat[offset:offset + v.numel()].view_as(v))
                offset += v.numel()
    PHASE["collectives"] += 1
    try:
        DEVICE.collective("all_reduce", nbytes, world,
                          [t.ir for t in tensors if isinstance(t, XlaTensor)])
        with torch.no_grad():
            outs = [t.mul_(scale) if not single else t * scale for t in tensors]
    finally:
        PHASE["collectives"] -= 1
    return outs[0] if single else tensors


@functools.cache
def all_reduce_ns(nbytes: int, ranks: int, instance_name: str) -> float:
    """Simulated time of one all-reduce of `nbytes` over `ranks` NeuronCores of the instance."""
    if ranks <= 1 or nbytes == 0:
        return 0.0
    from trnsim import hardware
    from trnsim.collectives.api import iteration_time_ns
    from trnsim.collectives.engine import Fabric
    from trnsim.collectives.records import Collective

    spec = hardware.instance(instance_name)
    nodes = max(1, -(-ranks // spec.logical_cores()))
    fabric = Fabric(spec, nodes)
    ns, _ = iteration_time_ns(fabric, Collective("all_reduce", int(nbytes), "float32",
                                                 ranks, None, None, None, "sum"))
    return float(ns)


def overlap(collectives: list[tuple[float, float]], grads_ready_ns: float
            ) -> tuple[float, list[tuple[float, float]]]:
    """(ns the step waits for collectives beyond its compute, [(start, end)] per collective).

    `collectives`: (ready_ns, duration_ns) in issue order: one at a time on the fabric, each
    from when its inputs are written. `grads_ready_ns`: when the last reduced gradient is
    written; the rest of the graph (the optimizer) waits for every collective to end, so the
    step is max(last gradient, last collective end) + the compute after the last gradient."""
    spans, free = [], 0.0
    for ready, duration in collectives:
        start = max(ready, free)
        free = start + duration
        spans.append((start, free))
    return max(0.0, free - grads_ready_ns), spans
