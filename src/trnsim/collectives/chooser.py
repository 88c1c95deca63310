"""Which algorithm a collective runs, as the Neuron runtime picks it (unless one is forced).

The rules restate the runtime's documented sweet spots (INTRANODE_DOC, "Algorithm Summary";
INTERNODE_DOC, "Algorithm Summary" and "Hierarchical Algorithm"). The size compared is the
operation's buffer, nccom-test's ``size(B)``:

- permute, sendrecv, all-to-all: ``mesh`` (direct transfers);
- one rank: ``mesh`` (nothing moves);
- ranks on several nodes, several per node: ``hier``, its intra-node level chosen by the
  intra-node rules below on the whole buffer, its inter-node level by the inter-node rules on the
  1/Y of the buffer each inter-node group carries (Y = ranks per node);
- one rank per node: the inter-node rules;
- inside one node: under 1 MiB ``mesh``; up to 56 MiB ``rdh`` if the rank count is a power of two;
  beyond (or if it is not) ``kangaring`` when every chip in use holds at least two of the ranks
  (the doc: KangaRing is for groups that own whole chips; one rank per chip runs Ring), else
  ``ring``;
- between nodes: under 1 MiB ``mesh`` for up to MESH_MAX_NODES nodes, else ``rdh`` (power of two)
  or ``ring``; up to 56 MiB ``rdh`` if the node count is a power of two, else ``ring``; beyond,
  ``ring``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trnsim.collectives.ops import POINT_TO_POINT
from trnsim.collectives.placement import Machine, outer_groups

MIB = 2**20
MESH_BELOW_BYTES = 1 * MIB  # INTRANODE_DOC: Mesh "< 1MB"
RDH_UP_TO_BYTES = 56 * MIB  # INTRANODE_DOC: RDH "1-56MB", KangaRing ">56MB"
# INTERNODE_DOC gives Mesh for "small" groups without a number; ASSUMPTION: up to 8 nodes.
MESH_MAX_NODES = 8


@dataclass(frozen=True)
class Choice:
    algorithm: str
    levels: tuple[str, str] | None = None  # hier: (intra-group, inter-group) algorithms


def choose(op: str, nbytes: int, machine: Machine, cores: Sequence[int]) -> Choice:
    """The algorithm for `op` on `nbytes` with ranks on `cores` (module docstring rules)."""
    ranks = len(cores)
    if op in POINT_TO_POINT or op == "all_to_all" or ranks == 1:
        return Choice("mesh")
    node, _, _ = machine.locate(np.asarray(cores))
    nodes = len(np.unique(node))
    _, per_chip = np.unique(machine.global_chip(np.asarray(cores)), return_counts=True)
    min_per_chip = int(per_chip.min())
    if nodes == 1:
        return Choice(intra_node(nbytes, ranks, min_per_chip))
    if ranks == nodes:
        return Choice(inter_node(nbytes, nodes))
    return Choice("hier", hier_levels(nbytes, machine, cores))


def hier_levels(nbytes: int, machine: Machine, cores: Sequence[int]) -> tuple[str, str]:
    """(intra-group, inter-group) algorithms of ``hier``, groups as `placement.outer_groups` forms
    them. Across nodes the inter-node rules apply; across the servers or chips of one node, the
    intra-node rules (without kangaring, which pairs cores of one chip)."""
    group = outer_groups(machine.grid_coordinates(cores))
    groups = 1 if group is None else int(group.max()) + 1
    inner = len(cores) // groups
    _, per_chip = np.unique(machine.global_chip(np.asarray(cores)), return_counts=True)
    intra = intra_node(nbytes, inner, int(per_chip.min()))
    node, _, _ = machine.locate(np.asarray(cores))
    if len(np.unique(node)) > 1:
        return intra, inter_node(nbytes // inner, groups)
    return intra, intra_node(nbytes // inner, groups, 1)


def intra_node(nbytes: int, ranks: int, min_ranks_per_chip: int) -> str:
    if nbytes < MESH_BELOW_BYTES:
        return "mesh"
    if nbytes <= RDH_UP_TO_BYTES and _power_of_two(ranks):
        return "rdh"
    return "kangaring" if min_ranks_per_chip >= 2 else "ring"


def inter_node(nbytes: int, nodes: int) -> str:
    if nbytes < MESH_BELOW_BYTES and nodes <= MESH_MAX_NODES:
        return "mesh"
    if nbytes <= RDH_UP_TO_BYTES and _power_of_two(nodes):
        return "rdh"
    return "ring"


def _power_of_two(n: int) -> bool:
    return n > 0 and not n & (n - 1)
