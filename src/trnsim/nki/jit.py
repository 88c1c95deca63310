"""@nki.jit kernels: trace once per signature, simulate, return outputs like the real stack.

A `Kernel` wraps the user's function. Calling it with arrays traces the function into programs
(cached by argument shapes, dtypes, constants, launch grid and target), runs them on the simulated
NeuronCore(s) and returns the output tensors as numpy arrays (torch tensors if the arguments were
torch tensors). Calling it inside another kernel's trace just inlines the function.

SPMD: ``kernel[g0, g1](...)`` traces one instance per grid point into the same program (the
compiler's loop over instances on one NeuronCore); a grid dimension marked with ``nl.nc(k)`` or
``nl.spmd_dim(n, nl.nc(k))`` places its instances on k NeuronCores that run concurrently and share
HBM. Output tensors allocated in the kernel are shared by all instances.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from math import prod
from typing import Any

import numpy as np

from trnsim import hardware
from trnsim.errors import InvalidArgumentError, LimitExceededError, TrnsimError
from trnsim.isa import Program
from trnsim.nki.language.buffers import nc, spmd_dim
from trnsim.nki.tile import Tile
from trnsim.nki.trace import Trace, current_trace, tracing
from trnsim.nki.typing import TensorSpec
from trnsim.numerics import dtype as as_dtype

TARGET_ENV = "NEURON_PLATFORM_TARGET_OVERRIDE"
DEFAULT_TARGET = "trn1"
MODES = ("auto", "jax", "torchxla", "baremetal", "benchmark", "simulation", "trace")


def resolve_target(platform_target: str | None):
    name = platform_target or os.environ.get(TARGET_ENV) or DEFAULT_TARGET
    return hardware.core(name)


@dataclass
class Traced:
    """The programs of one kernel signature: one per NeuronCore used, plus output names."""

    programs: list[Program]
    outputs: list[str]
    inputs: list[str]
    shared: list[str]
    output_structure: Any = None
    written: set = field(default_factory=set)  # inputs the kernel writes (copied back after a run)


@dataclass
class LatencyResult:
    """nki.benchmark's nc_latency: percentiles in microseconds (the simulation is deterministic)."""

    latency_us: float

    def get_latency_percentile(self, percentile: int) -> float:
        if not 0 <= percentile <= 100:
            raise InvalidArgumentError(f"percentile {percentile} is outside [0, 100]")
        return self.latency_us


@dataclass
class BenchmarkResult:
    nc_latency: LatencyResult
    profile: Any = None


@dataclass
class RunRecord:
    """What the last call produced: per-core results (outputs and profiles)."""

    results: list = field(default_factory=list)

    @property
    def latency_ns(self) -> float:
        return max((r.profile.total_ns for r in self.results), default=0.0)

    @property
    def profile(self):
        return self.results[0].profile if self.results else None


