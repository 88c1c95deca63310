"""Devices, visible cores, compiled models and artifacts: running compiled programs.

`trace()` compiles a PyTorch model into a `CompiledModel`; `load()` reads one saved with
`CompiledModel.save()`. NEURON_RT_VISIBLE_CORES / NEURON_RT_NUM_CORES choose the cores.
"""

from trnsim.runtime.artifact import ArtifactError
from trnsim.runtime.compile import place, trace
from trnsim.runtime.cores import CoresUnavailableError, parse_core_list, visible_cores
from trnsim.runtime.model import CompiledModel, InputSpec, OutputSpec
from trnsim.runtime.persist import load_model as load

__all__ = ["ArtifactError", "CompiledModel", "CoresUnavailableError", "InputSpec", "OutputSpec",
           "load", "parse_core_list", "place", "trace", "visible_cores"]
