"""Where ranks run: `Machine` numbers every NeuronCore of N instances, and ranks map onto them.

A rank is a logical NeuronCore (with LNC=2 on Trn2/Trn3, two physical cores), as in nccom-test:
``-r 32`` on trn1.32xlarge is every core; ``-r 2`` is the two cores of chip 0. Cores ("endpoints")
are numbered node-major, then chip (the catalog's device index, neuron-ls's order), then core on
the chip. A node is one catalog instance: an UltraServer is one node of 64 chips whose servers are
joined by NeuronLink; nodes are joined by EFA.

Default placement (`Machine.place`): the r ranks divide evenly over the nodes (nccom-test's
``-N``), and on each node fill cores in endpoint order — chip 0's cores, then chip 1's, ...

The orders algorithms walk ranks in are derived here from the topology, so neighbours in an
algorithm are neighbours on the wire:
- `ring_positions`: node by node; inside a node a snake through the torus (row 0 left to right,
  row 1 right to left, ...; odd UltraServer servers walk their rows backwards), which is a
  Hamiltonian cycle of a 4x4 torus and of the UltraServer's 4x4x4 3D torus; cores of a chip
  are consecutive.
- `grid_coordinates`: (node, server, row, col, core) of each rank, for dimension-wise algorithms.
- `hypercube_labels`: recursive halving/doubling partners differ in one bit; each torus
  coordinate is Gray-coded so that flipping one bit moves to a ring neighbour (the doc's view of
  the 4x4 torus as a 4D hypercube). The core-on-chip bits are the most significant and the node
  bits the least, so recursive halving splits the data on-chip first and crosses EFA last, with
  the least data (the doc's RDH: intra-chip stage, then inter-chip recursion).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from trnsim.errors import InvalidArgumentError, LimitExceededError, UnsupportedError
from trnsim.hardware import InstanceSpec
from trnsim.hardware.devices import resolve_lnc
from trnsim.hardware.fabric import FabricSpec, efa_bytes_per_s_per_chip, fabric_spec


@dataclass(frozen=True)
class Machine:
    """N copies of one instance: its chips, the cores collectives can use, and the fabric figures."""

    instance: InstanceSpec
    nodes: int = 1
    lnc: int = 1

    @classmethod
    def build(cls, instance: InstanceSpec, nodes: int = 1, lnc: int | None = None) -> Machine:
        if int(nodes) < 1:
            raise InvalidArgumentError(f"nodes must be at least 1, got {nodes}")
        fabric_spec(instance.chip)  # raises for chips without a collective model
        if nodes > 1 and efa_bytes_per_s_per_chip(instance) is None:
            raise UnsupportedError(f"multi-node collectives need EFA; {instance.name} has none "
                                   "(nccom-test runs inf2 on a single instance only)")
        return cls(instance, int(nodes), resolve_lnc(instance, lnc))

    @property
    def fabric(self) -> FabricSpec:
        return fabric_spec(self.instance.chip)

    @property
    def chips_per_node(self) -> int:
        return self.instance.chips

    @property
    def cores_per_chip(self) -> int:
        return self.instance.chip.logical_cores(self.lnc)

    @property
    def cores_per_node(self) -> int:
        return self.chips_per_node * self.cores_per_chip

    @property
    def endpoints(self) -> int:
        return self.nodes * self.cores_per_node

    def locate(self, endpoints: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(node, chip, core) of each endpoint."""
        node, local = np.divmod(np.asarray(endpoints, dtype=np.int64), self.cores_per_node)
        chip, core = np.divmod(local, self.cores_per_chip)
        return node, chip, core

    def global_chip(self, endpoints: np.ndarray) -> np.ndarray:
        """Chip index across all nodes (node * chips_per_node + chip)."""
        return np.asarray(endpoints, dtype=np.int64) // self.cores_per_chip

    def place(self, ranks: int) -> tuple[int, ...]:
        """The default placement of `ranks` ranks (see the module docstring); checks the limits."""
        ranks = int(ranks)
        if ranks < 1:
            raise InvalidArgumentError(f"ranks must be at least 1, got {ranks}")
        where = (f"{self.nodes} x {self.instance.name}: {self.cores_per_node} NeuronCores per node "
                 f"at LNC={self.lnc}")
        if ranks > self.endpoints:
            raise LimitExceededError("ranks", ranks, self.endpoints, context=where)
        if ranks % self.nodes:
            raise InvalidArgumentError(f"ranks {ranks} do not divide evenly over {self.nodes} nodes")
        per_node = ranks // self.nodes
        return tuple(node * self.cores_per_node + local
                     for node in range(self.nodes) for local in range(per_node))

    def check_cores(self, cores: Sequence[int]) -> tuple[int, ...]:
        """Validate an explicit placement: distinct endpoints that exist."""
        out = tuple(int(c) for c in cores)
        if not out:
            raise InvalidArgumentError("a collective needs at least one rank")
        bad = [c for c in out if not 0 <= c < self.endpoints]
        if bad:
            raise LimitExceededError("NeuronCore index", bad[0], self.endpoints - 1,
                                     context=f"{self.nodes} x {self.instance.name}")
        if len(set(out)) != len(out):
            raise InvalidArgumentError(f"a NeuronCore hosts two ranks of one collective: {out}")
        return out

    @cached_property
    def _chip_grid(self) -> np.ndarray:
        """(server, row, col) of each chip of a node; non-grid topologies: (0, 0, chip)."""
        topo = self.instance.topology
        chips = np.arange(self.chips_per_node)
        if topo.grid is None:
            return np.stack([np.zeros_like(chips), np.zeros_like(chips), chips], axis=1)
        rows, cols = topo.grid
        server, device = np.divmod(chips, rows * cols)
        row, col = np.divmod(device, cols)
        return np.stack([server, row, col], axis=1)

    def grid_coordinates(self, cores: Sequence[int]) -> np.ndarray:
        """[ranks, 5] array of (node, server, row, col, core) per rank."""
        node, chip, core = self.locate(np.asarray(cores))
        grid = self._chip_grid[chip]
        return np.column_stack([node, grid, core])

    def ring_positions(self, cores: Sequence[int]) -> np.ndarray:
        """Position of each rank on the snake ring (module docstring); a permutation of 0..r-1."""
        coords = self.grid_coordinates(cores)
        node, server, row, col, core = coords.T
        topo = self.instance.topology
        rows, cols = topo.grid if topo.grid is not None else (1, self.chips_per_node)
        walk_row = np.where(server % 2 == 0, row, rows - 1 - row)
        walk_col = np.where(walk_row % 2 == 0, col, cols - 1 - col)
        order = np.lexsort((core, walk_col, walk_row, server, node))
        positions = np.empty(len(order), dtype=np.int64)
        positions[order] = np.arange(len(order))
        return positions

    def hypercube_labels(self, cores: Sequence[int]) -> np.ndarray | None:
        """Labels 0..r-1 whose one-bit flips are physical neighbours; None unless every axis the
        ranks span has a power-of-two size and the ranks fill that grid."""
        coords = compact_grid(self.grid_coordinates(cores))
        if coords is None:
            return None
        values, sizes = coords
        if any(s & (s - 1) for s in sizes):
            return None
        label = np.zeros(len(values), dtype=np.int64)
        for axis in reversed(range(len(sizes))):  # core bits most significant, node bits least
            gray = values[:, axis] ^ (values[:, axis] >> 1)
            label = label * sizes[axis] + gray
        return label


