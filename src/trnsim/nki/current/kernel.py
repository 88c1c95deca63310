"""@nki.jit for the current API: ``kernel(...)``, ``kernel[lnc](...)``, ``nki.simulate(kernel)``.

A call traces the kernel once per physical core it runs on — ``kernel[2]`` on trn2/trn3 is one
logical NeuronCore of two physical cores, ``nl.program_id(0)`` in {0, 1} — and, for a collective
launch (`World`), once per rank; the programs run together on the simulated chip(s)
(`trnsim.sim.simulate_system`). Arguments: numpy arrays or torch tensors (outputs come back in the
same framework), `nt.tensor[...]` placeholders (timing-only), and any other Python values
(compile-time constants). Kernel inputs may be written; the caller's arrays are updated, as
``nki.simulate`` documents. Outputs must be `nl.shared_hbm` tensors (nki 0.3+).

trnsim has no device, so ``@nki.jit`` always simulates; ``NKI_SIMULATOR=1`` (AWS's switch that
reroutes @nki.jit to its CPU simulator) is therefore accepted and changes nothing.
"""

from __future__ import annotations

import functools
import inspect
import os

import numpy as np

from trnsim import hardware
from trnsim.errors import InvalidArgumentError, UnsupportedError
from trnsim.nki.current.trace import CurrentTrace
from trnsim.nki.current.world import PerRank, World, place
from trnsim.nki.jit import (
    RunRecord,
    _all_args,
    _is_array,
    _is_torch,
    _output_names,
    _restructure,
    _signature,
    _to_numpy,
    _to_torch,
    bind_arguments,
    tile_arguments,
    trace_fitting_sbuf,
)
from trnsim.nki.tile import Tile
from trnsim.nki.trace import current_trace, tracing
from trnsim.nki.typing import TensorSpec

TARGET_ENV = "NEURON_PLATFORM_TARGET_OVERRIDE"
DEFAULT_TARGET = "trn3"  # nki.simulate's default when no device is detected (nki_simulator.rst)


def default_target(platform_target: str | None = None):
    return hardware.core(platform_target or os.environ.get(TARGET_ENV) or DEFAULT_TARGET)


class Kernel:
    """A current-API kernel: call it, index it with an LNC degree, or simulate it."""

    def __init__(self, fn, *, platform_target: str | None = None, lnc: int | None = None,
                 **options) -> None:
        self.fn = fn
        self.platform_target = platform_target
        self.lnc = lnc
        self.options = options
        self._cache: dict = {}
        self.last_run: RunRecord | None = None
        functools.update_wrapper(self, fn)

    def __getitem__(self, lnc) -> Kernel:
        if isinstance(lnc, tuple) or not isinstance(lnc, int) or lnc < 1:
            raise InvalidArgumentError(f"kernel[{lnc!r}]: the launch takes one number, the logical "
                                       f"NeuronCore degree (kernel[1] or kernel[2])")
        clone = Kernel(self.fn, platform_target=self.platform_target, lnc=lnc, **self.options)
        clone._cache = self._cache
        return clone

    def __call__(self, *args, **kwargs):
        if current_trace(required=False) is not None:
            return self.fn(*args, **kwargs)  # a sub-kernel: inlined into the caller's trace
        mode = "timing" if any(isinstance(a, TensorSpec) for a in _all_args(args, kwargs)) \
            else "functional"
        return self.run(args, kwargs, mode=mode)

    # --- running --------------------------------------------------------------------------------
    def run(self, args, kwargs, *, mode: str = "functional", world: World | None = None,
            target=None):
        """`target`: a `hardware.CoreSpec` to run on (as the legacy `Kernel.run` takes; e.g.
        `trnsim kernel run --target`), else the kernel's platform target or the default."""
        from trnsim.sim import CoreSlot, default_chip, simulate_system

        core = target or default_target(self.platform_target)
        chip = default_chip(core)
        lnc = self.lnc or 1
        if lnc > 1 and lnc not in chip.lnc_options:
            raise UnsupportedError(f"kernel[{lnc}]: LNC={lnc} needs a chip with logical NeuronCores "
                                   f"(Trainium2/Trainium3); the target is {core.name} on {chip.name}")
        world = world or World()
        placement = place(world, chip, lnc)
        bound = self._bind(args, kwargs)
        programs, slots, inputs, traced = [], [], [], []
        for rank in range(world.ranks):
            arguments = {k: (v.of(rank) if isinstance(v, PerRank) else v)
                         for k, v in bound.arguments.items()}
            record = self._trace(arguments, core, lnc, rank, world.ranks)
            traced.append((record, arguments))
            arrays = {k: _to_numpy(v) for k, v in arguments.items() if _is_array(v)}
            for c, program in enumerate(record.programs):
                programs.append(program)
                slots.append(CoreSlot(chip=placement.chips[rank], group=rank, rank=rank,
                                      lnc_index=c))
                inputs.append({n: arrays[n] for n in record.inputs if n in arrays}
                              if mode == "functional" else None)
        shared = sorted({t.name for p in programs for t in p.tensors.values()
                         if t.kind in ("input", "output")})
        results = simulate_system(programs, inputs if mode == "functional" else None, slots=slots,
                                  chip=chip, mode=mode, shared=shared, world=placement.sim_world())
        self.last_run = RunRecord(results)
        if mode != "functional":
            return None
        outputs, first = [], 0
        for record, arguments in traced:
            outputs.append(_collect(record, arguments, results[first]))
            first += len(record.programs)
        return outputs[0] if world.ranks == 1 else outputs

    def _bind(self, args, kwargs) -> inspect.BoundArguments:
        return bind_arguments(self.fn, args, kwargs)

    # --- tracing ------------------------------------------------------------------------------
    def _trace(self, arguments: dict, core, lnc: int, rank: int, ranks: int) -> Traced:
        key = (core.name, self.lnc, rank, ranks,
               tuple((name, _signature(value)) for name, value in arguments.items()))
        try:
            return self._cache[key]
        except KeyError:
            pass
        except TypeError:
            key = None
        record = trace_kernel(self.fn, arguments, core, lnc=lnc, grid=(lnc,) if self.lnc else (),
                              rank=rank, ranks=ranks)
        if key is not None:
            self._cache[key] = record
        return record


