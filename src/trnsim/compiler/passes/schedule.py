"""Scheduling: run kernels in graph order, and start each weight's DMA one kernel early.

Weights live in HBM; a kernel needs its weights in SBUF. Loading kernel i+1's first-use
weights while kernel i computes hides that DMA behind compute (the overlap Neuron's scheduler
provides). This pass records the intent: each kernel node gets ``prefetch``, the constant refs
whose loads should start during it; ``graph.meta["schedule"]`` lists kernel names in order. The
lowering does not act on ``prefetch``: a weight's DMA has no producer, so the simulator starts it
as soon as its queue and its SBUF buffer allow (the buffer's previous readers done), and that is
where the overlap, and its limit, come from.
"""

from __future__ import annotations

from trnsim.compiler.ir import Graph, Node, Rewriter

# How many kernels ahead weight loads are issued (1: the next kernel's weights only).
PREFETCH_DISTANCE = 1


def _weights(node: Node) -> list[str]:
    refs: list[str] = []
    for x in node.inputs:
        while x.op in ("reshape", "permute", "expand", "slice"):
            x = x.inputs[0]
        if x.op == "constant" and x.attrs["ref"] not in refs:
            refs.append(x.attrs["ref"])
    return refs


def schedule(graph: Graph) -> Graph:
    kernels = [n for n in graph.nodes if n.op.startswith("k.")]
    loaded: set[str] = set()
    first_use: dict[int, list[str]] = {}
    for node in kernels:
        fresh = [r for r in _weights(node) if r not in loaded]
        loaded.update(fresh)
        first_use[id(node)] = fresh
    prefetch: dict[int, tuple[str, ...]] = {}
    for i, node in enumerate(kernels):
        ahead = kernels[i + 1:i + 1 + PREFETCH_DISTANCE]
        prefetch[id(node)] = tuple(r for k in ahead for r in first_use[id(k)])
    rw = Rewriter(graph)
    for node in graph.nodes:
        if id(node) in prefetch:
            rw.keep(node, attrs={**node.attrs, "prefetch": prefetch[id(node)]})
        else:
            rw.keep(node)
    out = rw.finish(dce=False)
    out.meta["schedule"] = [n.name for n in out.nodes if n.op.startswith("k.")]
    return out
