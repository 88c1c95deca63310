"""Which machines a plan runs on: `trn1.32xlarge x 32`, `trn2u.48xlarge` (an UltraServer),
`ultracluster trn2 x 100000` (chips), parsed into an instance spec and a node count."""

from __future__ import annotations

import re
from dataclasses import dataclass

from trnsim import hardware
from trnsim.errors import InvalidArgumentError, LimitExceededError
from trnsim.hardware.clusters import ULTRACLUSTERS

# Instances a plan cannot use: their chips are not in the collectives layer's fabric model.
_NO_FABRIC = ("Inferentia",)


@dataclass(frozen=True)
class System:
    instance: str  # an InstanceSpec name (an UltraServer counts as one node)
    nodes: int = 1
    lnc: int | None = None  # logical NeuronCore size; None: the chip's default

    @property
    def spec(self):
        return hardware.instance(self.instance)

    @property
    def lnc_size(self) -> int:
        return self.lnc or self.spec.chip.default_lnc

    @property
    def cores_per_node(self) -> int:
        """Logical NeuronCores (ranks) per node."""
        return self.spec.logical_cores(self.lnc_size)

    @property
    def cores(self) -> int:
        return self.cores_per_node * self.nodes

    @property
    def chips(self) -> int:
        return self.spec.chips * self.nodes

    @property
    def hbm_bytes_per_core(self) -> int:
        chip = self.spec.chip
        return chip.memory_bytes // chip.logical_cores(self.lnc_size)

    def peak_flops_per_core(self, precision: str = "bf16") -> float:
        chip = self.spec.chip
        return chip.peak_flops(precision) / chip.logical_cores(self.lnc_size)

    @property
    def price_per_hour(self) -> float | None:
        price = self.spec.price_per_hour
        return None if price is None else price * self.nodes

    def label(self) -> str:
        text = self.instance if self.nodes == 1 else f"{self.instance} x {self.nodes}"
        return text + (f" (LNC={self.lnc})" if self.lnc else "")


_FORM = re.compile(r"^\s*(?P<name>[A-Za-z0-9.\-]+)\s*(?:[x*×]\s*(?P<count>\d+))?\s*$")


def parse_system(text: str, lnc: int | None = None) -> System:
    """``INSTANCE [x NODES]``, an UltraServer by its instance (``trn2u.48xlarge``: four of them
    joined by NeuronLink), or ``ultracluster GEN x CHIPS``."""
    words = text.strip().lower().split()
    if words and words[0] == "ultracluster":
        match = _FORM.match(" ".join(words[1:]))
        if match is None or match.group("count") is None:
            raise InvalidArgumentError(f"system {text!r}: write 'ultracluster trn2 x 100000' "
                                       "(chips)")
        cluster = ULTRACLUSTERS.get(match.group("name"))
        if cluster is None:
            raise InvalidArgumentError(f"ultracluster {match.group('name')!r}: known "
                                       f"{', '.join(sorted(ULTRACLUSTERS))}")
        chips = int(match.group("count"))
        if chips > cluster.max_chips:
            raise LimitExceededError(f"{cluster.name} chips", chips, cluster.max_chips,
                                     context="the documented largest cluster")
        member = hardware.instance(cluster.member)
        nodes = max(1, -(-chips // member.chips))
        return _checked(System(member.name, nodes, lnc))
    match = _FORM.match(text)
    if match is None:
        raise InvalidArgumentError(f"system {text!r}: write INSTANCE or 'INSTANCE x NODES', e.g. "
                                   "'trn1n.32xlarge x 16'")
    name = match.group("name")
    nodes = int(match.group("count") or 1)
    if name.lower() in ("trn2u.48xlarge", "trn2u") and match.group("count") is None:
        name = "trn2-ultraserver"  # the UltraServer is what the trn2u instance type is sold as
    if nodes < 1:
        raise InvalidArgumentError(f"system {text!r}: at least one node")
    return _checked(System(hardware.instance(name).name, nodes, lnc))


def _checked(system: System) -> System:
    spec = system.spec
    if spec.chip.name in _NO_FABRIC:
        raise InvalidArgumentError(f"{spec.name}: the planner needs a chip with a collectives "
                                   f"model (Trainium, Trainium2, Trainium3, Inferentia2)")
    if system.lnc is not None and system.lnc not in spec.chip.lnc_options:
        raise InvalidArgumentError(f"LNC={system.lnc}: {spec.chip.name} offers "
                                   f"{', '.join(map(str, spec.chip.lnc_options))}")
    return system
