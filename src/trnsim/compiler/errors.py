"""The compiler's user-facing errors: every one names the model's own source line.

All are `TrnsimError`s (see `trnsim.errors`): a person reads them, the CLI prints them as one line.
Compiler bugs (a pass producing an inconsistent graph) are `IRError`, an ordinary exception.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trnsim.errors import InvalidArgumentError, LimitExceededError, TrnsimError, UnsupportedError


@dataclass(frozen=True)
class UnsupportedOp:
    """One operator trnsim cannot compile, where the model calls it, and why."""

    kind: str  # "aten::adaptive_max_pool2d"
    source: str | None  # "model.py:42"
    reason: str = "no trnsim lowering"
    code: str | None = None  # the source line's text, when known

    def describe(self) -> str:
        where = f" at {self.source}" if self.source else ""
        why = f" ({self.reason})" if self.reason != "no trnsim lowering" else ""
        return f"{self.kind}{where}{why}"


class UnsupportedOperatorError(UnsupportedError):
    """The model uses operators trnsim cannot compile; lists every one, before any simulation."""

    def __init__(self, ops: Sequence[UnsupportedOp]) -> None:
        self.ops = tuple(ops)
        kinds = sorted({op.kind for op in self.ops})
        listing = "; ".join(op.describe() for op in self.ops)
        super().__init__(f"{len(self.ops)} unsupported operator call(s) "
                         f"({', '.join(kinds)}): {listing}. "
                         "trnsim.analyze(model, inputs) lists supported and unsupported operators")



class CaptureError(TrnsimError):
    """torch.export could not capture the model: what it rejected, where, and what to try."""

    def __init__(self, what: str, hint: str, *, source: str | None = None,
                 detail: str | None = None) -> None:
        self.what = what
        self.hint = hint
        self.detail = detail  # torch's own message, kept for --debug
        super().__init__(f"torch.export could not capture the model: {what}; hint: {hint}",
                         source=source)


class InputShapeError(InvalidArgumentError):
    """A compiled model called with inputs whose shapes or dtypes differ from the traced ones."""

    def __init__(self, name: str, traced: str, given: str) -> None:
        self.name = name
        self.traced = traced
        self.given = given
        super().__init__(f"input {name!r}: traced with {traced}, called with {given}; shapes are "
                         "fixed at trace time on Neuron (trace again, or pad/bucket the inputs)")


class ModelTooLargeError(LimitExceededError):
    """Weights plus peak activations exceed the device memory one (logical) NeuronCore owns."""

    def __init__(self, model_bytes: int, device_bytes: int, instance: str, *, weights: int,
                 activations: int, cores: int) -> None:
        self.model_bytes = model_bytes
        self.device_bytes = device_bytes
        super().__init__(
            "model memory", f"{_gib(model_bytes)} ({_gib(weights)} weights + {_gib(activations)} "
            "peak activations)", f"{_gib(device_bytes)}",
            context=f"device memory of {cores} NeuronCore(s) on {instance}; try "
                    "auto_cast='all' (halves fp32 weights), cores=N to split the weights over N "
                    "cores (tensor parallel), or a larger instance")


class ZeroSizeTensorError(UnsupportedError):
    """An operator other than an element-wise one on a tensor with no elements (a batch of 0,
    K = 0): eager PyTorch returns empty or identity results; trnsim's kernels have nothing to
    tile, so it refuses by name rather than guess."""

    def __init__(self, node: str, op: str, shape: tuple[int, ...], *,
                 source: str | None = None) -> None:
        super().__init__(f"{op} ({node}) on a zero-size tensor of shape {list(shape)}: only "
                         f"element-wise operators accept tensors with no elements", source=source)


class IRError(Exception):
    """An inconsistent graph: a compiler bug, not a user mistake (raised by `Graph.verify`)."""


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB ({n} bytes)"


class MetaWeightsError(UnsupportedError):
    """A model traced with weights on PyTorch's meta device has shapes but no values: it can be
    timed (report, profile) but not run or saved."""

    def __init__(self, action: str, meta_tensors: dict[str, str]) -> None:
        names = sorted(meta_tensors)
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        super().__init__(f"cannot {action}: {len(names)} weight tensor(s) were on the meta device "
                         f"when traced ({shown}), so they have no values. Its timing (report(), "
                         f"profile) is valid; to {action}, trace the model with real weights")
        self.meta_tensors = meta_tensors
