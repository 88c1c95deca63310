"""Where "xla" tensors come from: `.to(device)`, factories called with `device=xla`.

A process-wide `TorchFunctionMode` sees every torch call with a `device=` argument naming the
xla device (Hugging Face models build position ids with `torch.arange(..., device=x.device)`),
runs it on CPU and wraps the result; `Tensor.to/cuda`-style moves of host tensors become device
data. Optimizer hooks mark the ops of `optimizer.step()` for the step report.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from trnsim.runtime.xla.lazy import DEVICE_TYPE, PHASE, XlaTensor, register_backend

_MOVES = {torch.Tensor.to, torch.Tensor.type_as} if hasattr(torch.Tensor, "type_as") else set()


def _xla(device) -> bool:
    if device is None:
        return False
    if isinstance(device, str):
        return device.split(":")[0] in ("xla", DEVICE_TYPE)
    return isinstance(device, torch.device) and device.type in ("xla", DEVICE_TYPE)


def _target_device(args, kwargs):
    if "device" in kwargs:
        return kwargs["device"]
    for a in args[1:]:
        if isinstance(a, (str, torch.device)):
            return a
        if isinstance(a, torch.Tensor):
            return a.device
    return None


class XlaDeviceMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.to and args and isinstance(args[0], torch.Tensor) \
                and not isinstance(args[0], XlaTensor) and _xla(_target_device(args, kwargs)):
            rest = {k: v for k, v in kwargs.items() if k not in ("device", "non_blocking", "copy")}
            dtypes = [a for a in args[1:] if isinstance(a, torch.dtype)] + \
                ([rest.pop("dtype")] if "dtype" in rest else [])
            host = args[0].to(dtypes[0]) if dtypes else args[0]
            from trnsim.runtime.xla.device import to_device

            return to_device(host)
        if "device" in kwargs and _xla(kwargs["device"]):
            from trnsim.runtime.xla.device import DEVICE, to_device

            if DEVICE.shapes_only and args and isinstance(args[0], XlaTensor):
                # `t.to(device=xla, dtype=...)` of a device tensor: with values, a host copy
                # (a sync) moved back as device data; shapes only, the same on its shape
                DEVICE.sync([args[0]], ".cpu()", None)
                args = (args[0].value, *args[1:])
            host = func(*args, **{**kwargs, "device": DEVICE.host})
            if isinstance(host, torch.Tensor):
                DEVICE.note_factory()
                return to_device(host)
            return host
        return func(*args, **kwargs)


_MODE: XlaDeviceMode | None = None


def activate() -> None:
    """Enter the device mode for the rest of the process and hook every optimizer's step."""
    global _MODE
    if _MODE is not None:
        return
    register_backend()
    _MODE = XlaDeviceMode()
    _MODE.__enter__()
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    def pre(optimizer, *_):
        from trnsim.runtime.xla.memory import OPTIMIZERS

        OPTIMIZERS.add(optimizer)
        PHASE["optimizer"] += 1

    def post(*_):
        PHASE["optimizer"] = max(0, PHASE["optimizer"] - 1)

    register_optimizer_step_pre_hook(pre)
    register_optimizer_step_post_hook(post)
    _keep_tied_parameters()


def _keep_tied_parameters() -> None:
    """`model.to(device)` gives each module a new Parameter object when the new tensor is of
    another type (ours is), which would untie shared weights (GPT-2's wte and lm_head); torch-xla
    keeps them tied (it swaps `.data` in place). After the top-level `_apply`, every module slot
    that held one parameter object holds one new object again."""
    original = torch.nn.Module._apply
    depth = [0]

    def apply(module, fn, recurse=True):
        if depth[0]:
            return original(module, fn, recurse)
        slots = [(m, name, p) for m in module.modules()
                 for name, p in m._parameters.items() if p is not None]
        depth[0] += 1
        try:
            result = original(module, fn, recurse)
        finally:
            depth[0] -= 1
        first: dict[int, torch.Tensor] = {}
        for m, name, old in slots:
            new = m._parameters[name]
            if id(old) in first and new is not first[id(old)]:
                m._parameters[name] = first[id(old)]
            else:
                first.setdefault(id(old), new)
        return result

    torch.nn.Module._apply = apply
