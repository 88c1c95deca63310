"""The calls the places that execute on simulated NeuronCores make: a compiled model's call,
a training graph's execution (torch-xla's lazy device), a served model's generation step.

Each is one line at its call site. A model is registered ("loaded") when it first executes; its
per-execution cost (device time, engine busy time, DMA bytes, FLOPs per core) is worked out once
from its first execution's profiles, since a model's timing does not depend on input values.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from dataclasses import dataclass, field
from typing import Any

from trnsim.errors import InvalidArgumentError, LimitExceededError, TrnsimError
from trnsim.runtime.registry.process import HBM_KINDS, ProcessRecord, current

# HBM tensor kinds (isa.TENSOR_KINDS) -> neuron-monitor's neuroncore_memory_usage kinds
HBM_KIND_OF_TENSOR = {"constant": "constants", "input": "tensors", "output": "tensors",
                      "internal": "model_shared_scratchpad"}


@dataclass
class Run:
    """What a model's call tells the registry about the execution it just ran."""

    profiles: list | None = None  # sim Profiles of the execution (rank-major, physical-minor)


@dataclass
class _Loaded:
    """A model's registration in this process: one model id per copy, and its cost."""

    record: ProcessRecord
    copies: list[tuple[int, list[int]]]  # (model id, cores) per copy, executed in turn
    cost: tuple[float, dict] | None = None  # device ns, per-core-position cost
    calls: int = 0
    finalizers: list = field(default_factory=list)


@contextlib.contextmanager
def model_execution(model: Any):
    """Count one call of a `CompiledModel` (the `with` body runs it and fills `Run.profiles`)."""
    record = current()
    run = Run()
    try:
        loaded = _loaded(model, record) if record is not None else None
    except TrnsimError:  # e.g. cores it cannot be given: the call itself will say so
        loaded = None
    if loaded is None or not loaded.copies:
        yield run
        return
    model_id, cores = loaded.copies[loaded.calls % len(loaded.copies)]
    loaded.calls += 1
    started = record.begin()
    try:
        yield run
    except (InvalidArgumentError, LimitExceededError):  # the inputs were refused
        record.failed(model_id, started, status="incorrect_input", error="generic")
        raise
    except BaseException as error:
        record.failed(model_id, started, status="completed_with_err",
                      error="runtime" if isinstance(error, TrnsimError) else "generic")
        raise
    if loaded.cost is None:
        loaded.cost = _cost(model.plan, run.profiles or model.rank_timings())
    device_ns, by_position = loaded.cost
    record.executed(model_id, started, device_ns=device_ns,
                    per_core={core: by_position.get(i) for i, core in enumerate(cores)})


def _loaded(model: Any, record: ProcessRecord) -> _Loaded:
    loaded = model.__dict__.get("_registry_entry")
    if loaded is not None and loaded.record is record:
        return loaded
    plan = model.plan
    positions = logical_positions(plan)
    hbm = {}  # per logical core of a copy: its first physical core's program
    for core, position in zip(plan.cores, positions, strict=True):
        hbm.setdefault(position, program_hbm(plan.program(core.program)))
    copies = []
    for cores in _copies(model, len(hbm)):
        model_id = record.load_model(name=model.name, kind="inference", instance=model.instance,
                                     cores=cores, hbm_by_core={c: hbm[i] for i, c in enumerate(cores)})
        copies.append((model_id, cores))
    loaded = _Loaded(record, copies)
    for model_id, _ in copies:  # unloaded when the model is garbage-collected
        loaded.finalizers.append(weakref.finalize(model, record.unload_model, model_id))
    model.__dict__["_registry_entry"] = loaded
    return loaded


def logical_positions(plan: Any) -> list[int]:
    """Each planned core's logical NeuronCore within one copy (0, 1, ...): the physical cores of
    a logical core (LNC=2) share one."""
    order: dict[tuple[int, int], int] = {}
    return [order.setdefault((c.slot.chip, c.slot.group), len(order)) for c in plan.cores]


def _copies(model: Any, per: int) -> list[list[int]]:
    """The cores of each copy (`per` logical cores each: its ranks or stages); copies take the
    placed cores in turn, as the runtime places them round-robin."""
    placed = list(dict.fromkeys(model.placement or []))
    if len(placed) < per:
        try:
            visible = model.visible_cores()
        except TrnsimError:
            visible = list(range(per))
        placed = (placed + [c for c in visible if c not in placed])[:per]
    return [placed[i:i + per] for i in range(0, len(placed) - per + 1, per)]


