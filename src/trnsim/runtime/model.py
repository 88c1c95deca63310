"""CompiledModel: call it like the model; ask it for a report, a profile, or to be saved.

A compiled model holds the lowered instruction program, the input/output structure of the
original model and its compile options. Calling it runs the program functionally on a simulated
NeuronCore and returns torch tensors (or numpy arrays when called with numpy) nested like the
eager model's outputs. The timing of one inference does not depend on the input values, so it is
simulated once (timing-only) and reused by `report()` and `profile()`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trnsim import hardware
from trnsim.errors import InvalidArgumentError
from trnsim.isa import Program
from trnsim.numerics import cast
from trnsim.numerics import dtype as as_dtype


@dataclass(frozen=True)
class InputSpec:
    name: str  # the HBM tensor name in the program
    shape: tuple[int, ...]
    dtype: str  # the program's dtype
    torch_dtype: str | None = None  # what the model was traced with (e.g. torch.int64)


@dataclass(frozen=True)
class OutputSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str  # the program's dtype
    torch_dtype: str | None = None  # what eager PyTorch returns


@dataclass
class CompiledModel:
    name: str
    program_source: Program | Callable[[], Program]  # the program, or what lowers it on demand
    inputs: list[InputSpec]
    outputs: list[OutputSpec]
    instance: str
    options: dict
    input_structure: Any = None  # trnsim.compiler.Structure (or None: positional tensors)
    output_structure: Any = None
    kernels: list = field(default_factory=list)  # lowering.KernelCall records
    meta: dict = field(default_factory=dict)
    placement: list[int] = field(default_factory=list)  # visible cores holding a copy
    tensor_parallel: int = 1  # cores one copy is split over (their programs differ in weights)
    stages: list = field(default_factory=list)  # runtime.pipeline.PipelineStage (inf1 pipeline)
    # LNC=2: core 1's program (or what lowers it), and the HBM tensors both cores share
    partner_source: Program | Callable[[], Program] | None = None
    shared: tuple[str, ...] = ()
    _timing: Any = None
    _loaded: Any = None
    _ranks: Any = None
    _rank_timings: Any = None

    @property
    def program(self) -> Program:
        """The instruction program (lowered now if this model came from the compile cache); of
        a tensor-parallel model, rank 0's; of a pipelined one, its first stage's."""
        if not isinstance(self.program_source, Program):
            self.program_source = self.program_source()
        return self.program_source

    def physical_programs(self) -> list[Program]:
        """The programs of one logical NeuronCore: one, or under LNC=2 one per physical core."""
        if self.partner_source is None:
            return [self.program]
        if not isinstance(self.partner_source, Program):
            self.partner_source = self.partner_source()
        return [self.program, self.partner_source]

    def rank_programs(self) -> list[Program]:
        """One program per tensor-parallel rank (the same instructions, each rank's weights)."""
        return [programs[0] for programs in self._rank_physical_programs()]

    def _rank_physical_programs(self) -> list[list[Program]]:
        """Per tensor-parallel rank, the programs of its physical cores (two under LNC=2)."""
        if self._ranks is None:
            from trnsim.compiler.lowering import rank_program

            own = self.physical_programs()
            self._ranks = [own] + [[rank_program(p, r) for p in own]
                                   for r in range(1, self.tensor_parallel)]
        return self._ranks

    def _simulate(self, arrays, mode: str) -> list:
        """Run one inference: on one core, or on the ranks of a tensor-parallel copy, which
        exchange activations through the collectives fabric of the instance."""
        from trnsim.sim import simulate

        if self.tensor_parallel == 1 and self.partner_source is None:
            return [simulate(self.program, arrays, mode=mode, chip=self.chip)]
        if self.tensor_parallel == 1:  # LNC=2: the two physical cores share the tensors
            from trnsim.sim import simulate_cores

            return simulate_cores(self.physical_programs(), [arrays, None], chip=self.chip,
                                  mode=mode, shared=self.shared)
        from trnsim.nki.current.world import World, place
        from trnsim.sim import CoreSlot, simulate_system

        ranks = self.tensor_parallel
        lnc = self.options.get("lnc") or self.chip.default_lnc
        placement = place(World(ranks=ranks, instance=self.instance), self.chip, lnc)
        programs, slots, inputs = [], [], []
        for r, physical in enumerate(self._rank_physical_programs()):
            for c, program in enumerate(physical):
                programs.append(program)
                slots.append(CoreSlot(chip=placement.chips[r], group=r, rank=r, lnc_index=c))
                inputs.append(arrays if c == 0 else None)
        return simulate_system(programs, inputs if arrays is not None else None, slots=slots,
                               chip=self.chip, mode=mode, world=placement.sim_world(),
                               shared=self.shared)

    @property
    def instance_spec(self):
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
        self._need_values("run it")
        flat = self._flatten(args, kwargs)
        arrays = {spec.name: _to_array(value, spec) for spec, value in zip(self.inputs, flat, strict=True)}
        if self.stages:
            from trnsim.runtime.pipeline import run_stages

            produced = run_stages(self.stages, arrays, self.chip)
        else:
            produced = self._simulate(arrays, "functional")[0].outputs  # replicated on every rank
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
        """The timing-only run of one inference (simulated once, then reused); of a
        tensor-parallel model, the profile of its slowest rank."""
        if self._timing is None:
            if self.stages:
                from trnsim.runtime.pipeline import stage_timings

                self._rank_timings = stage_timings(self.stages, self.chip)
            else:
                self._rank_timings = [r.profile for r in self._simulate(None, "timing")]
            self._timing = max(self._rank_timings, key=lambda p: p.total_ns)
        return self._timing

    def rank_timings(self) -> list:
        """The profile of every core of one inference (one unless tensor parallel, pipelined
        or LNC=2; a pipeline stage's profile starts when its input is ready)."""
        self.timing()
        return self._rank_timings

    def loaded_timing(self, copies: int | None = None):
        """Profiles of `copies` copies running together on one chip (they share its HBM).

        A tensor-parallel copy already spans cores: its ranks' profiles (copies on other cores
        are not simulated alongside; on trn1/inf2, copies of a 2-rank model own whole chips)."""
        if self.tensor_parallel > 1:
            return self.rank_timings()
        if self.stages:
            if self._loaded is None:
                from trnsim.runtime.pipeline import streaming_timings

                self._loaded = streaming_timings(self.stages, self.chip)
            return self._loaded
        per_chip = self.logical_cores_per_chip
        copies = min(copies or per_chip, per_chip)
        if self._loaded is None or len(self._loaded) != copies:
            from trnsim.sim import CoreSlot, copies_contend, simulate_system

            programs = self.physical_programs()
            if not copies_contend(programs, copies, self.chip, shared=self.shared):
                self._loaded = [self.timing()] * copies  # each copy runs as it does alone
            else:
                slots = [CoreSlot(group=c, lnc_index=i) for c in range(copies)
                         for i in range(len(programs))]
                runs = simulate_system(programs * copies, None, slots=slots, mode="timing",
                                       chip=self.chip, shared=self.shared)
                per = len(programs)  # a copy's profile: its slower physical core
                self._loaded = [max((r.profile for r in runs[c * per:(c + 1) * per]),
                                    key=lambda p: p.total_ns) for c in range(copies)]
        return self._loaded

    def report(self, copies: int | None = None):
        """Latency, throughput with one copy per visible core, cost, breakdown (trnsim.perf)."""
        from trnsim.runtime.compile import report_cache_path, write_json
        from trnsim.runtime.report import ModelReport, build_report

        cores_per_copy = max(self.tensor_parallel, len(self.stages))
        visible = copies or max(1, len(self.visible_cores()) // cores_per_copy)
        path = report_cache_path(self, visible)
        if path is not None and path.exists():
            try:
                return self._noted(ModelReport.from_dict(json.loads(path.read_text())))
            except (OSError, KeyError, TypeError, ValueError):
                pass  # unreadable: simulate again and overwrite it
        loaded = self.loaded_timing(min(visible, self.logical_cores_per_chip))
        if self.stages:
            from trnsim.runtime.report import build_pipeline_report

            report = build_pipeline_report(model=self.name, instance=self.instance_spec,
                                           profiles=self.rank_timings(), loaded_profiles=loaded,
                                           batch=self.batch, copies=visible)
        else:
            report = build_report(model=self.name, instance=self.instance_spec,
                                  profile=self.timing(), loaded_profiles=loaded,
                                  batch=self.batch, copies=visible,
                                  tensor_parallel=self.tensor_parallel,
                                  physical=1 if self.partner_source is None else 2,
                                  cores_per_chip=self.logical_cores_per_chip)
        if path is not None:
            write_json(path, report.to_dict())
        return self._noted(report)

    def _noted(self, report):
        """Notes about this traced model rather than its program (kept out of the cache)."""
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
