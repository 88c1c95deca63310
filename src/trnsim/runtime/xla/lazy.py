"""The lazy "xla" device: tensors that record ATen operations until the graph is cut.

Why a `__torch_dispatch__` subclass and not `torch._lazy`: autograd runs above
`__torch_dispatch__`, so the recorder sees the backward's and the optimizer's ATen ops exactly as
torch-xla's lazy core does, while the values are computed at once on CPU by PyTorch itself (the
fp32 numbers are eager PyTorch's, bit for bit). `torch._lazy`'s TorchScript backend would give
the graph too, but it is a C++ device whose graphs we could neither key on the user's source
lines nor feed to trnsim's compiler without a second translation, and it is unmaintained.

Each `XlaTensor` wraps a CPU tensor holding its value and an `IrValue`: either device data (an
input of the next graph) or the node that computes it. A graph is the closure of the pending
nodes the cut's roots depend on, stopping at device data; after it runs its roots become device
data, as torch-xla replaces a synced tensor's IR with its buffer.
"""

from __future__ import annotations

import itertools
import os
import sys
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_map

_IDS = itertools.count()


@dataclass(eq=False, repr=False)
class IrNode:
    """One recorded ATen call. `args` hold IrValue references in place of tensors."""

    op: Any  # torch._ops.OpOverload
    args: tuple
    kwargs: dict
    outputs: list  # IrValue per tensor output
    source: str | None  # the user's file:line that issued the op


@dataclass(eq=False, repr=False)
class IrValue:
    """A value on the device: produced by `node` (output `index`) or device data (`node is None`)."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    node: IrNode | None = None
    index: int = 0
    source: str | None = None  # where device data came from (a transfer, a factory, a sync)
    uid: int = field(default_factory=lambda: next(_IDS))
    value: Any = None  # device data: its (CPU) value, for reference evaluation of a graph


_HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_TORCH = os.path.dirname(os.path.abspath(torch.__file__))
_SKIP = (_HERE + os.sep, _TORCH + os.sep, "<")


PHASE = {"optimizer": 0, "collectives": 0}  # >0 while inside an optimizer step / a collective


def phase() -> str:
    """Which part of a training step an op belongs to (autograd's engine runs the backward)."""
    if PHASE["collectives"]:
        return "collectives"
    if PHASE["optimizer"]:
        return "optimizer"
    return "backward" if torch._C._current_autograd_node() is not None else "forward"


def node_source(depth: int = 3) -> str:
    """The user's line of a recorded op with its phase: "train.py:14 (backward)". The backward
    runs in autograd's engine thread, without Python frames: its ops name the autograd node
    (the forward op they differentiate), e.g. "MmBackward0 (backward)"."""
    where = phase()
    line = user_source(depth)
    if line is None and where == "backward":
        line = torch._C._current_autograd_node().name()
    return f"{line or '?'} ({where})"


def user_source(depth: int = 2) -> str | None:
    """file:line of the innermost frame outside trnsim, torch and the standard library."""
    frame = sys._getframe(depth)
    stdlib = os.path.dirname(os.__file__) + os.sep
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_SKIP) and not name.startswith(stdlib) \
                and "site-packages" not in name:
            return f"{os.path.basename(name)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


DEVICE_TYPE = "neuron"  # PyTorch's PrivateUse1 key, renamed (the "xla" key needs C++ guards)


def register_backend() -> None:
    """Give PyTorch a device for these tensors. Autograd asks the device type of every tensor
    for a device guard; PyTorch's "xla" type has none without torch-xla's C++ library, so the
    tensors live on the PrivateUse1 device, registered from Python and named "neuron" (as the
    device `torch_neuronx` exposes); `torch.device("xla")` in a script is mapped onto it."""
    if getattr(torch._C, "_get_privateuse1_backend_name", lambda: "")() == DEVICE_TYPE:
        return
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    _setup_privateuseone_for_python_backend(DEVICE_TYPE)
    # the device module's autocast dtypes: torch.utils.checkpoint's recomputation enters
    # `torch.amp.autocast(device_type)` for each checkpointed tensor's device and asks for them
    # (activation checkpointing, as NxD's selective checkpointing runs it)
    getattr(torch, DEVICE_TYPE).get_amp_supported_dtype = lambda: [torch.bfloat16, torch.float16]
    _register_factories()
    from trnsim.runtime.xla import autograd_errors, flash

    flash.register()
    autograd_errors.install()  # an unpack hook's error on the device's backward thread


_LIBRARY = None


def _register_factories() -> None:
    """Factories that C++ composites call with a device tensor's options (SDPA's math path
    allocates its output with `empty`): allocate on CPU and hand back device data."""
    global _LIBRARY
    _LIBRARY = torch.library.Library("aten", "IMPL")

    def empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
        return XlaTensor(torch.empty(size, dtype=dtype, memory_format=memory_format,
                                     device=_host()))

    def empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
        return XlaTensor(torch.empty_strided(size, stride, dtype=dtype, device=_host()))

    _LIBRARY.impl("empty.memory_format", empty, "PrivateUse1")
    _LIBRARY.impl("empty_strided", empty_strided, "PrivateUse1")


def _host() -> torch.device:
    from trnsim.runtime.xla.device import DEVICE

    return DEVICE.host


class XlaTensor(torch.Tensor):
    """A tensor on the simulated "xla" device (see the module docstring)."""

    __slots__ = ("ir", "value")

    @staticmethod
    def __new__(cls, value: torch.Tensor, ir: IrValue | None = None, index: int = 0):
        out = torch.Tensor._make_wrapper_subclass(
            cls, value.shape, strides=value.stride(), storage_offset=value.storage_offset(),
            dtype=value.dtype, device=torch.device(DEVICE_TYPE, index),
            requires_grad=value.requires_grad, layout=value.layout)
        out.value = value.detach() if value.requires_grad else value
        out.ir = ir if ir is not None else data_value(value, user_source(2))
        LIVE.add(out)
        return out

    __torch_function__ = torch._C._disabled_torch_function_impl

    def __repr__(self, *, tensor_contents=None) -> str:
        if self.value.is_meta:  # TRNSIM_XLA_VALUES=shapes: nothing to print but the type
            return f"tensor(..., size={tuple(self.shape)}, dtype={self.dtype}, device='xla:0')"
        sync_for_host_read([self], "print")
        return f"{self.value!r}".replace("tensor(", "tensor(", 1)[:-1] + ", device='xla:0')" \
            if self.value.dim() else f"tensor({self.value.item()!r}, device='xla:0')"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        from trnsim.runtime.xla.device import DEVICE

        try:
            return DEVICE.dispatch(func, args, kwargs or {})
        except Exception as error:  # on autograd's device thread an error aborts the process
            from trnsim.runtime.xla.autograd_errors import dispatch_failed

            return dispatch_failed(error, func, args, kwargs or {})


LIVE: weakref.WeakSet = weakref.WeakSet()


def data_value(value: torch.Tensor, source: str | None) -> IrValue:
    from trnsim.runtime.xla.device import DEVICE

    if getattr(DEVICE, "keep_values", False):  # see `LazyDevice.keep_values`
        value = value.detach().clone()
    return IrValue(tuple(value.shape), value.dtype, None, 0, source, value=value)


def sync_for_host_read(tensors, why: str) -> None:
    from trnsim.runtime.xla.device import DEVICE

    DEVICE.sync(tensors, why, user_source(3))


def unwrap(tree: Any) -> Any:
    return tree_map(lambda x: x.value if isinstance(x, XlaTensor) else x, tree)