def program_hbm(program: Any) -> dict[str, int]:
    """A program's HBM by neuron-monitor's kinds. Tensors the compiler keeps in SBUF take no
    HBM; model code and runtime memory are not modelled (0)."""
    used = dict.fromkeys(HBM_KINDS, 0)
    for tensor in program.tensors.values():
        if not getattr(tensor, "on_chip", False):
            used[HBM_KIND_OF_TENSOR.get(tensor.kind, "model_shared_scratchpad")] += tensor.nbytes
    return used


def _cost(plan: Any, profiles: list) -> tuple[float, dict]:
    """Device time of one execution (the stages one after another, each as long as its slowest
    core), and per logical core of the copy: engine busy ns (averaged over its physical cores),
    DMA bytes and FLOPs."""
    device_ns = sum(max(profiles[i].total_ns for i in stage) for stage in plan.stages())
    positions = logical_positions(plan)
    physical = {p: positions.count(p) for p in positions}
    costs: dict[int, dict] = {}
    for position, profile in zip(positions, profiles, strict=True):
        summary = profile.summary
        cost = costs.setdefault(position, {"engine_busy_ns": {}, "dma_bytes": 0, "flops": 0})
        busy = cost["engine_busy_ns"]
        for engine, ns in summary.engine_active_ns.items():  # "dma": any queue in flight
            busy[engine] = busy.get(engine, 0.0) + ns / physical[position]
        cost["dma_bytes"] += summary.dma_bytes
        cost["flops"] += summary.tensor_flops
    return device_ns, costs


# --- training graphs (trnsim.runtime.xla) -----------------------------------------------------
@contextlib.contextmanager
def training_step(executor: Any, graph: Any):
    """Count the execution of a lazy-device graph that the `with` body runs (a training step at
    mark_step, or a graph cut by reading a value) on this rank's NeuronCore (LOCAL_RANK, as
    torchrun assigns them)."""
    record = current()
    if record is None:
        yield
        return
    started = record.begin()
    try:
        yield
    except BaseException:
        record.failed(-1, started, status="completed_with_err", error="runtime")
        raise
    compiled = graph.compiled
    loaded = executor.__dict__.setdefault("_registry_graphs", {})
    key = (id(record), graph.key)
    if key not in loaded:
        core = int(os.environ.get("LOCAL_RANK", "0") or 0)
        loaded[key] = (record.load_model(name=f"{graph.why} graph {graph.key[:8]}", kind="training",
                                         instance=executor.instance.name, cores=[core],
                                         hbm_by_core={core: _training_hbm(getattr(graph, "hbm", None))}),
                       core)
    model_id, core = loaded[key]
    busy = {engine: share * compiled.device_ns for engine, share in compiled.engine_utilisation.items()}
    record.executed(model_id, started, device_ns=compiled.device_ns + getattr(graph, "collective_ns", 0.0),
                    per_core={core: {"engine_busy_ns": busy, "flops": compiled.flops}})


def _training_hbm(hbm: Any) -> dict[str, int]:
    """A training graph's HBM (runtime.xla.memory.HbmUse) by neuron-monitor's kinds: weights are
    constants, gradients and optimizer state tensors, activations the shared scratchpad."""
    if hbm is None:
        return {}
    return {"constants": hbm.weights, "tensors": hbm.gradients + hbm.optimizer_state,
            "model_shared_scratchpad": hbm.activations}


# --- served models (trnsim.perf.serving.engine) -----------------------------------------------
def serving_model(name: str, instance: str, cores: list[int]) -> int | None:
    """Register a model being served; returns its id for `serving_step` (None: not registered)."""
    record = current()
    if record is None:
        return None
    return record.load_model(name=name, kind="serving", instance=instance, cores=cores,
                             hbm_by_core={})


@contextlib.contextmanager
def serving_step(model_id: int | None, device_ms: float):
    """Count the generation step the `with` body runs (a prefill, or a decode of the running
    batch) of a served model, `device_ms` of simulated device time."""
    record = current()
    if record is None or model_id is None:
        yield
        return
    started = record.begin()
    try:
        yield
    except BaseException:
        record.failed(model_id, started, status="completed_with_err", error="generic")
        raise
    record.executed(model_id, started, device_ns=device_ms * 1e6)
