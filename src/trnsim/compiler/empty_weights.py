"""Build a model without its weights, to time it: parameters on PyTorch's meta device.

Timing needs only shapes, so a 70B-parameter model can be planned on a laptop:

    with trnsim.empty_weights():
        model = LlamaForCausalLM(config)
    print(trnsim.trace(model, inputs, instance="trn2.48xlarge", tensor_parallel=32).report())

Each parameter is moved to the meta device as it is registered (so a layer's initialisation
runs on shapes only). Buffers stay real: position ids, rotary frequencies and masks are computed
at construction and can decide which kernel runs (a constant gather is a free view). A model
built entirely under ``torch.device("meta")`` works too; its buffers then read as zeros. Either
way the compiled model can be timed but not run or saved (`MetaWeightsError`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def empty_weights() -> Iterator[None]:
    """Parameters created inside the block live on the meta device (no memory, no values)."""
    import torch

    register = torch.nn.Module.register_parameter

    def register_on_meta(module, name, param):
        register(module, name, param)
        if param is not None and param.device.type != "meta":
            kwargs = {"requires_grad": param.requires_grad}
            module._parameters[name] = type(param)(param.to("meta"), **kwargs)

    torch.nn.Module.register_parameter = register_on_meta
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register
