"""CompiledModel: call it like the model; ask it for a report, a profile, or to be saved.

A compiled model holds the lowered instruction program, the input/output structure of the
original model and its compile options. Calling it runs the program functionally on a simulated
NeuronCore and returns torch tensors (or numpy arrays when called with numpy) nested like the
eager model's outputs. The timing of one inference does not depend on the input values, so it is
simulated once (timing-only) and reused by `report()` and `profile()`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from trnsim import hardware
from trnsim.errors import InvalidArgumentError
from trnsim.isa import Program
from trnsim.numerics import cast
from trnsim.numerics import dtype as as_dtype
from trnsim.sim.execution_plan import ExecutionPlan, TensorSpec, run_plan, run_plan_loaded

# The model's inputs and outputs as the plan names them (value name, shape, dtypes).
InputSpec = OutputSpec = TensorSpec


@dataclass
class CompiledModel:
    """A compiled model: one `ExecutionPlan` (from `trnsim.compiler.compile` or an artifact) and
    the options it was compiled with. One simulate path, `trnsim.sim.run_plan`, serves every
    plan: one core, a logical core of two (LNC=2), tensor-parallel ranks, pipeline stages."""

    plan: ExecutionPlan
    options: dict
    _profiles: list | None = field(default=None, repr=False)
    _loaded: dict = field(default_factory=dict, repr=False)

    # --- what the plan says -------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def instance(self) -> str:
        return self.plan.instance

    @property
    def inputs(self) -> list[TensorSpec]:
        return self.plan.inputs

    @property
    def outputs(self) -> list[TensorSpec]:
        return self.plan.outputs

    @property
    def input_structure(self):
        return self.plan.input_structure

    @property
    def output_structure(self):
        return self.plan.output_structure

    @property
    def kernels(self) -> list:
        return self.plan.kernels

    @property
    def meta(self) -> dict:
        return self.plan.meta

    @property
    def placement(self) -> list[int]:
        """The visible cores holding a copy."""
        return self.plan.placement

    @property
    def tensor_parallel(self) -> int:
        """Ranks one copy is split over."""
        return self.plan.ranks

    @property
    def program(self) -> Program:
        """The first core's program (lowered now if this model came from the compile cache):
        of a tensor-parallel model rank 0's, of a pipelined one its first stage's."""
        return self.plan.program(0)

    def programs(self) -> list[Program]:
        """What every core of one copy runs, in plan order (each rank's own weights)."""
        return self.plan.core_programs()

    @cached_property
    def instance_spec(self):
        """The `hardware.InstanceSpec` the plan runs on (looked up once)."""
        return hardware.instance(self.instance)

    @property
    def chip(self):
        return self.instance_spec.chip

    @property
    def logical_cores_per_chip(self) -> int:
        """NeuronCores a chip shows this model (its LNC setting, else the chip's default)."""
        return self.chip.logical_cores(self.options.get("lnc"))

    # --- calling ------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        from trnsim.runtime.registry import model_execution

        with model_execution(self) as run:  # counters for `trnsim top` / `trnsim monitor`
            return self._call(run, args, kwargs)

    def _call(self, run, args, kwargs):
        self._need_values("run it")
        flat = self._flatten(args, kwargs)
        arrays = {spec.name: _to_array(value, spec) for spec, value in zip(self.inputs, flat, strict=True)}
        ran = run_plan(self.plan, arrays, mode="functional", chip=self.chip)
        run.profiles = ran.profiles
        produced = ran.values
        # a scalar result is held in a one-element tensor: give it eager's shape () back
        values = [produced[spec.name].reshape(spec.shape) for spec in self.outputs]
        as_torch = any(_is_torch(v) for v in flat) or (not flat)
        converted = [_to_torch(v, spec) if as_torch else v for v, spec in zip(values, self.outputs,
                                                                                strict=True)]
        if self.output_structure is None:
            return converted[0] if len(converted) == 1 else tuple(converted)
        return self.output_structure.rebuild(converted)

    def _need_values(self, action: str) -> None:
        if self.meta.get("meta_tensors"):
            from trnsim.compiler.errors import MetaWeightsError

            raise MetaWeightsError(action, self.meta["meta_tensors"])

    def _flatten(self, args, kwargs) -> list:
        if self.input_structure is not None:
            flat = self.input_structure.flatten((tuple(args), dict(kwargs)))
        else:
            flat = list(args) + list(kwargs.values())
        if len(flat) != len(self.inputs):
            raise InvalidArgumentError(f"{self.name} was traced with {len(self.inputs)} tensor inputs, "
                                       f"called with {len(flat)}")
        from trnsim.compiler.errors import InputShapeError

        for spec, value in zip(self.inputs, flat, strict=True):
            shape = tuple(getattr(value, "shape", ()))
            if shape != spec.shape:
                traced = f"{spec.torch_dtype or spec.dtype}{list(spec.shape)}"
                raise InputShapeError(spec.name, traced, str(list(shape)))
        return flat

    # --- timing -------------------------------------------------------------------------------
    def timing(self):
        """The timing-only run of one inference (simulated once, then reused): the profile of
        its slowest core."""
        return max(self.rank_timings(), key=lambda p: p.total_ns)

    def rank_timings(self) -> list:
        """The profile of every core of one inference, in plan order (one unless tensor
        parallel, pipelined or LNC=2; a pipeline stage's profile runs alone)."""
        if self._profiles is None:
            self._profiles = run_plan(self.plan, None, mode="timing", chip=self.chip).profiles
        return self._profiles

    def loaded_timing(self, copies: int | None = None):
        """Profiles with the chip busy (`trnsim.sim.run_plan_loaded`): `copies` copies of a
        one-core model together on one chip (they share its HBM), or one copy of a model over
        several cores with all of its stages working at once."""
        if copies not in self._loaded:
            self._loaded[copies] = run_plan_loaded(self.plan, copies, alone=self.rank_timings(),
                                                   chip=self.chip)
        return self._loaded[copies]

    def report(self, copies: int | None = None):
        """Latency, throughput with one copy per visible core, cost, breakdown (trnsim.perf)."""
        from trnsim.runtime.compile import report_cache_path, write_json
        from trnsim.runtime.report import ModelReport, build_report

        visible = copies or max(1, len(self.visible_cores()) // self.plan.logical_cores)
        path = report_cache_path(self, visible)
        if path is not None and path.exists():
            try:
                return self._noted(ModelReport.from_dict(json.loads(path.read_text())))
            except (OSError, KeyError, TypeError, ValueError):
                pass  # unreadable: simulate again and overwrite it
        loaded = self.loaded_timing(min(visible, self.logical_cores_per_chip))
        report = build_report(self.plan, instance=self.instance_spec,
                              profiles=self.rank_timings(), loaded_profiles=loaded,
                              batch=self.batch, copies=visible,
                              cores_per_chip=self.logical_cores_per_chip)
        if path is not None:
            write_json(path, report.to_dict())
        return self._noted(report)

    def _noted(self, report):
        """Notes about this traced model rather than its program (kept out of the cache), and
        its end-to-end latency (the host's share depends on the instance's host, not on what
        was simulated)."""
        from trnsim.runtime.host_time import host_time

        host = host_time(self.instance_spec, self.inputs, self.outputs)
        if host is not None:
            report.host = host.to_dict()
            report.end_to_end_ms = report.latency_ms + host.total_ns / 1e6
        if self.meta.get("meta_tensors"):
            kinds = set(self.meta["meta_tensors"].values())
            report.notes.append(f"{len(self.meta['meta_tensors'])} weight tensor(s) on the meta "
                                f"device: timing only (the model cannot be run or saved)"
                                + ("; buffers on meta read as zeros (index tables among them "
                                   "can change the timing slightly)" if "buffer" in kinds else ""))
        return report

    def visible_cores(self) -> list[int]:
        """NEURON_RT_VISIBLE_CORES / NUM_CORES on this model's instance (one copy each)."""
        from trnsim.runtime.cores import visible_cores

        spec = self.instance_spec
        return visible_cores(spec.logical_cores(self.options.get("lnc")), spec.name)

    @property
    def batch(self) -> int:
        """The leading dimension of the first input (what one call processes)."""
        return self.inputs[0].shape[0] if self.inputs and self.inputs[0].shape else 1

    def profile(self, path) -> str:
        """Write the Perfetto trace of one inference (every rank's core); returns the path."""
        from trnsim.sim import write_trace

        return str(write_trace(self.rank_timings(), path))

    # --- saving -------------------------------------------------------------------------------
    def save(self, path) -> str:
        from trnsim.runtime.persist import save_model

        self._need_values("save it")
        return str(save_model(self, path))


def _is_torch(value) -> bool:
    return type(value).__module__.startswith("torch")


def _to_array(value, spec: InputSpec) -> np.ndarray:
    if _is_torch(value):
        from trnsim.compiler.capture import tensor_to_numpy

        value = tensor_to_numpy(value.detach().cpu())
    array = np.asarray(value)
    target = as_dtype(spec.dtype)
    if array.dtype.kind in "iub" and target.is_int:
        info = np.iinfo(target.np_dtype)
        if array.size and (array.min() < info.min or array.max() > info.max):
            from trnsim.errors import LimitExceededError

            bad = array.max() if array.max() > info.max else array.min()
            raise LimitExceededError(f"input {spec.name} value", int(bad), f"the {target.name} "
                                     f"range [{info.min}, {info.max}]", context="the model was "
                                     "compiled for it (int64 is narrowed, as neuronx-cc does)")
        return array.astype(target.np_dtype)  # int64 token ids -> int32, as neuronx-cc does
    return cast(array, target, rounding="rne") if array.dtype != target.np_dtype else array


def _to_torch(array: np.ndarray, spec: OutputSpec):
    import torch

    name = (spec.torch_dtype or "").replace("torch.", "")
    if array.dtype.name == "bfloat16":
        tensor = torch.from_numpy(np.ascontiguousarray(array).view(np.int16)).view(torch.bfloat16)
    elif array.dtype.name.startswith("float8"):
        tensor = torch.from_numpy(array.astype(np.float32))
    else:
        tensor = torch.from_numpy(np.ascontiguousarray(array))
    if name and hasattr(torch, name) and str(tensor.dtype) != f"torch.{name}":
        tensor = tensor.to(getattr(torch, name))
    return tensor.reshape(array.shape)  # np.ascontiguousarray makes a 0-d array 1-d
