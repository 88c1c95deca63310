"""TensorBoard for training on trnsim: the simulated step's figures in TensorBoard event files.

A script run under `python -m trnsim.run` that writes TensorBoard logs as Neuron's tutorials do
(``from torch.utils.tensorboard import SummaryWriter``) gets, in each writer's event file and
beside its own scalars (its loss), trnsim's figures of every step cut by ``xm.mark_step()``:

- ``trnsim/step_time_ms``: the step's simulated device time (all its graphs and collectives);
- ``trnsim/throughput_samples_per_s``: samples per second for the whole job (when the step's
  batch size can be read from its inputs, see `report.guess_samples`);
- ``trnsim/mfu_percent``: model FLOPs utilisation of the dense bf16 peak (`report.step_report`).

The script's writer is TensorBoard's own (torch's `SummaryWriter`); trnsim only hands the
script a subclass that registers each writer it creates, so its ``isinstance`` checks and
every method behave as without trnsim. `trnsim train --tensorboard DIR` logs the same tags
plus ``loss``.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import weakref

MODULE = "torch.utils.tensorboard"
STEP_TIME_TAG = "trnsim/step_time_ms"
THROUGHPUT_TAG = "trnsim/throughput_samples_per_s"
MFU_TAG = "trnsim/mfu_percent"
LOSS_TAG = "loss"

_WRITERS: weakref.WeakSet = weakref.WeakSet()
_STEP = {"count": 0, "samples": None}


def step_scalars(report) -> dict[str, float]:
    """The TensorBoard scalars of one step report (`trnsim.runtime.xla.report.StepReport`)."""
    scalars = {STEP_TIME_TAG: report.step_ms}
    if report.throughput_per_s is not None:
        scalars[THROUGHPUT_TAG] = report.throughput_per_s
    if report.mfu is not None:
        scalars[MFU_TAG] = 100 * report.mfu
    return scalars


def register(writer, samples_per_step: int | None = None) -> None:
    """Log trnsim's figures of every later step to `writer` (any object with add_scalar)."""
    from trnsim.runtime.xla.device import DEVICE

    _WRITERS.add(writer)
    if samples_per_step is not None:
        _STEP["samples"] = samples_per_step
    if _log_step not in DEVICE.step_listeners:
        DEVICE.step_listeners.append(_log_step)


def unregister(writer) -> None:
    _WRITERS.discard(writer)


def _log_step(graph) -> None:
    from trnsim.runtime.xla.report import step_report

    _STEP["count"] += 1
    writers = list(_WRITERS)
    if not writers:
        return
    scalars = step_scalars(step_report(samples_per_step=_STEP["samples"]))
    for writer in writers:
        for tag, value in scalars.items():
            writer.add_scalar(tag, value, _STEP["count"])


def step_count() -> int:
    """Steps cut by mark_step so far (the global step trnsim's scalars are logged at)."""
    return _STEP["count"]


def _attach(module) -> None:
    """Serve `module.SummaryWriter` as a subclass whose instances register themselves."""
    base = module.SummaryWriter
    if getattr(base, "_trnsim_registers", False):
        return

    class SummaryWriter(base):
        __doc__ = base.__doc__
        _trnsim_registers = True

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            register(self)

    SummaryWriter.__module__ = base.__module__
    SummaryWriter.__qualname__ = base.__qualname__
    module.SummaryWriter = SummaryWriter


class _Loader(importlib.abc.Loader):
    def __init__(self, real) -> None:
        self.real = real

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module) -> None:
        self.real.exec_module(module)
        _attach(module)


class _WatchImport(importlib.abc.MetaPathFinder):
    """Attach when the script first imports torch.utils.tensorboard (never imported for it)."""

    def find_spec(self, fullname, path, target=None):
        if fullname != MODULE:
            return None
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _WatchImport)]
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def install_on_import() -> None:
    """`python -m trnsim.run`: register the writers the script will create."""
    if MODULE in sys.modules:
        _attach(sys.modules[MODULE])
    elif not any(isinstance(f, _WatchImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _WatchImport())
