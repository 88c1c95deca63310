"""Chip-to-chip topologies as graphs: the data the collectives layer routes over.

Nodes are chip indices (0..chips-1, globally numbered across the servers of an UltraServer as
``server * chips_per_server + device``) and, for switched fabrics, switch names (strings).
Links are undirected; `bytes_per_s` is the bandwidth of one direction of one link.

Per-link bandwidth is not published: AWS gives NeuronLink bandwidth per chip. ASSUMPTION
(``PER_CHIP_BANDWIDTH_SPLIT``): the per-chip figure is the sum over the chip's links of one
direction, so a torus link carries a quarter of it each way.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from functools import cached_property

Node = int | str

PER_CHIP_BANDWIDTH_SPLIT = "ASSUMPTION: per-chip NeuronLink bandwidth = sum of one direction of its links"


@dataclass(frozen=True)
class Link:
    a: Node
    b: Node
    kind: str  # "neuronlink", "ultraserver", "switch"
    bytes_per_s: float  # per direction

    def other(self, node: Node) -> Node:
        return self.b if node == self.a else self.a


@dataclass(frozen=True)
class Topology:
    kind: str  # "single", "ring", "torus2d", "ultraserver", "switched"
    chips: int
    links: tuple[Link, ...]
    servers: int = 1
    grid: tuple[int, int] | None = None  # (rows, cols) of each server's torus
    switches: tuple[str, ...] = ()

    @cached_property
    def _adjacency(self) -> dict[Node, list[Link]]:
        adjacency: dict[Node, list[Link]] = {n: [] for n in range(self.chips)}
        for s in self.switches:
            adjacency[s] = []
        for link in self.links:
            adjacency[link.a].append(link)
            adjacency[link.b].append(link)
        return adjacency

    @property
    def chips_per_server(self) -> int:
        return self.chips // self.servers

    def links_of(self, node: Node) -> list[Link]:
        return list(self._adjacency[node])

    def neighbours(self, node: Node, kind: str | None = None) -> list[Node]:
        """Directly linked nodes in link order (neuron-ls's CONNECTED DEVICES order for a torus)."""
        out: list[Node] = []
        for link in self._adjacency[node]:
            other = link.other(node)
            if (kind is None or link.kind == kind) and other not in out:
                out.append(other)
        return out

    def is_connected(self) -> bool:
        if self.chips <= 1:
            return True
        seen = {0}
        todo = deque([0])
        while todo:
            node = todo.popleft()
            for other in self.neighbours(node):
                if other not in seen:
                    seen.add(other)
                    todo.append(other)
        return all(chip in seen for chip in range(self.chips))

    def server_of(self, chip: int) -> int:
        return chip // self.chips_per_server

    def connected_devices(self, chip: int) -> list[int]:
        """Chips directly linked to `chip`, in neuron-ls's order (torus: up, left, down, right)."""
        if self.grid is None:
            return [n for n in self.neighbours(chip) if isinstance(n, int)]
        rows, cols = self.grid
        server, device = divmod(chip, rows * cols)
        base = server * rows * cols
        ordered = [base + d for d in torus_neighbours(device, rows, cols)]
        return ordered + [n for n in self.neighbours(chip, kind="ultraserver") if n not in ordered]


def single(chips: int = 1) -> Topology:
    """Chips with no NeuronLink between them (inf1.xlarge, inf2.xlarge, trn1.2xlarge)."""
    return Topology(kind="single", chips=chips, links=())


def ring(chips: int, bytes_per_s_per_chip: float) -> Topology:
    """A ring, as drawn for inf1.6xl/24xl and inf2.24xl/48xl (2 links per chip)."""
    per_link = bytes_per_s_per_chip / 2
    links = tuple(Link(i, (i + 1) % chips, "neuronlink", per_link) for i in range(chips))
    if chips == 2:
        links = links[:1]
    return Topology(kind="ring", chips=chips, links=links)


def _torus_links(rows: int, cols: int, offset: int, per_link: float) -> list[Link]:
    links = []
    for r in range(rows):
        for c in range(cols):
            d = offset + r * cols + c
            # Link order per device: up, left, down, right (matches neuron-ls: 0 -> 12, 3, 4, 1).
            links.append(Link(d, offset + ((r + 1) % rows) * cols + c, "neuronlink", per_link))
            links.append(Link(d, offset + r * cols + (c + 1) % cols, "neuronlink", per_link))
    return links


def torus2d(rows: int, cols: int, bytes_per_s_per_chip: float) -> Topology:
    """trn1/trn2 4x4 2D torus: device 4r+c links to (r+-1 mod 4, c) and (r, c+-1 mod 4)."""
    links = _torus_links(rows, cols, 0, bytes_per_s_per_chip / 4)
    return Topology(kind="torus2d", chips=rows * cols, links=tuple(links), grid=(rows, cols))


def torus_neighbours(device: int, rows: int, cols: int) -> list[int]:
    """neuron-ls's CONNECTED DEVICES for a torus device: up, left, down, right."""
    r, c = divmod(device, cols)
    return [((r - 1) % rows) * cols + c, r * cols + (c - 1) % cols,
            ((r + 1) % rows) * cols + c, r * cols + (c + 1) % cols]


def ultraserver(servers: int, rows: int, cols: int, bytes_per_s_per_chip: float,
                inter_server_bytes_per_s_per_chip: float) -> Topology:
    """Trn2 UltraServer: each server a torus; chips at the same (x, y) joined in a ring."""
    per_server = rows * cols
    links = []
    for s in range(servers):
        links += _torus_links(rows, cols, s * per_server, bytes_per_s_per_chip / 4)
    ring_links = 2 if servers > 2 else 1
    for s in range(servers if servers > 2 else servers - 1):
        for d in range(per_server):
            links.append(Link(s * per_server + d, ((s + 1) % servers) * per_server + d, "ultraserver",
                              inter_server_bytes_per_s_per_chip / ring_links))
    return Topology(kind="ultraserver", chips=servers * per_server, links=tuple(links),
                    servers=servers, grid=(rows, cols))


def switched(servers: int, chips_per_server: int, intra_bytes_per_s_per_chip: float,
             inter_bytes_per_s_per_chip: float) -> Topology:
    """Trn3 NeuronSwitch fabric. ASSUMPTION: two levels, a switch per server (intra-server links)
    and one spine joining every chip (its inter-server links); per-chip figures from trn3-arch."""
    links = []
    switches = [f"server{s}" for s in range(servers)] + ["spine"]
    for s in range(servers):
        for d in range(chips_per_server):
            chip = s * chips_per_server + d
            links.append(Link(chip, f"server{s}", "switch", intra_bytes_per_s_per_chip))
            links.append(Link(chip, "spine", "switch", inter_bytes_per_s_per_chip))
    return Topology(kind="switched", chips=servers * chips_per_server, links=tuple(links),
                    servers=servers, switches=tuple(switches))
