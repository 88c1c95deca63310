"""Devices, visible cores, compiled models and artifacts: running compiled programs.

`trace()` compiles a PyTorch model into a `CompiledModel`; `load()` reads one saved with
`CompiledModel.save()`. NEURON_RT_VISIBLE_CORES / NEURON_RT_NUM_CORES choose the cores.

The names are imported on first use: a command that only reads cached results (a warm
`trnsim bench`) reaches `runtime.report_tables` through this package without loading the
compiler and the simulator behind `trace`.
"""

from importlib import import_module

_HOMES = {"ArtifactError": "trnsim.runtime.artifact", "place": "trnsim.runtime.compile",
          "trace": "trnsim.runtime.compile", "CoresUnavailableError": "trnsim.runtime.cores",
          "parse_core_list": "trnsim.runtime.cores", "visible_cores": "trnsim.runtime.cores",
          "CompiledModel": "trnsim.runtime.model", "InputSpec": "trnsim.runtime.model",
          "OutputSpec": "trnsim.runtime.model"}
__all__ = sorted([*_HOMES, "load"])


def __getattr__(name: str):
    if name == "load":
        value = import_module("trnsim.runtime.persist").load_model
    elif name in _HOMES:
        value = getattr(import_module(_HOMES[name]), name)
    else:
        raise AttributeError(f"module 'trnsim.runtime' has no attribute {name!r}")
    globals()[name] = value
    return value
