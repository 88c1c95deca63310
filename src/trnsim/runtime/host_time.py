"""End-to-end latency of one model call: what the host adds around the device time.

A framework call (torch-neuronx, as the published latencies were measured) is, in order: the
host's dispatch (framework and runtime submit the execution), the copy of every input from host
memory to device memory, the device's run, the copy of every output back. Copies are DMA over the
chip's PCIe host link: each starts after the DMA start latency (the core's
`DmaSpec.start_latency_ns`) and moves its bytes at the link's one-way rate. Figures and sources:
`trnsim.hardware.host`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from trnsim.errors import TrnsimError
from trnsim.numerics import dtype as as_dtype


@dataclass(frozen=True)
class HostTime:
    """The host's share of one call (ns), beside the device time it wraps."""

    link: str  # "PCIe Gen4 x16"
    dispatch_ns: float
    input_bytes: int
    output_bytes: int
    input_copy_ns: float
    output_copy_ns: float

    @property
    def total_ns(self) -> float:
        return self.dispatch_ns + self.input_copy_ns + self.output_copy_ns

    def to_dict(self) -> dict:
        return {**asdict(self), "total_ns": self.total_ns}


def tensor_bytes(spec) -> int:
    """Bytes of one model input or output as the framework holds it (its PyTorch dtype, else
    the program's)."""
    name = str(spec.torch_dtype or spec.dtype).removeprefix("torch.")
    try:
        itemsize = as_dtype(name).itemsize
    except TrnsimError:  # a dtype only PyTorch holds (int64 token ids): numpy knows its size
        try:
            itemsize = np.dtype(name).itemsize
        except TypeError:
            itemsize = as_dtype(spec.dtype).itemsize
    return math.prod(spec.shape) * itemsize


def host_time(instance, inputs, outputs) -> HostTime | None:
    """The host's share of one call of a model with `inputs` and `outputs` (`TensorSpec`s) on
    `instance` (`hardware.InstanceSpec`); None where the instance names no host."""
    host = instance.host
    if host is None:
        return None
    start = instance.chip.core.dma.start_latency_ns

    def copies(specs) -> tuple[int, float]:
        sizes = [tensor_bytes(spec) for spec in specs]
        return sum(sizes), sum(start + size / host.link_bytes_per_s * 1e9 for size in sizes)

    input_bytes, input_ns = copies(inputs)
    output_bytes, output_ns = copies(outputs)
    return HostTime(host.link_name, host.dispatch_ns, input_bytes, output_bytes, input_ns,
                    output_ns)
