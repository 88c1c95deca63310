"""Look up cores, chips and instances by name, forgiving case; unknown names suggest close ones."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager

from trnsim.errors import UnknownNameError
from trnsim.hardware.chips import CHIPS, ChipSpec
from trnsim.hardware.cores import CORES, CoreSpec
from trnsim.hardware.instances import INSTANCES, InstanceSpec

# NKI platform targets (NEURON_PLATFORM_TARGET_OVERRIDE values) and the core each one means.
_TARGET_CORE = {"inf2": 2, "trn1": 2, "gen2": 2, "trn2": 3, "gen3": 3, "trn3": 4, "gen4": 4,
                "inf1": 1}


def _key(name: str) -> str:
    return str(name).strip().lower()


def _core_index() -> dict[str, CoreSpec]:
    index: dict[str, CoreSpec] = {}
    for spec in CORES:
        v = spec.version
        for alias in (spec.name, f"v{v}", f"nc-v{v}", f"neuroncore-v{v}", f"ncv{v}"):
            index[_key(alias)] = spec
        if spec.nki_target:
            index[_key(spec.nki_target)] = spec
    for target, version in _TARGET_CORE.items():
        index[target] = CORES[version - 1]
    return index


def _chip_index() -> dict[str, ChipSpec]:
    index = {_key(c.name): c for c in CHIPS}
    index.update({"inf1": CHIPS[0], "inf2": CHIPS[1], "trn1": CHIPS[2], "trn2": CHIPS[3],
                  "trn3": CHIPS[4]})
    return index


def _instance_index() -> dict[str, InstanceSpec]:
    index: dict[str, InstanceSpec] = {}
    for spec in INSTANCES:
        index[_key(spec.name)] = spec
        for alias in spec.aliases:
            index[_key(alias)] = spec
    return index


_CORES = _core_index()
_CHIPS = _chip_index()
_INSTANCES = _instance_index()


def core(name: str | int) -> CoreSpec:
    """A NeuronCore version by name: "v2", "NeuronCore-v3", "gen4", "trn2" (its core), or 1..4."""
    if isinstance(name, int):
        name = f"v{name}"
    try:
        return _CORES[_key(name)]
    except KeyError:
        raise UnknownNameError("NeuronCore version", name, [c.name for c in CORES]) from None


def chip(name: str) -> ChipSpec:
    try:
        return _CHIPS[_key(name)]
    except KeyError:
        raise UnknownNameError("chip", name, [c.name for c in CHIPS]) from None


def instance(name: str) -> InstanceSpec:
    try:
        return _INSTANCES[_key(name)]
    except KeyError:
        raise UnknownNameError("instance", name, [i.name for i in INSTANCES]) from None


def instance_names() -> list[str]:
    return [i.name for i in INSTANCES]


@contextmanager
def core_variant(version: int | str, **changes) -> Iterator[CoreSpec]:
    """Within the block, NeuronCore `version` (and every chip and instance built on it) has the
    given changes: ``core_variant(2, dma={"descriptor_overhead_bytes": 0})``. A dict value
    changes fields of a nested spec. For what-if studies (benchmarks/accuracy.py); not
    thread-safe."""
    global _CORES, _CHIPS, _INSTANCES
    base = core(version)
    fields = {}
    for name, value in changes.items():
        if isinstance(value, dict):
            value = dataclasses.replace(getattr(base, name), **value)
        fields[name] = value
    variant = dataclasses.replace(base, **fields)
    chips = {id(c): dataclasses.replace(c, core=variant) for c in CHIPS if c.core is base}
    saved = _CORES, _CHIPS, _INSTANCES
    _CORES = {k: variant if v is base else v for k, v in _CORES.items()}
    _CHIPS = {k: chips.get(id(v), v) for k, v in _CHIPS.items()}
    _INSTANCES = {k: dataclasses.replace(v, chip=chips[id(v.chip)]) if id(v.chip) in chips else v
                  for k, v in _INSTANCES.items()}
    try:
        yield variant
    finally:
        _CORES, _CHIPS, _INSTANCES = saved


@contextmanager
def host_variant(**changes) -> Iterator[None]:
    """Within the block, every instance's host has the given changes:
    ``host_variant(dispatch_ns=0.0)``. For what-if studies (benchmarks/accuracy.py); not
    thread-safe."""
    global _INSTANCES
    saved = _INSTANCES
    _INSTANCES = {k: dataclasses.replace(v, host=dataclasses.replace(v.host, **changes))
                  if v.host is not None else v for k, v in _INSTANCES.items()}
    try:
        yield
    finally:
        _INSTANCES = saved
