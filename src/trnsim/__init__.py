"""trnsim: a software Trainium. Simulates AWS Neuron accelerators' numerics and timing.

    compiled = trnsim.trace(model, example_inputs, instance="inf2.xlarge")
    outputs = compiled(*inputs)        # what the hardware would compute
    print(compiled.report())           # latency, throughput, cost, where the time went

`trnsim.analyze(model, inputs)` reports operator support like torch_neuronx.analyze;
`trnsim.load(path)` reads a saved model; models built under `trnsim.empty_weights()` are timed
without allocating their weights; `trnsim.decode_step(model)` wraps a causal LM to time one
generated token against a KV cache. Kernels: `from trnsim import nki`.
"""

__version__ = "0.1.0"

_LAZY = {"trace": ("trnsim.runtime", "trace"), "load": ("trnsim.runtime", "load"),
         "analyze": ("trnsim.compiler", "analyze"),
         "empty_weights": ("trnsim.compiler.empty_weights", "empty_weights"),
         "decode_step": ("trnsim.compiler.decode_step", "decode_step")}


def __getattr__(name: str):
    """Import the model path only when used (it pulls in the compiler and, when called, torch)."""
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'trnsim' has no attribute {name!r}")
