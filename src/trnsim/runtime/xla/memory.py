"""HBM use of a training step on one NeuronCore: weights, gradients, optimizer state,
activations. Checked before a graph is compiled: a step that does not fit is an error naming
each part, as the device's allocator would fail ("Failed to allocate ... on ND 0:NC 0").

Activations are the forward values the backward of the same graph reads (what autograd saved),
counted once each; a graph without a backward keeps none.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch

from trnsim.errors import LimitExceededError
from trnsim.runtime.xla.graph import StepGraph
from trnsim.runtime.xla.lazy import LIVE, XlaTensor

OPTIMIZERS: weakref.WeakSet = weakref.WeakSet()  # filled by the optimizer step hook (`modes`)
GiB = 1 << 30


class HbmOverflowError(LimitExceededError):
    """A training step needs more HBM than one NeuronCore owns."""


@dataclass(frozen=True)
class HbmUse:
    weights: int
    gradients: int
    optimizer_state: int
    activations: int
    capacity: int  # bytes of HBM one NeuronCore owns

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer_state + self.activations

    def parts(self) -> str:
        return (f"weights {_gib(self.weights)} + gradients {_gib(self.gradients)} + optimizer "
                f"state {_gib(self.optimizer_state)} + activations {_gib(self.activations)}")

    def to_dict(self) -> dict:
        return {"weights_bytes": self.weights, "gradients_bytes": self.gradients,
                "optimizer_state_bytes": self.optimizer_state,
                "activations_bytes": self.activations, "total_bytes": self.total,
                "capacity_bytes": self.capacity}


def _gib(n: int) -> str:
    return f"{n / GiB:.2f} GiB" if n >= GiB / 100 else f"{n / (1 << 20):.2f} MiB"


def _bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def core_capacity(instance) -> int:
    """HBM one NeuronCore owns: the chip's memory shared by its (logical) cores."""
    return instance.chip.memory_bytes // instance.chip.logical_cores()


def activation_bytes(graph: StepGraph) -> int:
    from trnsim.runtime.xla.executor import phase_of

    saved: dict[int, int] = {}
    for node in graph.nodes:
        if phase_of(node.source) != "backward":
            continue
        for arg in _values(node):
            producer = arg.node
            if producer is not None and phase_of(producer.source) == "forward":
                saved[arg.uid] = _numel(arg.shape) * _itemsize(arg.dtype)
    return sum(saved.values())


def _values(node):
    from torch.utils._pytree import tree_flatten

    from trnsim.runtime.xla.lazy import IrValue

    return [v for v in tree_flatten((node.args, node.kwargs))[0] if isinstance(v, IrValue)]


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def hbm_use(graph: StepGraph, instance, params: list | None = None) -> HbmUse:
    """The step's HBM use from the live device tensors (parameters are the tensors nn.Module
    registered; state is what the optimizers that stepped hold)."""
    params = params if params is not None else [t for t in list(LIVE)
                                                if t.requires_grad and t.grad_fn is None]
    # a parameter an optimizer stepped had a gradient buffer during the step, even if the
    # script freed it (`zero_grad()` sets .grad to None) before `mark_step` cut the graph
    stepped = {id(q) for opt in list(OPTIMIZERS) for group in opt.param_groups
               for q in group["params"]}
    seen: set[int] = set()
    weights = grads = 0
    for p in params:
        if id(p) in seen:
            continue
        seen.add(id(p))
        weights += _bytes(p)
        if p.grad is not None:
            grads += _bytes(p.grad)
        elif id(p) in stepped:
            grads += _bytes(p)
    state = 0
    for opt in list(OPTIMIZERS):
        for per_param in opt.state.values():
            for v in per_param.values():
                if isinstance(v, XlaTensor):
                    state += _bytes(v)
    return HbmUse(weights, grads, state, activation_bytes(graph), core_capacity(instance))


def check_fits(use: HbmUse, instance, source: str | None) -> None:
    if use.total > use.capacity:
        raise HbmOverflowError("training step HBM", f"{_gib(use.total)} ({use.parts()})",
                               _gib(use.capacity),
                               context=f"HBM of one NeuronCore on {instance.name}; use a "
                                       "smaller micro-batch, bf16, or more cores", source=source)
