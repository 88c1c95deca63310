"""Launching one kernel on many ranks (logical NeuronCores) of an instance, for nki.collectives.

On hardware a collective kernel runs once per rank, each process passing its own inputs; the
ranks talk over the chip's and the instance's fabric. trnsim launches all ranks in one simulation:

    out = nki.simulate(kernel, world=World(ranks=16, instance="trn2.48xlarge", ranks_per_chip=1))(
        per_rank(xs), replica_group)

- `World` says how many ranks, on which instance, and how many ranks share a chip (default: fill
  each chip's logical cores in order, as nccom-test places ranks). With ``kernel[2]`` a rank is two
  physical cores (LNC=2).
- `per_rank([...])` gives each rank its own argument; other arguments are the same for all.
- Collectives are timed and computed by `trnsim.collectives.Fabric` (routes over NeuronLink and
  EFA, CC-core admission, the runtime's algorithm choice); ranks are placed on cores by
  `trnsim.sim.placement`, the one home of placement.

The simulation returns one output per rank (a list).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class World:
    """Ranks of a collective launch and where they run."""

    ranks: int = 1
    instance: str | None = None  # default: the instance family of the target's chip
    ranks_per_chip: int | None = None  # default: fill each chip's logical cores in order
    nodes: int = 1


@dataclass(frozen=True)
class PerRank:
    """One argument value per rank."""

    values: tuple

    def of(self, rank: int):
        return self.values[rank]


def per_rank(values) -> PerRank:
    return PerRank(tuple(values))


def place(world: World, chip, lnc: int):
    """Place `world`'s ranks on its instance (chip `chip`, `lnc` physical cores per rank): a
    `trnsim.sim.placement.Placement` (imported here: it loads the collectives model)."""
    from trnsim.sim.placement import instance_for, place_ranks

    spec = instance_for(chip, world.instance)
    return place_ranks(world.ranks, spec, lnc, ranks_per_chip=world.ranks_per_chip,
                       nodes=world.nodes)
