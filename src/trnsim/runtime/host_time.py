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
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from trnsim.errors import InvalidArgumentError, TrnsimError
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


def link_copies_ns(instance, sizes: Sequence[int]) -> float:
    """Copies of `sizes` bytes one after another over one chip's host link of `instance`: each
    after the DMA start latency, at the link's one-way rate."""
    start = instance.chip.core.dma.start_latency_ns
    return sum(start + size / instance.host.link_bytes_per_s * 1e9 for size in sizes)


def host_time(instance, inputs, outputs) -> HostTime | None:
    """The host's share of one call of a model with `inputs` and `outputs` (`TensorSpec`s) on
    `instance` (`hardware.InstanceSpec`); None where the instance names no host."""
    if instance.host is None:
        return None
    ins = [tensor_bytes(spec) for spec in inputs]
    outs = [tensor_bytes(spec) for spec in outputs]
    return HostTime(instance.host.link_name, instance.host.dispatch_ns, sum(ins), sum(outs),
                    link_copies_ns(instance, ins), link_copies_ns(instance, outs))


def ranks_host_time(instance, inputs: Sequence[int], outputs: Sequence[int], *, ranks: int,
                    ranks_per_chip: int) -> HostTime | None:
    """The host's share of one call of a graph run on `ranks` NeuronCores, each receiving copies
    of `inputs` bytes and sending back `outputs` bytes (as a per-rank executor does: one host
    thread per rank, each copying its own rank's tensors). The `ranks_per_chip` ranks of a chip
    share its host link, their copies one after another; the chips' links run side by side.
    Bytes are the totals over every rank; None where the instance names no host."""
    if instance.host is None:
        return None
    if ranks < 1 or not 1 <= ranks_per_chip <= ranks:
        raise InvalidArgumentError(f"{ranks} ranks, {ranks_per_chip} a chip: need 1 <= ranks a "
                                   f"chip <= ranks")
    return HostTime(instance.host.link_name, instance.host.dispatch_ns,
                    ranks * sum(inputs), ranks * sum(outputs),
                    link_copies_ns(instance, list(inputs) * ranks_per_chip),
                    link_copies_ns(instance, list(outputs) * ranks_per_chip))
