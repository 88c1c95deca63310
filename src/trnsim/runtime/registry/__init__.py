"""The simulated runtime's registry: which trnsim processes hold which NeuronCores of which
simulated instance, what they have loaded, and per-core counters (engine busy time in simulated
time, DMA bytes, HBM, executions, errors, latencies). `trnsim top` and `trnsim monitor` read it.

Per user and local: one JSON record per process in a private directory (`store`), written by a
background thread of the process (`process`), fed by one-line hooks where models execute
(`hooks`); `sample` turns two reads into rates for a period. TRNSIM_REGISTRY=0 turns it off.
"""

from trnsim.runtime.registry.hooks import (
    Run,
    model_execution,
    serving_model,
    serving_step,
    training_step,
)
from trnsim.runtime.registry.process import ENABLE_ENV, TAG_ENV, ProcessRecord, current
from trnsim.runtime.registry.store import DIR_ENV, RegistryDirError, read_records, registry_dir

__all__ = ["DIR_ENV", "ENABLE_ENV", "TAG_ENV", "ProcessRecord", "RegistryDirError", "Run", "current",
           "model_execution", "read_records", "registry_dir", "serving_model", "serving_step",
           "training_step"]
