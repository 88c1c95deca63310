"""Placement: which NeuronCore each program of a multi-core run occupies, and the fabric between.

The one home of "which program runs on which core" (DESIGN.md, `sim`): a collective launch from
`nki` (``World(ranks=16, ...)``), a tensor-parallel model from `compiler`, and the copies
`runtime` spreads over the visible cores all place their programs here.

- `place_ranks`: collective ranks (logical NeuronCores) onto an instance's cores, by default
  filling each chip's logical cores in order, as nccom-test places ranks
  (`trnsim.collectives.Machine.place`); returns each rank's fabric endpoint and chip index and a
  `FabricPort` onto `trnsim.collectives.Fabric`, the interface the simulator's rendezvous uses.
- `place_copies`: model copies round-robin onto the visible cores (NEURON_RT_VISIBLE_CORES).
"""

from __future__ import annotations

from dataclasses import dataclass

from trnsim import hardware
from trnsim.collectives import Collective, Fabric, Machine
from trnsim.errors import CoresUnavailableError, InvalidArgumentError, LimitExceededError
from trnsim.sim.sync import World

# The instance a collective launch runs on when only its chip is known (nki targets a chip).
DEFAULT_INSTANCE = {"Trainium": "trn1.32xlarge", "Trainium2": "trn2.48xlarge",
                    "Trainium3": "trn3-gen1-ultraserver", "Inferentia2": "inf2.48xlarge"}
_REDUCTIONS = {"add": "sum", "max": "max", "min": "min"}


class FabricPort:
    """`trnsim.sim.sync.FabricPort` over `trnsim.collectives.Fabric` (created on first use)."""

    def __init__(self, instance, nodes: int, lnc: int) -> None:
        self.instance, self.nodes, self.lnc = instance, nodes, lnc
        self._fabric = None

    @property
    def fabric(self) -> Fabric:
        if self._fabric is None:
            self._fabric = Fabric(self.instance, self.nodes, self.lnc)
        return self._fabric

    @property
    def now_ns(self) -> float:
        return self.fabric.now_ns

    def issue_collective(self, op, nbytes, dtype, endpoints, inputs, pairs, reduction, at_ns):
        request = Collective(op, None if inputs is not None else nbytes, dtype, tuple(endpoints),
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

    def sim_world(self) -> World:
        return World(self.port, self.endpoints)


def instance_for(chip, instance: str | None):
    """The instance a launch on `chip` runs on: `instance` (which must have that chip), else the
    chip's default collectives instance."""
    name = instance or DEFAULT_INSTANCE.get(chip.name)
    if name is None:
        raise InvalidArgumentError(f"no instance with a collectives fabric is known for {chip.name}; "
                                   f"give World(instance=...)")
    spec = hardware.instance(name)
    if spec.chip.name != chip.name:
        raise InvalidArgumentError(f"World(instance={name!r}) has {spec.chip.name} chips, but the "
                                   f"kernel targets {chip.name} ({chip.core.name})")
    return spec


def place_ranks(ranks: int, spec, lnc: int, *, ranks_per_chip: int | None = None,
                nodes: int = 1) -> Placement:
    """Place `ranks` ranks on `nodes` x instance `spec` (`lnc` physical cores per rank)."""
    machine = Machine.build(spec, nodes, lnc)
    per_chip = machine.cores_per_chip
    if ranks_per_chip is None:
        endpoints = machine.place(ranks)
    else:
        if not 1 <= ranks_per_chip <= per_chip:
            raise LimitExceededError("ranks per chip", ranks_per_chip, per_chip,
                                     context=f"{spec.chip.name} at LNC={lnc}")
        chips_needed = -(-ranks // ranks_per_chip)
        total = machine.nodes * machine.chips_per_node
        if chips_needed > total:
            raise LimitExceededError("chips needed", chips_needed, total,
                                     context=f"{nodes} x {spec.name}")
        endpoints = tuple((r // ranks_per_chip) * per_chip + r % ranks_per_chip
                          for r in range(ranks))
    chips = tuple(int(e) // per_chip for e in endpoints)
    return Placement(tuple(int(e) for e in endpoints), chips, FabricPort(spec, nodes, lnc))


def place_copies(visible: list[int], copies: int, instance: str) -> list[int]:
    """Round-robin placement of `copies` model copies on the `visible` cores."""
    if copies > len(visible):
        raise CoresUnavailableError(f"cores={copies} on {instance}: Requested:{copies} "
                                    f"Available:{len(visible)} visible NeuronCores; copies",
                                    copies, len(visible))
    return [visible[i % len(visible)] for i in range(copies)]
