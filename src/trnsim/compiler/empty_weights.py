"""Build a model without its weights, to time it: parameters on PyTorch's meta device.

Timing needs only shapes, so a 70B-parameter model can be planned on a laptop:

    with trnsim.empty_weights():
        model = LlamaForCausalLM(config)
    print(trnsim.trace(model, inputs, instance="trn2.48xlarge", tensor_parallel=32).report())

Each parameter is moved to the meta device as it is registered (so a layer's initialisation
runs on shapes only), and a tensor factory (``torch.empty``, ``zeros``, ``randn``, ...) asked
for more than `LARGE_TENSOR_BYTES` gives a meta tensor without allocating: a layer's weight is
made that way before it is registered, so a model far larger than the host (or any device) is
built in no memory, and its size is checked against HBM when it is compiled. Smaller buffers
stay real: position ids, rotary frequencies and masks are computed
at construction and can decide which kernel runs (a constant gather is a free view). A model
built entirely under ``torch.device("meta")`` works too; its buffers then read as zeros. Either
way the compiled model can be timed but not run or saved (`MetaWeightsError`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# A factory tensor this large under empty_weights() is a weight, not a buffer a model computes
# at construction (rotary frequencies, position ids and masks are kilobytes to a few MiB): it is
# made on the meta device, so building never allocates it on the host.
LARGE_TENSOR_BYTES = 64 * 2**20

_FACTORIES = ("empty", "zeros", "ones", "full", "rand", "randn", "empty_strided")


def _large_on_meta() -> Any:
    """A torch function mode: factories asked for a large tensor answer on the meta device."""
    import torch
    from torch.overrides import TorchFunctionMode

    factories = {getattr(torch, name) for name in _FACTORIES}

    class LargeOnMeta(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func in factories and kwargs.get("device") in (None, "cpu", torch.device("cpu")):
                meta = func(*args, **{**kwargs, "device": "meta"})
                if meta.numel() * meta.element_size() >= LARGE_TENSOR_BYTES:
                    return meta
            return func(*args, **kwargs)

    return LargeOnMeta()


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
        with _large_on_meta():
            yield
    finally:
        torch.nn.Module.register_parameter = register
