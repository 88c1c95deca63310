"""Collective timings for a layout, from trnsim's fabric model (`trnsim.collectives`).

Ranks are logical NeuronCores numbered node by node; a layout places them as Megatron and
NeuronX Distributed do: tensor-parallel ranks innermost (adjacent cores), then data-parallel,
then pipeline stages outermost. rank = tp_rank + TP x (dp_rank + DP x pp_rank).

Each collective is simulated with every group that runs it at the same moment (all TP groups
of a node share its NeuronLink; all DP groups of a stage share the EFA of their nodes), so
contention is the network model's, not an assumed factor. Times are cached in memory and on
disk (JSON beside the layer timings), keyed on the instance's fabric and the collective.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass

from trnsim.errors import LimitExceededError

# Nodes one simulated collective may span: the network model's cost grows with endpoints; past
# this, a data-parallel collective is simulated on this many nodes' worth of its groups and
# the rest of the ring's hops are added (see `dp_collective_ns`).
MAX_SIMULATED_NODES = 64


@dataclass(frozen=True)
class Placement:
    instance: str
    cores_per_node: int
    lnc: int
    tp: int
    dp: int
    pp: int

    def rank(self, tp_rank: int, dp_rank: int, pp_rank: int) -> int:
        return tp_rank + self.tp * (dp_rank + self.dp * pp_rank)

    def nodes_for(self, ranks: list[int]) -> int:
        return max(ranks) // self.cores_per_node + 1


def _disk_path(key: str):
    from trnsim.perf.scale.timing import cache_root

    root = cache_root()
    return None if root is None else root / "collectives" / f"{key}.json"


def _key(payload: dict) -> str:
    from trnsim import hardware
    from trnsim.hardware.fabric import fabric_spec
    from trnsim.perf.scale.timing import _digest, spec_fingerprint

    spec = hardware.instance(payload["instance"])
    payload = dict(payload, fabric=spec_fingerprint(fabric_spec(spec.chip)),
                   instance_spec=spec_fingerprint(spec), code=_digest())
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:24]


@functools.cache
def together_ns(instance: str, nodes: int, lnc: int, op: str, nbytes: int, dtype: str,
                groups: tuple[tuple[int, ...], ...],
                pairs: tuple[tuple[int, int], ...] | None = None) -> float:
    """Time from the first issue to the last end of `groups` running `op` at once."""
    if nbytes <= 0 or not groups or len(groups[0]) < 2:
        return 0.0
    if nodes > MAX_SIMULATED_NODES:
        raise LimitExceededError("nodes of one simulated collective", nodes,
                                 MAX_SIMULATED_NODES)
    payload = {"instance": instance, "nodes": nodes, "lnc": lnc, "op": op, "nbytes": nbytes,
               "dtype": dtype, "groups": groups, "pairs": pairs}
    path = _disk_path(_key(payload))
    if path is not None and path.exists():
        try:
            return float(json.loads(path.read_text())["ns"])
        except (OSError, ValueError, KeyError):
            pass
    from trnsim.collectives import Collective, Fabric

    fabric = Fabric(instance, nodes, lnc)
    results = fabric.run_together([Collective(op, nbytes, dtype, list(g), pairs=pairs)
                                   for g in groups])
    ns = max(r.end_ns for r in results) - min(r.issue_ns for r in results)
    if path is not None:
        from trnsim.runtime.compile import write_json

        write_json(path, {"ns": ns, "request": payload})
    return float(ns)


def tp_collective_ns(p: Placement, op: str, nbytes: int) -> float:
    """One TP collective (`op` of `nbytes` per rank), every TP group of a node at once."""
    if p.tp == 1:
        return 0.0
    per_node = max(1, p.cores_per_node // p.tp)
    groups = tuple(tuple(range(g * p.tp, (g + 1) * p.tp)) for g in range(per_node))
    nodes = max(1, -(-p.tp // p.cores_per_node))
    return together_ns(p.instance, nodes, p.lnc, op, nbytes, "bfloat16", groups)


def dp_collective_ns(p: Placement, op: str, nbytes: int, dtype: str) -> float:
    """One data-parallel collective of `nbytes` per rank, every DP group of a pipeline stage at
    once (TP groups x one stage: they share the nodes' EFA). Beyond `MAX_SIMULATED_NODES`,
    the groups are simulated over that many nodes and the ring's extra steps added at the
    simulated per-step rate (a ring's time is linear in its steps at fixed per-step size)."""
    if p.dp == 1:
        return 0.0
    dp = p.dp
    groups = tuple(tuple(p.rank(t, d, 0) for d in range(dp)) for t in range(p.tp))
    nodes = max(r for g in groups for r in g) // p.cores_per_node + 1
    if nodes <= MAX_SIMULATED_NODES:
        return together_ns(p.instance, nodes, p.lnc, op, nbytes, dtype, groups)
    # too many nodes: time a ring of `small` DP ranks with the per-step size of the real one
    small = max(2, (MAX_SIMULATED_NODES * p.cores_per_node) // p.tp)
    small = min(small, dp)
    steps_real = (2 if op == "all_reduce" else 1) * (dp - 1)
    steps_small = (2 if op == "all_reduce" else 1) * (small - 1)
    scaled = max(1, int(nbytes * small / dp))
    sub = Placement(p.instance, p.cores_per_node, p.lnc, p.tp, small, 1)
    base = dp_collective_ns(sub, op, scaled, dtype)
    return base * steps_real / steps_small


def pp_sendrecv_ns(p: Placement, nbytes: int) -> float:
    """Activations (or their gradients) from one stage to the next: every TP rank of a DP
    replica sends its `nbytes` to its peer in the next stage at once."""
    if p.pp == 1:
        return 0.0
    first = [p.rank(t, 0, 0) for t in range(p.tp)]
    second = [p.rank(t, 0, 1) for t in range(p.tp)]
    ranks = tuple(first + second)
    pairs = tuple((i, p.tp + i) for i in range(p.tp))
    nodes = max(ranks) // p.cores_per_node + 1
    base = min(ranks) // p.cores_per_node
    if base:  # the two stages' nodes, renumbered from node 0
        ranks = tuple(r - base * p.cores_per_node for r in ranks)
        nodes -= base
    return together_ns(p.instance, nodes, p.lnc, "sendrecv", nbytes, "bfloat16", (ranks,), pairs)