class Kernel:
    def __init__(self, fn: Callable, *, mode: str = "auto", platform_target: str | None = None,
                 grid: tuple = (), **options) -> None:
        if mode not in MODES:
            raise InvalidArgumentError(f"unknown nki.jit mode {mode!r}; use one of {', '.join(MODES)}")
        self.fn = fn
        self.mode = mode
        self.platform_target = platform_target
        self.grid = grid
        self.options = options
        self._cache: dict = {}
        self.last_run: RunRecord | None = None
        self.benchmark_result: BenchmarkResult | None = None
        functools.update_wrapper(self, fn)
        # no __wrapped__: like neuronxcc's kernel objects, a kernel named test_* is not a function
        # pytest would collect (the documentation's test files define such kernels)
        del self.__wrapped__

    # --- launch grid --------------------------------------------------------------------------
    def __getitem__(self, grid) -> Kernel:
        grid = grid if isinstance(grid, tuple) else (grid,)
        clone = Kernel(self.fn, mode=self.mode, platform_target=self.platform_target, grid=grid,
                       **self.options)
        clone._cache = self._cache
        return clone

    # --- calling ------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if current_trace(required=False) is not None:
            return self.fn(*args, **kwargs)  # a sub-kernel: inline into the caller's trace
        mode = "timing" if any(isinstance(a, TensorSpec) for a in _all_args(args, kwargs)) else "functional"
        return self.run(args, kwargs, mode=mode)

    def run(self, args, kwargs, *, mode: str = "functional", target=None):
        from trnsim.sim import simulate_cores

        core = target or resolve_target(self.platform_target)
        bound = self._bind(args, kwargs)
        traced = self.trace(bound, core)
        arrays = {name: _to_numpy(value) for name, value in bound.arguments.items()
                  if _is_array(value)}
        inputs = [{name: arrays[name] for name in traced.inputs if name in arrays}
                  for _ in traced.programs] if mode == "functional" else None
        results = simulate_cores(traced.programs, inputs, mode=mode, shared=traced.shared or None,
                                 chip=_chip_for(core))
        self.last_run = RunRecord(results)
        if mode != "functional":
            return None
        outputs = {}
        for result in results:
            outputs.update(result.outputs or {})
        _copy_back(traced.written, bound.arguments, results)
        values = [outputs[name] for name in traced.outputs]
        if any(_is_torch(a) for a in _all_args(args, kwargs)):
            values = [_to_torch(v) for v in values]
        return _restructure(traced.output_structure, values)

    def _bind(self, args, kwargs) -> inspect.BoundArguments:
        return bind_arguments(self.fn, args, kwargs)

    # --- tracing ------------------------------------------------------------------------------
    def trace(self, bound: inspect.BoundArguments, core) -> Traced:
        # the core itself, not its name: a what-if variant of a core must trace afresh
        key = (core, self.grid, tuple((name, _signature(value)) for name, value in
                                      bound.arguments.items()))
        try:
            return self._cache[key]
        except KeyError:
            pass
        except TypeError:  # an unhashable constant argument: do not cache
            key = None
        traced = self._trace(bound, core)
        if key is not None:
            self._cache[key] = traced
        return traced

    def _trace(self, bound: inspect.BoundArguments, core) -> Traced:
        """Trace with SBUF tiles freed when their loop iteration ends; if they do not fit,
        trace again freeing each after its last use (the compiler's liveness-based allocation;
        the last uses come from a trace with unbounded SBUF)."""
        return trace_fitting_sbuf(lambda prepare: self._trace_with(bound, core, prepare))

    def _trace_with(self, bound: inspect.BoundArguments, core, prepare=None) -> Traced:
        sizes, cores_per_dim = _grid_shape(self.grid)
        n_cores = prod(abs(c) for c in cores_per_dim)
        name = self.fn.__name__
        traces = [Trace(name + (f"_nc{c}" if n_cores > 1 else ""), core) for c in range(n_cores)]
        for i, trace in enumerate(traces):
            if prepare is not None:
                prepare(i, trace)
        for trace in traces[1:]:
            trace.shared_outputs = traces[0].shared_outputs
        for trace in traces:
            trace.kernel_file = getattr(getattr(self.fn, "__code__", None), "co_filename", None)
        args_of: dict[int, dict] = {}
        outputs, structure, first = [], None, True
        for index in (np.ndindex(*sizes) if sizes else [()]):
            core_index = _core_of(index, sizes, cores_per_dim)
            trace = traces[core_index]
            with tracing(trace):
                if core_index not in args_of:
                    args_of[core_index] = tile_arguments(trace, bound.arguments)
                trace.program_ids, trace.grid = tuple(int(i) for i in index), tuple(sizes)
                trace.output_cursor = 0
                trace.enter(-1, len(trace.builder.program.instructions), "SPMD instance", None)
                try:
                    result = self.fn(**args_of[core_index])
                except BaseException:
                    trace.pending = None  # don't emit half-traced work while unwinding
                    raise
                finally:
                    trace.exit()
            if first:
                outputs, structure = _output_names(result)
                first = False
        input_names = [n for n, v in args_of[0].items() if isinstance(v, Tile)] if args_of else []
        programs = [t.builder.program for t in traces]
        for out in outputs:  # a returned nl.hbm / private_hbm scratch tensor is an output too
            programs[0].tensors[out].kind = "output"
        for program in programs:
            for out in outputs:  # a core that never touched an output still shares it
                program.tensors.setdefault(out, programs[0].tensors[out])
        shared = sorted({*outputs, *input_names}) if n_cores > 1 else []
        written = set().union(*(t.written_inputs for t in traces))
        return Traced(programs, outputs, input_names, shared, structure, written)