def compact_grid(coords: np.ndarray, with_axes: bool = False) -> tuple | None:
    """Renumber each axis's values 0..D-1 and drop single-valued axes; None unless the ranks fill
    the resulting grid exactly (one rank per grid point). Returns (values, sizes), plus the kept
    axes' indices if `with_axes`."""
    columns, sizes, axes = [], [], []
    for axis in range(coords.shape[1]):
        uniq, idx = np.unique(coords[:, axis], return_inverse=True)
        if len(uniq) > 1:
            columns.append(idx.reshape(-1))
            sizes.append(len(uniq))
            axes.append(axis)
    values = (np.column_stack(columns).astype(np.int64) if columns
              else np.zeros((len(coords), 0), dtype=np.int64))
    if int(np.prod(sizes)) != len(coords):
        return None
    if columns and len(np.unique(np.ravel_multi_index(tuple(values.T), tuple(sizes)))) != len(coords):
        return None
    return (values, tuple(sizes), tuple(axes)) if with_axes else (values, tuple(sizes))


def outer_groups(coords: np.ndarray) -> np.ndarray | None:
    """Group index per rank: by node, else server, else chip — the first level that splits the
    ranks (all in group 0 if none does); None if that level splits them unequally."""
    node, server, row, col, _ = coords.T
    for key in (node, server, np.stack([server, row, col], axis=1)):
        _, group = np.unique(key, axis=0 if key.ndim > 1 else None, return_inverse=True)
        group = group.reshape(-1)
        counts = np.bincount(group)
        if len(counts) > 1:
            return group if np.all(counts == counts[0]) else None
    return np.zeros(len(coords), dtype=np.int64)
