"""Errors raised by a saved-tensor unpack hook reach the user instead of aborting the process.

Why: the backward of device tensors runs on autograd's worker thread for the device. When a
saved-tensor unpack hook raises there (non-reentrant `torch.utils.checkpoint` recomputes the
checkpointed forward inside one: any error in the recomputation, or its CheckpointError on a
mismatch), the engine unwinds with the Python error still pending, and the stream guard's
destructor calls the Python-registered device guard (`_setup_privateuseone_for_python_backend`);
the C++ runtime then calls std::terminate ("terminate called without an active exception"). A
CPU backward runs on the caller's thread, where the same error propagates normally.

So an unpack hook that fails on a worker thread hands back a zero tensor of the saved tensor's
shape in its place, the rest of that backward runs, and the engine's caller raises the first such
error as it returns: the user gets the error eager PyTorch raises, at the same call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd.variable import Variable

_CALLERS: list[int] = []  # the threads inside `run_backward` (nested runs), innermost last
_DEFERRED: list[BaseException] = []  # errors of unpack hooks on worker threads, first first
_FAILED: set[int] = set()  # graph tasks with a deferred error: their unpack hooks run no more


@dataclass(frozen=True)
class _Saved:
    """What an unpack hook's stand-in must look like: the saved tensor's shape, dtype, device."""

    packed: Any
    shape: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device


def _stand_in(saved: _Saved) -> torch.Tensor:
    from trnsim.runtime.xla.lazy import DEVICE_TYPE, XlaTensor, _host

    if saved.device.type == DEVICE_TYPE:
        return XlaTensor(torch.zeros(saved.shape, dtype=saved.dtype, device=_host()))
    return torch.zeros(saved.shape, dtype=saved.dtype, device=saved.device)


def guard_hooks(pack: Callable, unpack: Callable) -> tuple[Callable, Callable]:
    """The hooks with `unpack` deferring its error when it runs on an engine worker thread."""

    def guarded_pack(tensor: torch.Tensor) -> _Saved:
        return _Saved(pack(tensor), tuple(tensor.shape), tensor.dtype, tensor.device)

    def guarded_unpack(saved: _Saved) -> Any:
        task = torch._C._current_graph_task_id()
        if task in _FAILED:  # a failed recomputation is not retried (it would fail again)
            return _stand_in(saved)
        try:
            return unpack(saved.packed)
        except BaseException as error:
            if not _CALLERS or threading.current_thread() is threading.main_thread():
                raise  # no engine, or its caller's thread: it propagates as in eager PyTorch
            _DEFERRED.append(error)
            _FAILED.add(task)
            return _stand_in(saved)

    return guarded_pack, guarded_unpack


class _Engine:
    """autograd's engine, whose `run_backward` raises the errors its worker threads deferred."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def run_backward(self, *args: Any, **kwargs: Any) -> Any:
        _CALLERS.append(threading.get_ident())
        first = len(_DEFERRED)
        try:
            result = self._engine.run_backward(*args, **kwargs)
        except Exception:  # e.g. an engine check failing on a stand-in's gradient
            if len(_DEFERRED) == first:
                raise
            raise _take(first) from None  # the cause, not its consequence
        finally:
            _CALLERS.pop()
        if len(_DEFERRED) > first:
            raise _take(first)
        return result


def _take(first: int) -> BaseException:
    """The first error deferred since `first`; forgets them and their graph tasks."""
    error = _DEFERRED[first]
    del _DEFERRED[first:]
    if not _DEFERRED:
        _FAILED.clear()
    return error


def install() -> None:
    """Guard every saved-tensor hook pair pushed from now on; wrap the engine once."""
    if isinstance(Variable._execution_engine, _Engine):
        return
    Variable._execution_engine = _Engine(Variable._execution_engine)
    push = torch._C._autograd._push_saved_tensors_default_hooks

    def guarded_push(pack: Callable, unpack: Callable) -> None:
        push(*guard_hooks(pack, unpack))

    torch._C._autograd._push_saved_tensors_default_hooks = guarded_push