def trace_fitting_sbuf(trace_with: Callable):
    """Trace (``trace_with(prepare)``, `prepare(i, trace)` called on each core's new trace) with
    SBUF tiles freed when their loop iteration ends; if they (or PSUM tiles) do not fit, trace
    again freeing each after its last use (the compiler's liveness-based allocation; the last
    uses come from a probe trace with unbounded SBUF); if that still does not fit, trace once
    more spilling tiles to HBM and reloading them (`trnsim.nki.spill`). Both NKI front ends
    trace through here.

    If PSUM still runs out, all of that is tried once more with the partition broadcasts the
    compiler would keep in PSUM copied to SBUF instead (the kernel's own PSUM tiles come first);
    a kernel whose own PSUM tiles do not fit gets the error of that last attempt."""
    try:
        return _trace_fitting(trace_with)
    except LimitExceededError as error:
        if "psum allocation" not in str(error):
            raise

    def without_compiler_psum(prepare):
        def prepare_each(i: int, trace: Trace) -> None:
            trace.compiler_psum_allowed = False
            if prepare is not None:
                prepare(i, trace)
        return prepare_each

    return _trace_fitting(lambda prepare: trace_with(without_compiler_psum(prepare)))


def _trace_fitting(trace_with: Callable):
    """`trace_fitting_sbuf`'s three attempts: loop-scoped, liveness-based, spilling."""
    try:
        return trace_with(None)
    except LimitExceededError as error:
        if not _allocation_failure(error):
            raise
    probes: list[Trace] = []
    # the probe only collects last uses; the real trace reports what does not fit
    with contextlib.suppress(LimitExceededError):
        trace_with(lambda i, t: (_overcommit_sbuf(t), probes.append(t)))

    def last_uses(i: int) -> list[int]:
        return probes[i].last_use if i < len(probes) else []

    def uses(i: int) -> list[list[int]]:
        return probes[i].uses if i < len(probes) else []

    try:
        return trace_with(lambda i, t: t.free_after_last_use(last_uses(i)))
    except LimitExceededError as error:
        if not _allocation_failure(error):
            raise
    # still too many live at once: spill to HBM and reload, as the compiler does (nki/spill.py)
    return trace_with(lambda i, t: (t.free_after_last_use(last_uses(i)), t.enable_spilling(uses(i))))


def _allocation_failure(error: LimitExceededError) -> bool:
    """SBUF, or PSUM (where the compiler may hold partition broadcasts: freed after their last
    use once liveness is known), ran out."""
    return "sbuf allocation" in str(error) or "psum allocation" in str(error)


def _overcommit_sbuf(trace: Trace) -> None:
    """A probe trace: on-chip tiles that do not fit overlap others (nothing is simulated)."""
    trace.sbuf.overcommit = True
    trace.psum.overcommit = True


def tile_arguments(trace: Trace, arguments: dict) -> dict:
    """Kernel arguments as the kernel sees them: arrays and placeholders become HBM input tiles
    of the trace, anything else is a compile-time constant."""
    args = {}
    for name, value in arguments.items():
        if _is_array(value) or isinstance(value, TensorSpec):
            shape, dt = _shape_dtype(value)
            args[name] = trace.hbm_tensor(name, shape, dt, kind="input", buffer="shared_hbm")
        else:
            args[name] = value
    return args