class Traced:
    """A kernel's programs for one rank (one per physical core) and its output names."""

    def __init__(self, programs, outputs, inputs, written, structure) -> None:
        self.programs, self.outputs, self.inputs = programs, outputs, inputs
        self.written, self.structure = written, structure


def trace_kernel(fn, arguments: dict, core, *, lnc: int = 1, grid: tuple = (), rank: int = 0,
                 ranks: int = 1) -> Traced:
    """The kernel's programs; SBUF tiles that do not fit when freed at the end of their loop
    iteration are freed after their last use instead (`trace_fitting_sbuf`)."""
    return trace_fitting_sbuf(lambda prepare: _trace_once(fn, arguments, core, lnc, grid, rank,
                                                          ranks, prepare))


def _trace_once(fn, arguments: dict, core, lnc: int, grid: tuple, rank: int, ranks: int,
                prepare) -> Traced:
    suffix = f"_r{rank}" if ranks > 1 else ""
    traces = [CurrentTrace(fn.__name__ + suffix + (f"_nc{c}" if lnc > 1 else ""), core,
                           program_id=c, grid=grid, rank=rank, ranks=ranks) for c in range(lnc)]
    if prepare is not None:
        for c, trace in enumerate(traces):
            prepare(c, trace)
    outputs, structure, input_names, written = [], None, [], set()
    for c, trace in enumerate(traces):
        trace.shared_outputs = traces[0].shared_outputs
        trace.kernel_file = getattr(getattr(fn, "__code__", None), "co_filename", None)
        with tracing(trace):
            args = tile_arguments(trace, arguments)
            trace.enter(-1, 0, "kernel", None)
            try:
                result = fn(**args)
            except BaseException:
                trace.pending = None
                raise
            finally:
                trace.exit()
        names, shape = _output_names(result, _returnable, _OUTPUT_RULE)
        if c == 0:
            outputs, structure = names, shape
            input_names = [n for n, v in args.items() if isinstance(v, Tile)]
        written |= trace.written_inputs
    programs = [t.builder.program for t in traces]
    for program in programs:
        for name in outputs:  # a core that never touched an output still shares it
            program.tensors.setdefault(name, programs[0].tensors[name])
    return Traced(programs, outputs, input_names, written, structure)


def _returnable(tile: Tile) -> bool:
    """nki 0.3+ kernels return nl.shared_hbm tensors (or their inputs)."""
    return tile._storage.buffer == "shared_hbm" or tile._storage.is_input


_OUTPUT_RULE = ("a kernel returns nl.shared_hbm tensors (nki 0.3+): allocate outputs with "
                "buffer=nl.shared_hbm")


def _collect(record: Traced, arguments: dict, result):
    """The rank's outputs (copies, in the arguments' framework); written inputs copied back."""
    torch_in = any(_is_torch(v) for v in arguments.values())
    arrays = {**(result.hbm_arrays or {}), **(result.outputs or {})}
    for name in record.written:
        target = arguments.get(name)
        if isinstance(target, np.ndarray):
            np.copyto(target, arrays[name])
        elif _is_torch(target):
            target.copy_(_to_torch(np.array(arrays[name])))
    values = [np.array(arrays[name]) for name in record.outputs]
    if torch_in:
        values = [_to_torch(v) for v in values]
    return _restructure(record.structure, values)


def jit(fn=None, *, mode: str | None = None, platform_target: str | None = None, **options):
    """@nki.jit or @nki.jit(platform_target="trn2", ...)."""
    if fn is None:
        return lambda f: jit(f, mode=mode, platform_target=platform_target, **options)
    if isinstance(fn, Kernel):
        return fn
    return Kernel(fn, platform_target=platform_target, **options)


def simulate(kernel, *, world: World | None = None):
    """nki.simulate(kernel)(*arrays): run on the simulator, outputs in the arguments' framework.
    `world` (a trnsim extension) launches it on several ranks for nki.collectives."""
    kernel = kernel if isinstance(kernel, Kernel) else Kernel(kernel)

    def run(*args, **kwargs):
        return kernel.run(args, kwargs, mode="functional", world=world)
    return run
