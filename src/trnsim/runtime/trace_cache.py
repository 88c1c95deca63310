"""The warm-trace cache: a second `trnsim.trace` of the same model skips torch.export and lowering.

The compile cache (`trnsim.compiler.cache`) is keyed on the captured graph, so it cannot spare
the capture that makes the graph (torch.export: about half of a warm BERT-large trace). This
cache is keyed on what decides the capture instead, read from the live model without running
it: the module tree (each module's class, its plain attributes and training flag), the source
files defining those classes, a Hugging Face config, every parameter's and buffer's name, shape,
dtype and device, the values of buffers and of small parameters, the input signature (nesting,
shapes, dtypes, plain values), the compile options, the visible cores, and the torch,
transformers and trnsim code that captures and compiles. A hit rebuilds the plan's layout
(inputs, outputs, structures, cores, kernel calls, the compile cache's key, which also keys the
cached report) from JSON; its programs are compiled from the live model the first time something
needs them (a functional call, a profile, a report not cached yet), and the plan then becomes
that compile's plan in full.

ASSUMPTION: the values of large parameters (weights, more than `HASHED_PARAMETER_ELEMENTS`
elements) shape no program: passes read constant values only for masks, scalars and small
folded tensors. Models with hooks, a work directory, IR dumps, or inputs other than tensors and
plain values are not cached.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from pathlib import Path
from typing import Any

from trnsim.compiler.cache import COMPILE_LOCK, cache_dir, code_digest, write_json

HASHED_PARAMETER_ELEMENTS = 65536  # parameters up to this size are keyed by value (masks, scalars)
# trnsim code whose edit may change a traced plan
TRACE_CODE = ("compiler", "kernels", "nki", "isa", "hardware", "numerics", "sim", "collectives",
              "runtime/compile.py", "runtime/trace_cache.py")
FORMAT = 1


def trace_key(model: Any, example_inputs: Any, kwargs: dict | None, options, visible: list[int],
              workdir: str | None) -> str | None:
    """The cache key of a trace, or None when this trace is not cached (module docstring)."""
    if workdir or options.dump_after:
        return None
    try:
        import torch
    except ImportError:
        return None
    if not isinstance(model, torch.nn.Module):
        return None
    h = hashlib.sha256()
    parts: list = [FORMAT, torch.__version__, _transformers_version(), code_digest(TRACE_CODE),
                   options.key(), list(visible), type(model).__module__, type(model).__qualname__]
    files: set[str] = set()
    for name, module in model.named_modules():
        if module._forward_hooks or module._forward_pre_hooks or getattr(
                module, "_forward_hooks_with_kwargs", None):
            return None
        cls = type(module)
        parts.append((name, cls.__module__, cls.__qualname__, module.training,
                      _plain_attributes(module)))
        for klass in cls.__mro__:
            if klass.__module__.startswith("torch."):
                break
            source = _source_file(klass)
            if source:
                files.add(source)
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "to_json_string"):
        parts.append(config.to_json_string())
    for name, tensor in model.named_parameters():
        parts.append(("p", name, *_describe(tensor)))
        if tensor.numel() <= HASHED_PARAMETER_ELEMENTS:
            _update_values(h, tensor)
    for name, tensor in model.named_buffers():
        parts.append(("b", name, *_describe(tensor)))
        _update_values(h, tensor)
    signature = _signature((example_inputs, kwargs or {}), torch)
    if signature is None:
        return None
    parts.append(signature)
    for source in sorted(files):
        try:
            parts.append((source, hashlib.sha256(Path(source).read_bytes()).hexdigest()))
        except OSError:
            return None
    h.update(json.dumps(parts, default=repr).encode())
    return h.hexdigest()[:32]


def load(key: str, compile_now) -> Any | None:
    """The cached plan of `key` (programs compiled by `compile_now()` when first needed), or
    None."""
    from trnsim.compiler.lowering import KernelCall
    from trnsim.compiler.structure import Structure
    from trnsim.sim.execution_plan import ExecutionPlan, PlanFabric, PlannedCore, TensorSpec
    from trnsim.sim.sync import CoreSlot

    path = _path(key)
    if path is None or not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
        layout = data["plan"]
        fabric = layout["fabric"]
        plan = ExecutionPlan(
            name=layout["name"], instance=layout["instance"], programs=[],
            cores=[PlannedCore(program=c["program"], slot=CoreSlot(**c["slot"]), shard=c["shard"],
                               stage=c["stage"], inputs=tuple(tuple(b) for b in c["inputs"]),
                               outputs=tuple(tuple(b) for b in c["outputs"]))
                   for c in layout["cores"]],
            inputs=[TensorSpec(**{**s, "shape": tuple(s["shape"])}) for s in layout["inputs"]],
            outputs=[TensorSpec(**{**s, "shape": tuple(s["shape"])}) for s in layout["outputs"]],
            shared=tuple(layout["shared"]), lnc=layout["lnc"],
            fabric=PlanFabric(fabric["instance"], fabric["lnc"], tuple(fabric["endpoints"]),
                              fabric["nodes"]) if fabric else None,
            input_structure=_structure(layout["input_structure"], Structure),
            output_structure=_structure(layout["output_structure"], Structure),
            kernels=[KernelCall(**k) for k in layout["kernels"]], placement=layout["placement"])
        plan.meta.update(data["meta"])
    except (OSError, KeyError, TypeError, ValueError):
        return None  # a stale or unreadable entry: trace again and overwrite it
    compiled: list = []

    def program(index: int):
        with COMPILE_LOCK:
            if not compiled:  # compile the live model once; the plan becomes that compile's
                real = compile_now()
                compiled.append(real)
                meta = {**plan.meta, **real.meta, "cache_hit": True, "trace_cache_hit": True}
                plan.__dict__.update(real.__dict__)
                plan.meta = meta
        return plan.program(index)

    plan.programs = [lambda i=i: program(i) for i in range(layout["programs"])]
    plan.meta.update(cache_hit=True, trace_cache_hit=True, timings={})
    return plan


def store(key: str, plan) -> None:
    """Cache `plan`'s layout under `key` (only plans whose report the compile cache keys)."""
    from dataclasses import asdict

    path = _path(key)
    meta = plan.meta
    if path is None or meta.get("cache_key") is None or not all(
            _rebuilds_alike(s) for s in (plan.input_structure, plan.output_structure)):
        return
    layout = {
        "name": plan.name, "instance": plan.instance, "programs": len(plan.programs),
        "cores": [{"program": c.program, "slot": asdict(c.slot), "shard": c.shard,
                   "stage": c.stage, "inputs": [list(b) for b in c.inputs],
                   "outputs": [list(b) for b in c.outputs]} for c in plan.cores],
        "inputs": [asdict(s) for s in plan.inputs], "outputs": [asdict(s) for s in plan.outputs],
        "shared": list(plan.shared), "lnc": plan.lnc,
        "fabric": asdict(plan.fabric) if plan.fabric is not None else None,
        "input_structure": plan.input_structure.to_json() if plan.input_structure else None,
        "output_structure": plan.output_structure.to_json() if plan.output_structure else None,
        "kernels": [vars(k) for k in plan.kernels], "placement": list(plan.placement)}
    kept = {k: meta[k] for k in ("cache_key", "weight_bytes", "meta_tensors", "ignored_flags")
            if k in meta}
    write_json(path, {"plan": layout, "meta": kept})