def _copy_back(written: set, arguments: dict, results) -> None:
    """Arguments the kernel wrote get their final HBM contents, in place (legacy style)."""
    for name in written:
        target = arguments.get(name)
        final = next((r.hbm_arrays[name] for r in results if name in (r.hbm_arrays or {})), None)
        if final is None:
            continue
        if isinstance(target, np.ndarray):
            np.copyto(target, np.asarray(final).reshape(target.shape))
        elif _is_torch(target):
            target.copy_(_to_torch(np.array(final)).reshape(target.shape))


def _grid_shape(grid: tuple) -> tuple[list[int], list[int]]:
    sizes, cores = [], []
    for dim in grid:
        if isinstance(dim, spmd_dim):
            size, count, interleaved = dim.layout()
            sizes.append(size)
            cores.append(-count if interleaved else count)  # negative: index % count
        elif isinstance(dim, nc):
            sizes.append(dim.count)
            cores.append(dim.count)
        else:
            sizes.append(int(dim))
            cores.append(1)
    for size, count in zip(sizes, cores, strict=True):
        if size % abs(count):
            raise InvalidArgumentError(f"a launch-grid dimension of {size} instances cannot be split "
                                       f"evenly over {count} NeuronCores")
    return sizes, cores


def _core_of(index, sizes, cores) -> int:
    core = 0
    for i, size, count in zip(index, sizes, cores, strict=True):
        core = core * abs(count) + (i % -count if count < 0 else (i * count) // size)
    return core


def _legacy_output(tile: Tile) -> bool:
    return tile.buffer in ("shared_hbm", "private_hbm", "hbm")


def _output_names(result, returnable: Callable[[Tile], bool] = _legacy_output,
                  rule: str = "a kernel returns HBM tensors allocated with buffer=nl.shared_hbm "
                              "(or None)") -> tuple[list[str], Any]:
    """HBM tensor names returned by the kernel and the structure to rebuild (tuple/list/single).
    `returnable` says which tensors the API lets a kernel return; `rule` is the error."""
    if result is None:
        return [], None
    items = list(result) if isinstance(result, (tuple, list)) else [result]
    names = []
    for item in items:
        if not isinstance(item, Tile) or item._storage is None or not returnable(item):
            where = getattr(item, "buffer", type(item).__name__)
            raise InvalidArgumentError(f"{rule}; this one is in {where}")
        names.append(item._storage.name)
    structure = type(result) if isinstance(result, (tuple, list)) else "single"
    return names, structure


def _restructure(structure, values):
    if structure is None:
        return None
    if structure == "single":
        return values[0]
    return structure(values)


def _all_args(args, kwargs):
    return list(args) + list(kwargs.values())


def _is_torch(value) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "detach")


def _is_array(value) -> bool:
    return isinstance(value, np.ndarray) or _is_torch(value)


def _to_numpy(value) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    tensor = value.detach().cpu()
    name = str(tensor.dtype).replace("torch.", "")
    if name == "bfloat16":
        import ml_dtypes

        return tensor.view(dtype=__import__("torch").int16).numpy().view(ml_dtypes.bfloat16)
    return tensor.numpy()


def _to_torch(array: np.ndarray):
    import torch

    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(array))


def _shape_dtype(value) -> tuple[tuple[int, ...], Any]:
    if isinstance(value, TensorSpec):
        from trnsim.nki.language.dtypes import to_dtype

        return value.shape, to_dtype(value.dtype)
    array = _to_numpy(value)
    return tuple(array.shape), as_dtype(array.dtype)


def _signature(value):
    if _is_array(value) or isinstance(value, TensorSpec):
        shape, dt = _shape_dtype(value)
        return ("tensor", shape, dt.name)
    return ("const", value)


