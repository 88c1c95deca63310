"""Errors raised during a device backward reach the user instead of aborting the process.

Why: the backward of device tensors runs on autograd's worker thread for the device. When Python
code raises there (a saved-tensor unpack hook: non-reentrant `torch.utils.checkpoint` recomputes
the checkpointed forward inside one, so any error in the recomputation or its CheckpointError on
a mismatch; or an op of the backward failing in the device's `__torch_dispatch__`), the engine
unwinds with the Python error still pending, and the stream guard's destructor calls the
Python-registered device guard (`_setup_privateuseone_for_python_backend`); the C++ runtime then
calls std::terminate ("terminate called without an active exception"). A CPU backward runs on
the caller's thread, where the same error propagates normally.

So on a worker thread the failing hook or op keeps its error and hands back zeros of the shape it
owed, the rest of that backward runs (its later unpack hooks do not recompute), and the engine's
caller raises the first such error as `backward()` returns: the error eager PyTorch raises, at the
same call, after a backward whose gradients are not used.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd.variable import Variable
from torch.utils._pytree import tree_flatten, tree_map

_CALLERS: list[int] = []  # the threads inside `run_backward` (nested runs), innermost last
_DEFERRED: list[BaseException] = []  # errors of hooks and ops on worker threads, first first
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
            _defer(error, task)
            return _stand_in(saved)

    return guarded_pack, guarded_unpack


def _defer(error: BaseException, task: int) -> None:
    """Keep `error` for the engine's caller, or re-raise it where raising is safe."""
    if not _CALLERS or threading.current_thread() is threading.main_thread():
        raise error  # no engine, or its caller's thread: it propagates as in eager PyTorch
    _DEFERRED.append(error)
    _FAILED.add(task)


def dispatch_failed(error: Exception, func: Any, args: tuple, kwargs: dict) -> Any:
    """An op of the device failed (`error`): on a backward worker thread, keep the error and
    hand back zeros of the op's output shapes (from its meta kernel), else re-raise it."""
    from trnsim.runtime.xla.lazy import XlaTensor, _host

    _defer(error, torch._C._current_graph_task_id())
    try:
        out = func(*tree_map(_meta, args), **tree_map(_meta, kwargs))
    except Exception:  # no shapes either: the first tensor argument's stand in
        out = next((a for a in tree_flatten(args)[0] if isinstance(a, torch.Tensor)), None)
    return tree_map(lambda t: XlaTensor(torch.zeros(t.shape, dtype=t.dtype, device=_host()))
                    if isinstance(t, torch.Tensor) else t, out)


def _meta(x: Any) -> Any:
    if not isinstance(x, torch.Tensor):
        return x
    return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")


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
