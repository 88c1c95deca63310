"""The Neuron devices an instance exposes, as neuron-ls enumerates them."""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.errors import UnsupportedError
from trnsim.hardware.instances import InstanceSpec


@dataclass(frozen=True)
class NeuronDevice:
    index: int
    nc_count: int  # logical NeuronCores on the device
    neuroncore_ids: tuple[int, ...]  # logical core ids, numbered across the instance
    memory_bytes: int
    connected_to: tuple[int, ...]
    logical_neuroncore_config: int


def resolve_lnc(spec: InstanceSpec, lnc: int | None) -> int:
    """The logical-NeuronCore size to use: the chip's default, or `lnc` if the chip supports it."""
    if lnc is None:
        return spec.chip.default_lnc
    if lnc not in spec.chip.lnc_options:
        options = ", ".join(str(o) for o in spec.chip.lnc_options)
        raise UnsupportedError(f"logical NeuronCore config {lnc} is not supported on {spec.name} "
                               f"({spec.chip.name} supports {options})")
    return lnc


def devices(spec: InstanceSpec, lnc: int | None = None) -> list[NeuronDevice]:
    lnc = resolve_lnc(spec, lnc)
    per_device = spec.chip.logical_cores(lnc)
    out = []
    for d in range(spec.chips):
        ids = tuple(range(d * per_device, (d + 1) * per_device))
        out.append(NeuronDevice(index=d, nc_count=per_device, neuroncore_ids=ids,
                                memory_bytes=spec.chip.memory_bytes,
                                connected_to=tuple(spec.topology.connected_devices(d)),
                                logical_neuroncore_config=lnc))
    return out
