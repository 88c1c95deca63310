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
  EFA, CC-core admission, the runtime's algorithm choice) through `FabricPort`, the small interface
  the simulator's rendezvous uses (`trnsim.sim.sync`). `collectives` is a layer above `nki`, so it
  is reached through `trnsim.backends`, where the top-level package registers it.

The simulation returns one output per rank (a list).
"""

from __future__ import annotations

from dataclasses import dataclass

from trnsim import backends, hardware
from trnsim.errors import InvalidArgumentError, LimitExceededError
from trnsim.sim import World as SimWorld

DEFAULT_INSTANCE = {"Trainium": "trn1.32xlarge", "Trainium2": "trn2.48xlarge",
                    "Trainium3": "trn3-gen1-ultraserver", "Inferentia2": "inf2.48xlarge"}
_REDUCTIONS = {"add": "sum", "max": "max", "min": "min"}


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


class FabricPort:
    """`trnsim.sim.sync.FabricPort` over `trnsim.collectives.Fabric` (created on first use)."""

    def __init__(self, instance, nodes: int, lnc: int) -> None:
        self.instance, self.nodes, self.lnc = instance, nodes, lnc
        self._fabric = None

    @property
    def fabric(self):
        if self._fabric is None:
            self._fabric = backends.fabric_backend().Fabric(self.instance, self.nodes, self.lnc)
        return self._fabric

    @property
    def now_ns(self) -> float:
        return self.fabric.now_ns

    def issue_collective(self, op, nbytes, dtype, endpoints, inputs, pairs, reduction, at_ns):
        collective = backends.fabric_backend().Collective
        request = collective(op, None if inputs is not None else nbytes, dtype, tuple(endpoints),
                             None, inputs, pairs, _REDUCTIONS.get(reduction, reduction))
        return self.fabric.issue(request, at_ns)

    def result(self, ticket):
        return self.fabric.result(ticket)

    def next_event_ns(self) -> float:
        return self.fabric.next_event_ns()

    def advance_to(self, t_ns: float) -> None:
        self.fabric.advance_to(t_ns)


@dataclass(frozen=True)
class Placement:
    """Where each rank runs: fabric endpoint and chip index; and the fabric to use."""

    endpoints: tuple[int, ...]
    chips: tuple[int, ...]
    port: FabricPort

    def sim_world(self) -> SimWorld:
        return SimWorld(self.port, self.endpoints)


def place(world: World, chip, lnc: int) -> Placement:
    """Place `world`'s ranks on its instance (chip `chip`, `lnc` physical cores per rank)."""
    name = world.instance or DEFAULT_INSTANCE.get(chip.name)
    if name is None:
        raise InvalidArgumentError(f"no instance with a collectives fabric is known for {chip.name}; "
                                   f"give World(instance=...)")
    spec = hardware.instance(name)
    if spec.chip.name != chip.name:
        raise InvalidArgumentError(f"World(instance={name!r}) has {spec.chip.name} chips, but the "
                                   f"kernel targets {chip.name} ({chip.core.name})")
    machine = backends.fabric_backend().Machine.build(spec, world.nodes, lnc)
    per_chip = machine.cores_per_chip
    if world.ranks_per_chip is None:
        endpoints = machine.place(world.ranks)
    else:
        if not 1 <= world.ranks_per_chip <= per_chip:
            raise LimitExceededError("ranks per chip", world.ranks_per_chip, per_chip,
                                     context=f"{chip.name} at LNC={lnc}")
        chips_needed = -(-world.ranks // world.ranks_per_chip)
        total = machine.nodes * machine.chips_per_node
        if chips_needed > total:
            raise LimitExceededError("chips needed", chips_needed, total,
                                     context=f"{world.nodes} x {name}")
        endpoints = tuple((r // world.ranks_per_chip) * per_chip + r % world.ranks_per_chip
                          for r in range(world.ranks))
    chips = tuple(int(e) // per_chip for e in endpoints)
    return Placement(tuple(int(e) for e in endpoints), chips, FabricPort(spec, world.nodes, lnc))
