"""The hardware catalog: NeuronCore versions, chips, instances and their topologies.

Data and derived figures only; every other layer reads its clocks, sizes and bandwidths here.
"""

from trnsim.hardware.catalog import (
    chip,
    core,
    core_variant,
    host_variant,
    instance,
    instance_names,
)
from trnsim.hardware.chips import CHIPS, ChipSpec
from trnsim.hardware.cores import (
    CORES,
    MATMUL_PRECISIONS,
    CoreSpec,
    DmaSpec,
    EngineSpec,
    InstructionCosts,
    TensorEngineSpec,
)
from trnsim.hardware.fabric import (
    FABRICS,
    FabricSpec,
    efa_bytes_per_s_per_chip,
    fabric_spec,
    fabric_variant,
)
from trnsim.hardware.host import PCIE_LANE_BYTES_PER_S, HostSpec
from trnsim.hardware.instances import INSTANCES, InstanceSpec
from trnsim.hardware.spec import ASSUMPTION, Alternative
from trnsim.hardware.topology import Link, Topology

__all__ = [
    "ASSUMPTION",
    "CHIPS",
    "CORES",
    "FABRICS",
    "INSTANCES",
    "MATMUL_PRECISIONS",
    "PCIE_LANE_BYTES_PER_S",
    "Alternative",
    "ChipSpec",
    "CoreSpec",
    "DmaSpec",
    "EngineSpec",
    "FabricSpec",
    "HostSpec",
    "InstanceSpec",
    "InstructionCosts",
    "Link",
    "TensorEngineSpec",
    "Topology",
    "chip",
    "core",
    "core_variant",
    "efa_bytes_per_s_per_chip",
    "fabric_spec",
    "fabric_variant",
    "host_variant",
    "instance",
    "instance_names",
]
