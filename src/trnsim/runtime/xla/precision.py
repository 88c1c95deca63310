"""bf16 numbers as the device computes them: XLA_USE_BF16 / XLA_DOWNCAST_BF16 and stochastic
rounding (NEURON_RT_STOCHASTIC_ROUNDING_EN, seeded by NEURON_RT_STOCHASTIC_ROUNDING_SEED).

The engines compute in fp32 and round on every write to a narrower type. So an op whose result
is bf16 is computed by PyTorch on fp32 copies of its operands and its fp32 result is rounded to
bf16 by `trnsim.numerics.cast` (round-to-nearest-even, or stochastic rounding from the runtime's
seeded generator: reproducible for a seed). Under XLA_USE_BF16=1 / XLA_DOWNCAST_BF16=1 the device
stores float32 tensors as bf16 while the script still sees float32 (as torch-xla reports them):
their values are kept on the bf16 grid, and the compiled graph computes in bf16 (intermediates
included). float64 is bf16 too under XLA_USE_BF16, float32 under XLA_DOWNCAST_BF16 (torch-xla's
documented difference between the two). Both flags turn stochastic rounding on, as the Neuron
runtime does, unless NEURON_RT_STOCHASTIC_ROUNDING_EN=0.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils._pytree import tree_map

USE_BF16_ENV = "XLA_USE_BF16"  # float32 and float64 stored as bf16
DOWNCAST_BF16_ENV = "XLA_DOWNCAST_BF16"  # float32 stored as bf16, float64 as float32
DOWNCAST_ENVS = (USE_BF16_ENV, DOWNCAST_BF16_ENV)
ROUNDING_ENV = "NEURON_RT_STOCHASTIC_ROUNDING_EN"
BF16 = torch.bfloat16


class Precision:
    def __init__(self, downcast: bool, rounding: str, doubles: torch.dtype = BF16) -> None:
        self.downcast = downcast  # float32 storage on the device is bf16
        self.rounding = rounding  # "rne" or "stochastic"
        self.doubles = doubles  # float64 storage under downcast: bf16, or float32

    @classmethod
    def from_env(cls) -> Precision | None:
        from trnsim.numerics.cast import default_rounding

        downcast = any(os.environ.get(name) == "1" for name in DOWNCAST_ENVS)
        explicit = os.environ.get(ROUNDING_ENV)
        rounding = default_rounding() if explicit is not None else (
            "stochastic" if downcast else "rne")
        if not downcast and rounding == "rne":
            return None  # PyTorch's own bf16 arithmetic already rounds to nearest even
        doubles = BF16 if os.environ.get(USE_BF16_ENV) == "1" else torch.float32
        return cls(downcast, rounding, doubles)

    def device_dtype(self, dtype: torch.dtype) -> torch.dtype:
        """The dtype the device stores a tensor of `dtype` in."""
        if not self.downcast:
            return dtype
        return {torch.float32: BF16, torch.float64: self.doubles}.get(dtype, dtype)

    # --- rounding ---------------------------------------------------------------------------
    def round(self, value: torch.Tensor) -> torch.Tensor:
        """`value` (float32) rounded to bf16, in bf16 storage."""
        import numpy as np

        from trnsim.numerics.cast import cast

        array = value.detach().to(torch.float32).contiguous().numpy()
        rounded = np.asarray(cast(array, "bfloat16", rounding=self.rounding))
        bits = torch.from_numpy(rounded.view(np.int16).copy()).view(BF16)
        return bits.reshape(value.shape)

    def on_grid(self, value: torch.Tensor) -> torch.Tensor:
        """A float32 tensor's values put on the bf16 grid (still float32): XLA_USE_BF16."""
        return self.round(value).to(value.dtype)

    # --- hooks called by the device -----------------------------------------------------------
    def after_transfer(self, value: torch.Tensor) -> torch.Tensor:
        if _is_narrow(value, self) and value.dtype != BF16:
            return self.on_grid(value)
        return _doubles_stored(value, self)

    def run(self, func, raw_args: tuple, raw_kwargs: dict) -> Any:
        """Run `func` on the CPU values; narrow results are computed from fp32 operands and
        rounded on write (in-place ops: from the operands as they were before the write)."""
        mutated = _mutated_positions(func)
        if mutated:
            targets = [raw_args[i] for i in mutated
                       if i < len(raw_args) and isinstance(raw_args[i], torch.Tensor)]
            if targets and all(_is_narrow(t, self) for t in targets) and len(targets) == 1:
                from trnsim.runtime.xla.translate import functional

                pure = functional(func)
                if pure is not func:
                    widened = tree_map(_widen, (raw_args, raw_kwargs))
                    exact = pure(*widened[0], **widened[1])
                    target = targets[0]
                    target.copy_(self._write(exact, target.dtype).expand_as(target))
                    return target
            out = func(*raw_args, **raw_kwargs)
            for target in targets:
                target.copy_(_doubles_stored(target, self))
            return out
        out = func(*raw_args, **raw_kwargs)
        if func is torch.ops.aten._local_scalar_dense.default:
            return out
        if not any(_is_narrow(t, self) for t in _tensors(out)):
            return _zip_map(lambda o, e: _doubles_stored(o, self), out, out)
        if self.rounding == "rne" and not self.downcast:
            return out  # PyTorch's bf16 kernels compute in fp32 and round to nearest even
        widened = tree_map(_widen, (raw_args, raw_kwargs))
        exact = func(*widened[0], **widened[1])
        return _zip_map(lambda o, e: self._write(e, o.dtype) if _is_narrow(o, self)
                        else _doubles_stored(o, self), out, exact)

    def _write(self, exact: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        rounded = self.round(exact)
        return rounded if dtype == BF16 else rounded.to(dtype)


def _is_narrow(t: Any, precision: Precision) -> bool:
    """Stored as bf16 on the device."""
    return isinstance(t, torch.Tensor) and precision.device_dtype(t.dtype) == BF16


def _doubles_stored(t: Any, precision: Precision) -> Any:
    """A float64 value as XLA_DOWNCAST_BF16 stores it: on the float32 grid (RNE)."""
    if isinstance(t, torch.Tensor) and t.dtype == torch.float64 and \
            precision.device_dtype(t.dtype) == torch.float32:
        return t.to(torch.float32).to(torch.float64)
    return t


def _tensors(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for t in out if isinstance(t, torch.Tensor)]
    return []


def _widen(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.dtype == BF16:
        return x.to(torch.float32)
    if x is BF16:
        return torch.float32
    return x


def _zip_map(fn, out: Any, exact: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return fn(out, exact)
    if isinstance(out, (list, tuple)):
        return type(out)(_zip_map(fn, o, e) for o, e in zip(out, exact, strict=True))
    return out


def _mutated_positions(func) -> list[int]:
    return [i for i, arg in enumerate(func._schema.arguments)
            if arg.alias_info is not None and arg.alias_info.is_write]
