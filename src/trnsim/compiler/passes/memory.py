"""HBM planning: weights resident, activations packed by lifetime, and the device-size check.

Weights stay resident for the model's life (one region). Activations get offsets in a second
region by a linear scan in execution order: a buffer is allocated when its node runs and freed
after its last reader (first fit, neighbouring holes merged), so activations whose lifetimes do
not overlap share bytes. Views the layout pass marked "alias"/"dma" read their base in place and
only extend its lifetime; "copy" views and every kernel output get their own buffer.

The plan is checked against the device memory of the NeuronCores the model runs on: a model
that cannot fit raises `ModelTooLargeError` naming the model's bytes and the cores' share.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trnsim.compiler.errors import ModelTooLargeError
from trnsim.compiler.ir import Graph, Node

ALIGN_BYTES = 64  # ASSUMPTION: allocation granularity (one DMA descriptor line); only packs
NO_BUFFER = ("scalar", "constant")


@dataclass(frozen=True)
class MemoryPlan:
    """Byte offsets of every buffer in the weight and activation regions, and the totals."""

    weight_bytes: int
    activation_bytes: int  # peak of the activation region (after reuse)
    naive_activation_bytes: int  # what one buffer per value would need (no reuse)
    budget_bytes: int | None  # device memory of the model's NeuronCores (None: not checked)
    weights: dict[str, tuple[int, int]] = field(repr=False)  # constant ref -> (offset, bytes)
    activations: dict[str, tuple[int, int]] = field(repr=False)  # node name -> (offset, bytes)

    @property
    def total_bytes(self) -> int:
        return self.weight_bytes + self.activation_bytes

    def summary(self) -> str:
        budget = f" of {self.budget_bytes / 2**30:.2f} GiB" if self.budget_bytes else ""
        return (f"HBM: {self.total_bytes / 2**20:.1f} MiB{budget} = weights "
                f"{self.weight_bytes / 2**20:.1f} MiB + activations "
                f"{self.activation_bytes / 2**20:.1f} MiB (naive "
                f"{self.naive_activation_bytes / 2**20:.1f} MiB)")


def _align(n: int) -> int:
    return -(-n // ALIGN_BYTES) * ALIGN_BYTES


def device_budget(spec, cores: int = 1, lnc: int | None = None) -> tuple[int, str]:
    """Bytes of HBM owned by `cores` logical NeuronCores of instance `spec` (an InstanceSpec, or
    its name) as an equal share."""
    if isinstance(spec, str):
        from trnsim.hardware import instance as lookup

        spec = lookup(spec)
    chip = spec.chip
    lnc = chip.default_lnc if lnc is None else lnc
    per_physical = chip.memory_bytes // chip.cores
    return per_physical * lnc * cores, spec.name


def plan_memory(graph: Graph, instance=None, cores: int = 1, lnc: int | None = None) -> Graph:
    """Attach a `MemoryPlan` (graph.meta["memory_plan"]); raise if it cannot fit the device."""
    weights: dict[str, tuple[int, int]] = {}
    offset = 0
    for node in graph.nodes:
        if node.op == "constant" and node.attrs["ref"] not in weights:
            size = graph.constant(node).nbytes
            weights[node.attrs["ref"]] = (offset, size)
            offset += _align(size)
    weight_bytes = offset
    activations, peak, naive = _pack_activations(graph)
    budget, name = device_budget(instance, cores, lnc) if instance else (None, "")
    plan = MemoryPlan(weight_bytes, peak, naive, budget, weights, activations)
    if budget is not None and plan.total_bytes > budget:
        raise ModelTooLargeError(plan.total_bytes, budget, name, weights=weight_bytes,
                                 activations=peak, cores=cores)
    out = _copy(graph)
    out.meta["memory_plan"] = plan
    return out


def tensor_parallel_degree(graph: Graph, options) -> int:
    """Ranks per model copy: `options.tensor_parallel` if given; else 1 when the model fits one
    core's share of HBM, else the fewest ranks (a divisor of `options.cores`) whose rank-local
    graph's weights and activations fit, else all `cores` (and `plan_memory` then names the
    bytes that do not fit)."""
    from trnsim.compiler.passes.tensor_parallel import tensor_parallel

    if options.tensor_parallel is not None:
        return options.tensor_parallel
    budget, _ = device_budget(options.spec, 1, options.lnc)
    for degree in range(1, options.cores + 1):
        if options.cores % degree:
            continue
        split = tensor_parallel(graph, degree)  # one walk: cheap next to lowering
        if split.weight_bytes() + _pack_activations(split)[1] <= budget:
            return degree
    return options.cores


def _copy(graph: Graph) -> Graph:
    from trnsim.compiler.ir import Rewriter
    rw = Rewriter(graph)
    for node in graph.nodes:
        rw.keep(node)
    return rw.finish(dce=False)


def _base(node: Node) -> Node:
    while node.op in ("reshape", "permute", "expand", "slice") and \
            node.attrs.get("fold", "alias") != "copy":
        node = node.inputs[0]
    return node


def _pack_activations(graph: Graph) -> tuple[dict[str, tuple[int, int]], int, int]:
    order = {id(n): i for i, n in enumerate(graph.nodes)}
    end = len(graph.nodes)
    last: dict[int, int] = {}
    owners: set[int] = set()
    for node in graph.nodes:
        if node.op in NO_BUFFER or _base(node) is not node:
            continue
        owners.add(id(node))
        last[id(node)] = order[id(node)]
    for node in graph.nodes:
        for x in node.inputs:
            b = _base(x)
            if id(b) in last:
                last[id(b)] = max(last[id(b)], order[id(node)])
    for out in graph.outputs:
        b = _base(out)
        if id(b) in last:
            last[id(b)] = end
    free: list[tuple[int, int]] = []  # (offset, size) holes, sorted by offset
    top = 0
    placed: dict[str, tuple[int, int]] = {}
    expiring: dict[int, list[Node]] = {}
    naive = 0
    for i, node in enumerate(graph.nodes):
        for dead in expiring.pop(i - 1, []):
            free = _release(free, placed[dead.name])
        if id(node) not in owners:
            continue
        size = _align(max(node.nbytes, 1))
        naive += size
        spot = next((k for k, (_, s) in enumerate(free) if s >= size), None)
        if spot is None:
            placed[node.name] = (top, size)
            top += size
        else:
            off, s = free.pop(spot)
            placed[node.name] = (off, size)
            if s > size:
                free.insert(spot, (off + size, s - size))
        expiring.setdefault(last[id(node)], []).append(node)
    return placed, top, naive


def _release(free: list[tuple[int, int]], block: tuple[int, int]) -> list[tuple[int, int]]:
    holes = sorted([*free, block])
    merged: list[tuple[int, int]] = []
    for off, size in holes:
        if merged and merged[-1][0] + merged[-1][1] == off:
            merged[-1] = (merged[-1][0], merged[-1][1] + size)
        else:
            merged.append((off, size))
    return merged
