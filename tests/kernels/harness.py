"""Run one library kernel on its own: trace it into a program, simulate it, return the output.

The compiler's lowering calls kernels inside one trace that holds a whole model; tests and
benchmarks want one kernel at a time with numpy arrays in and out. `run` builds that trace: each
numpy array (or `ArraySpec`, for timing-only runs) becomes an HBM input tensor, the output an HBM
output tensor, then the kernel is called exactly as the lowering calls it and the program is
simulated on one NeuronCore of the target chip.

    result = run(matmul, [a, b], (m, n), "float32", target="inf2", transpose_b=True)
    result.output, result.total_ns, result.profile.summary
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trnsim import hardware
from trnsim.errors import UnknownNameError
from trnsim.isa import Program
from trnsim.nki.tile import Tile
from trnsim.nki.trace import Trace, tracing
from trnsim.numerics import dtype as as_dtype


@dataclass(frozen=True)
class ArraySpec:
    """An input known only by shape and dtype (timing-only runs need no values)."""

    shape: tuple[int, ...]
    dtype: str


@dataclass
class KernelRun:
    """A kernel's output (None in timing mode), its program and the simulated timeline."""

    output: np.ndarray | None
    program: Program
    result: Any  # trnsim.sim.RunResult

    @property
    def profile(self):
        return self.result.profile

    @property
    def total_ns(self) -> float:
        return self.result.total_ns


def _is_array(value) -> bool:
    return isinstance(value, (np.ndarray, ArraySpec))


class _Binder:
    """Turns numpy arrays / specs into HBM input tiles of one trace, remembering their values."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.feeds: dict[str, np.ndarray] = {}
        self.count = 0

    def tile(self, value) -> Tile:
        name = f"in{self.count}"
        self.count += 1
        if isinstance(value, ArraySpec):
            return self.trace.hbm_tensor(name, tuple(value.shape), as_dtype(value.dtype),
                                         kind="input")
        array = np.asarray(value)
        tile = self.trace.hbm_tensor(name, array.shape, as_dtype(array.dtype), kind="input")
        self.feeds[tile.name] = array
        return tile

    def bind(self, value):
        """Arrays become tiles; sequences holding arrays become tuples of tiles; else as is."""
        if _is_array(value):
            return self.tile(value)
        if isinstance(value, (list, tuple)) and any(_is_array(v) for v in value):
            return tuple(self.bind(v) for v in value)
        return value


def trace_kernel(kernel_fn: Callable, inputs: Sequence, out_shape: Sequence[int], out_dtype,
                 *, target: str = "trn1", **attrs) -> tuple[Trace, Tile, dict[str, np.ndarray]]:
    """Trace `kernel_fn(out, *inputs, **attrs)` into a fresh program; returns (trace, out, feeds)."""
    core = hardware.core(target)
    trace = Trace(getattr(kernel_fn, "__name__", "kernel"), core)
    binder = _Binder(trace)
    with tracing(trace):
        args = [binder.bind(x) for x in inputs]
        kwargs = {k: binder.bind(v) for k, v in attrs.items()}
        out = trace.hbm_tensor("out", tuple(int(s) for s in out_shape), as_dtype(out_dtype),
                               kind="output")
        kernel_fn(out, *args, **kwargs)
        trace.flush()
    return trace, out, binder.feeds


def run(kernel_fn: Callable, inputs: Sequence, out_shape: Sequence[int], out_dtype, *,
        target: str = "trn1", mode: str | None = None, **attrs) -> KernelRun:
    """Trace and simulate one kernel on one NeuronCore of `target` ("trn1", "inf2", "trn2"...).

    `inputs` are passed positionally after `out`; numpy arrays (and `ArraySpec`s) anywhere in
    `inputs` or `attrs` (also inside lists/tuples, e.g. ``extras=(r,)``) become HBM tensors.
    `mode` is "functional" (default when every input has values) or "timing".
    """
    from trnsim.sim import simulate

    trace, out, feeds = trace_kernel(kernel_fn, inputs, out_shape, out_dtype, target=target,
                                     **attrs)
    program = trace.builder.program
    has_specs = len(feeds) < sum(1 for t in program.tensors.values() if t.kind == "input")
    mode = mode or ("timing" if has_specs else "functional")
    result = simulate(program, feeds if mode == "functional" else None, mode=mode,
                      chip=_chip(target))
    output = result.outputs[out.name] if result.outputs is not None else None
    return KernelRun(np.array(output) if output is not None else None, program, result)


def _chip(target: str):
    """The chip named by `target` if it is one (inf2, trn1, ...), else the core's default chip."""
    try:
        return hardware.chip(target)
    except UnknownNameError:  # a core name such as "NeuronCore-v2": the simulator picks its chip
        return None
