"""The network model: directed resources, routes between NeuronCores, and max-min fair sharing.

Resources, each with a per-direction capacity (bytes per ns):
- every rank's collective port, out and in (`FabricSpec.rank_port_bytes_per_s`): all of a rank's
  collective traffic passes through it, on-chip or not, so core-to-core traffic on one chip costs
  ports only;
- every NeuronLink / UltraServer / switch link of every node's topology, once per direction
  (parallel links between the same two nodes are merged into one resource);
- with more than one node, every chip's EFA interface, out and in (`efa_bytes_per_s_per_chip`);
  the EFA network between the interfaces is taken as non-blocking.

Routes: between chips of a node, dimension-order on a torus or UltraServer (servers, then rows,
then columns; on a tie the even coordinate goes forward, the odd one backward, to spread load),
else a breadth-first shortest path (rings, Trn3's switches). Between nodes, a flow leaves
through its source chip's EFA interface and enters through the target chip's.

Sharing: flows active at the same time get max-min fair rates (progressive filling: raise every
unfrozen flow's rate together until some resource fills, freeze the flows through it, repeat).
Flows on the same route always get the same rate, so the solver works on routes weighted by
their flow counts, and caches results by the set of active routes: every step of a ring
collective has the same routes, so its rates are computed once.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from trnsim.collectives.placement import Machine
from trnsim.hardware.fabric import efa_bytes_per_s_per_chip

_NS_PER_S = 1e9


class Network:
    """Resources and routes of a `Machine`; `rates` shares bandwidth among active flows."""

    def __init__(self, machine: Machine) -> None:
        self.machine = machine
        spec = machine.fabric
        topo = machine.instance.topology
        self.endpoints = machine.endpoints
        port = spec.rank_port_bytes_per_s(machine.lnc) / _NS_PER_S
        capacity = [port] * (2 * self.endpoints)
        self.link_base = len(capacity)
        self._directed: dict[tuple, int] = {}
        local: list[float] = []
        for link in topo.links:
            for a, b in ((link.a, link.b), (link.b, link.a)):
                if (a, b) in self._directed:
                    local[self._directed[(a, b)]] += link.bytes_per_s / _NS_PER_S
                else:
                    self._directed[(a, b)] = len(local)
                    local.append(link.bytes_per_s / _NS_PER_S)
        self.links_per_node = len(local)
        capacity += local * machine.nodes
        self.nic_base = len(capacity)
        efa = efa_bytes_per_s_per_chip(machine.instance) if machine.nodes > 1 else None
        if efa is not None:
            capacity += [efa / _NS_PER_S] * (2 * machine.nodes * machine.chips_per_node)
        self.capacity = np.array(capacity, dtype=np.float64)
        self.hop_latency_ns = spec.hop_latency_ns
        self.efa_latency_ns = spec.efa_latency_ns
        self._route_of: dict[int, int] = {}
        self._route_res: list[np.ndarray] = []
        self._route_latency: list[float] = []
        self._latency_array: np.ndarray | None = None
        self._csr: tuple[np.ndarray, np.ndarray] | None = None
        self._chip_paths: dict[tuple[int, int], list[int]] = {}
        self._rate_cache: dict[tuple[bytes, bytes], np.ndarray] = {}

    # --- routes ------------------------------------------------------------------------------
    def route_ids(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Route id of each (source endpoint, target endpoint) pair; routes are built once."""
        keys = np.asarray(src, dtype=np.int64) * self.endpoints + np.asarray(dst, dtype=np.int64)
        uniq, inverse = np.unique(keys, return_inverse=True)
        ids = np.empty(len(uniq), dtype=np.int64)
        for i, key in enumerate(uniq.tolist()):
            found = self._route_of.get(key)
            if found is None:
                found = self._add_route(*divmod(key, self.endpoints))
                self._route_of[key] = found
            ids[i] = found
        return ids[inverse.reshape(-1)]

    def _add_route(self, src: int, dst: int) -> int:
        m = self.machine
        node, chip, _ = m.locate(np.array([src, dst]))
        (node_a, node_b), (chip_a, chip_b) = node.tolist(), chip.tolist()
        resources = [src]
        if node_a == node_b:
            base = self.link_base + node_a * self.links_per_node
            resources += [base + i for i in self._chip_path(chip_a, chip_b)]
            latency = self.hop_latency_ns
        else:
            chips = m.chips_per_node
            resources += [self.nic_base + node_a * chips + chip_a,
                          self.nic_base + (m.nodes + node_b) * chips + chip_b]
            latency = self.efa_latency_ns
        resources.append(self.endpoints + dst)
        self._route_res.append(np.array(resources, dtype=np.int64))
        self._route_latency.append(latency)
        self._csr, self._latency_array = None, None
        return len(self._route_res) - 1

    def latency_ns(self, routes: np.ndarray) -> np.ndarray:
        """Latency of one algorithm step over each route (hop, or EFA between nodes)."""
        if self._latency_array is None:
            self._latency_array = np.array(self._route_latency, dtype=np.float64)
        return self._latency_array[routes]

    def _chip_path(self, a: int, b: int) -> list[int]:
        """Directed-link indices (local to a node) from chip a to chip b."""
        if a == b:
            return []
        key = (a, b)
        if key not in self._chip_paths:
            topo = self.machine.instance.topology
            hops = self._grid_hops(a, b) if topo.grid is not None else self._bfs_hops(a, b)
            self._chip_paths[key] = [self._directed[h] for h in hops]
        return self._chip_paths[key]

    def _grid_hops(self, a: int, b: int) -> list[tuple[int, int]]:
        topo = self.machine.instance.topology
        shape = (topo.servers, *topo.grid)
        here = list(np.unravel_index(a, shape))
        there = np.unravel_index(b, shape)
        hops = []
        for axis, size in enumerate(shape):
            delta = (int(there[axis]) - int(here[axis])) % size
            if delta == 0:
                continue
            forward = delta < size - delta or (2 * delta == size and here[axis] % 2 == 0)
            step, count = (1, delta) if forward else (-1, size - delta)
            for _ in range(count):
                before = int(np.ravel_multi_index(tuple(here), shape))
                here[axis] = (here[axis] + step) % size
                hops.append((before, int(np.ravel_multi_index(tuple(here), shape))))
        return hops

    def _bfs_hops(self, a: int, b: int) -> list[tuple]:
        topo = self.machine.instance.topology
        parent: dict = {a: None}
        todo = deque([a])
        while todo and b not in parent:
            node = todo.popleft()
            for link in topo.links_of(node):
                other = link.other(node)
                if other not in parent:
                    parent[other] = node
                    todo.append(other)
        if b not in parent:
            raise RuntimeError(f"{topo.kind} topology has no path from chip {a} to chip {b}")
        hops, node = [], b
        while parent[node] is not None:
            hops.append((parent[node], node))
            node = parent[node]
        return hops[::-1]

    # --- sharing -----------------------------------------------------------------------------
    def _route_csr(self) -> tuple[np.ndarray, np.ndarray]:
        if self._csr is None:
            lengths = np.array([len(r) for r in self._route_res], dtype=np.int64)
            ptr = np.concatenate([[0], np.cumsum(lengths)])
            self._csr = (ptr, np.concatenate(self._route_res) if self._route_res
                         else np.zeros(0, dtype=np.int64))
        return self._csr

    def rates(self, routes: np.ndarray) -> np.ndarray:
        """Max-min fair rate (bytes per ns) of each flow, given the route id of every active flow."""
        uniq, inverse, counts = np.unique(routes, return_inverse=True, return_counts=True)
        key = (uniq.tobytes(), counts.tobytes())
        per_route = self._rate_cache.get(key)
        if per_route is None:
            per_route = self._progressive_filling(uniq, counts.astype(np.float64))
            self._rate_cache[key] = per_route
        return per_route[inverse.reshape(-1)]

    def _progressive_filling(self, routes: np.ndarray, weights: np.ndarray) -> np.ndarray:
        ptr, res = self._route_csr()
        starts, lengths = ptr[routes], ptr[routes + 1] - ptr[routes]
        owner = np.repeat(np.arange(len(routes)), lengths)
        offsets = np.cumsum(lengths) - lengths
        used = res[np.arange(int(lengths.sum())) - np.repeat(offsets, lengths)
                   + np.repeat(starts, lengths)]
        resources, slot = np.unique(used, return_inverse=True)
        slot = slot.reshape(-1)
        remaining = self.capacity[resources].copy()
        tolerance = 1e-9 * self.capacity[resources]
        rate = np.zeros(len(routes))
        active = np.ones(len(routes), dtype=bool)
        while active.any():
            load = np.bincount(slot, weights=(weights * active)[owner], minlength=len(resources))
            loaded = load > 0
            level = np.min(remaining[loaded] / load[loaded])
            rate[active] += level
            remaining -= level * load
            full = loaded & (remaining <= tolerance)
            frozen = np.zeros(len(routes), dtype=bool)
            frozen[owner[full[slot]]] = True
            active &= ~frozen
        return rate