def _path(key: str) -> Path | None:
    root = cache_dir()
    return root / f"{key}.trace.json" if root else None


def _structure(data, structure_cls):
    return structure_cls.from_json(data) if data else None


def _rebuilds_alike(structure) -> bool:
    """Does the structure come back from JSON giving the same output classes? (A ModelOutput
    class outside trnsim's fixed table is stored as the base class: such a model is not cached,
    so a warm trace returns what a cold one does.)"""
    from trnsim.compiler.structure import output_type
    from trnsim.errors import TrnsimError

    if structure is None:
        return True
    if structure.kind == "model_output" and structure.cls is not None:
        try:
            if output_type(structure.to_json()["type"]) is not structure.cls:
                return False
        except (TrnsimError, KeyError):
            return False
    return all(_rebuilds_alike(c) for c in structure.children)


def _transformers_version() -> str | None:
    import sys

    module = sys.modules.get("transformers")
    return getattr(module, "__version__", None)


def _source_file(klass: type) -> str | None:
    try:
        return inspect.getsourcefile(klass)
    except (TypeError, OSError):
        return None


_PLAIN = (bool, int, float, str, type(None))


def _plain_attributes(module) -> list:
    """A module's own plain attributes (a scale, a flag, a mode string): forward may read them."""
    out = []
    for name, value in sorted(vars(module).items()):
        if name.startswith("_") or name == "training":
            continue
        if isinstance(value, _PLAIN) or (isinstance(value, (tuple, list))
                                         and all(isinstance(v, _PLAIN) for v in value)):
            out.append((name, repr(value)))
    return out


def _describe(tensor) -> tuple:
    return tuple(tensor.shape), str(tensor.dtype), tensor.device.type, tensor.requires_grad


def _update_values(h, tensor) -> None:
    import torch

    if tensor.device.type == "meta" or not tensor.numel():
        return  # no values (a meta buffer reads as zeros when traced)
    data = tensor.detach().cpu().contiguous().reshape(-1)
    h.update(data.view(torch.uint8).numpy().tobytes())


def _signature(value: Any, torch) -> Any:
    """The input signature: nesting, tensor shapes and dtypes, plain values; None if something
    else is passed (not cached)."""
    if isinstance(value, torch.Tensor):
        return ["tensor", list(value.shape), str(value.dtype), value.device.type]
    if isinstance(value, _PLAIN):
        return ["value", type(value).__name__, repr(value)]
    if isinstance(value, (tuple, list)):
        items = [_signature(v, torch) for v in value]
        return None if any(i is None for i in items) else [type(value).__name__, items]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            return None
        items = [[k, _signature(v, torch)] for k, v in value.items()]
        return None if any(i[1] is None for i in items) else ["dict", items]
    return None