def _chip_for(core):
    from trnsim.sim import default_chip

    return default_chip(core)


# --- decorators --------------------------------------------------------------------------------

def jit(fn=None, *, mode: str = "auto", platform_target: str | None = None, **options):
    """@nki.jit or @nki.jit(mode=..., platform_target=...)."""
    if fn is None:
        return lambda f: Kernel(f, mode=mode, platform_target=platform_target, **options)
    if isinstance(fn, Kernel):
        return fn
    return Kernel(fn, mode=mode, platform_target=platform_target, **options)


def trace(fn=None, **options):
    """nki.trace: a kernel (or sub-kernel) traced when called."""
    return jit(fn, mode="trace", **options)


def simulate_kernel(kernel, *args, **kwargs):
    """Run a kernel functionally and return its outputs as numpy arrays."""
    kernel = kernel if isinstance(kernel, Kernel) else Kernel(kernel)
    args = [_to_numpy(a) if _is_array(a) else a for a in args]
    kwargs = {k: _to_numpy(v) if _is_array(v) else v for k, v in kwargs.items()}
    return kernel.run(args, kwargs, mode="functional")


def _decorator(make):
    def wrap(kernel=None, **options):
        if kernel is None or not callable(kernel):
            return lambda k: make(k if isinstance(k, Kernel) else Kernel(k), options)
        return make(kernel if isinstance(kernel, Kernel) else Kernel(kernel), options)
    return wrap


class _Benchmarked(Kernel):
    """nki.benchmark(warmup=, iters=)(kernel): calls run timing-only and fill benchmark_result."""

    def __init__(self, kernel: Kernel, options: dict) -> None:
        super().__init__(kernel.fn, mode="benchmark", platform_target=kernel.platform_target,
                         grid=kernel.grid)
        self.bench_options = options

    def __call__(self, *args, **kwargs):
        self.run(args, kwargs, mode="timing")
        latency_us = self.last_run.latency_ns / 1000.0
        self.benchmark_result = BenchmarkResult(LatencyResult(latency_us), self.last_run.profile)
        return None


class _Profiled(Kernel):
    """nki.profile(working_directory=..., save_trace_name=...)(kernel): run and write the trace."""

    def __init__(self, kernel: Kernel, options: dict) -> None:
        super().__init__(kernel.fn, mode="auto", platform_target=kernel.platform_target,
                         grid=kernel.grid)
        self.profile_options = options

    def __call__(self, *args, **kwargs):
        result = super().__call__(*args, **kwargs)
        directory = self.profile_options.get("working_directory") or "."
        name = self.profile_options.get("save_trace_name") or f"{self.fn.__name__}.json"
        from trnsim.sim import write_trace

        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, name if name.endswith(".json") else name + ".json")
        write_trace([r.profile for r in self.last_run.results], path)
        summary_path = os.path.splitext(path)[0] + ".summary.json"
        import json

        with open(summary_path, "w") as handle:
            json.dump(self.last_run.results[0].profile.to_dict(), handle, indent=2)
        self.trace_path = path
        return result


class _Baremetal(Kernel):
    def __init__(self, kernel: Kernel, options: dict) -> None:
        super().__init__(kernel.fn, mode="baremetal", platform_target=kernel.platform_target,
                         grid=kernel.grid)


benchmark = _decorator(_Benchmarked)
profile = _decorator(_Profiled)
baremetal = _decorator(_Baremetal)


def kernel_error_context(error: TrnsimError) -> TrnsimError:
    return error


def bind_arguments(fn: Callable, args, kwargs) -> inspect.BoundArguments:
    """A kernel's arguments bound to its parameters, defaults applied (a mismatch names it)."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as error:
        raise InvalidArgumentError(f"kernel {fn.__name__}: {error}") from None
    bound.apply_defaults()
    return bound
