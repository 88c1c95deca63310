"""`trnsim.trace(model, example_inputs, ...)`: torch_neuronx.trace's call, on simulated hardware.

Options from the keyword arguments and NEURON_CC_FLAGS, the visible cores from
NEURON_RT_VISIBLE_CORES / NEURON_RT_NUM_CORES, then `trnsim.compiler.compile` makes the
`ExecutionPlan` a `CompiledModel` runs. Reports are cached beside the compile cache's programs
(`trnsim.compiler.cache`), keyed on the program, the instance and the code that simulates them.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from trnsim import hardware
from trnsim.compiler.cache import PROGRAM_CODE, REPORT_CODE, cache_dir, code_digest, write_json
from trnsim.hardware.spec import fingerprint
from trnsim.runtime import trace_cache
from trnsim.runtime.cores import visible_cores
from trnsim.runtime.model import CompiledModel

# The compile cache lives in `trnsim.compiler.cache`; its names are re-exported for callers here.
_code_digest = code_digest
__all__ = ["PROGRAM_CODE", "REPORT_CODE", "cache_dir", "place", "report_cache_path", "trace",
           "write_json"]


def trace(model: Any, example_inputs: Any, *, instance: Any = "inf2.xlarge", cores: int = 1,
          auto_cast: str | None = None, auto_cast_type: str | None = None,
          optlevel: int | None = None, lnc: int | None = None, workdir: str | None = None,
          dump_after: tuple[str, ...] | str = (), kwargs: dict | None = None,
          tensor_parallel: int | None = None, pipeline_cores: int | None = None,
          model_type: str | None = None, quantize: str | None = None) -> CompiledModel:
    """Compile `model` for `instance` (a name or an InstanceSpec; torch_neuronx.trace semantics,
    see trnsim.compiler).

    auto_cast / auto_cast_type default to NEURON_CC_FLAGS, else neuronx-cc's defaults (matmult,
    bf16); `optlevel` is checked and reported as an ignored flag (one pass pipeline);
    `model_type` (neuronx-cc's --model-type) to NEURON_CC_FLAGS, else ``transformer``
    (torch-neuronx's default). `quantize="int8"` stores linear weights as int8, dequantized on
    chip (NxD Inference's weight-only quantization; trnsim.compiler.passes.quantize). The model
    uses `cores` NeuronCores of the visible ones (NEURON_RT_VISIBLE_CORES /
    NEURON_RT_NUM_CORES): copies of it for throughput (data
    parallel), each copy split over `tensor_parallel` cores. By default a copy takes one core
    if the model fits that core's share of HBM, else the fewest of `cores` that hold it;
    `tensor_parallel=N` asks for N (like neuronx-distributed's tp_degree; `cores` defaults to N).
    On Inferentia (inf1), `pipeline_cores=N` (neuron-cc's --neuroncore-pipeline-cores) cuts the
    model into N stages on N cores (see trnsim.compiler.compile).
    """
    from trnsim.compiler import compile, options_from_env
    from trnsim.compiler.compile import physical_cores

    spec = hardware.instance(instance) if isinstance(instance, str) else instance
    if cores == 1 and (tensor_parallel or pipeline_cores or 1) > 1:
        cores = tensor_parallel or pipeline_cores  # the cores a split model needs
    options = options_from_env(instance=spec, cores=cores, auto_cast=auto_cast,
                               auto_cast_type=auto_cast_type, optlevel=optlevel, lnc=lnc,
                               dump_after=dump_after or None, tensor_parallel=tensor_parallel,
                               pipeline_cores=pipeline_cores, model_type=model_type,
                               quantize=quantize)
    if options.cores == 1 and (options.pipeline_cores or 1) > 1:  # asked in NEURON_CC_FLAGS
        options = replace(options, cores=options.pipeline_cores)
    physical_cores(options)  # an LNC the chip does not have is an error, before anything else
    visible = visible_cores(spec.logical_cores(options.lnc), spec.name)
    def compile_now():
        return compile(model, example_inputs, options, kwargs=kwargs, visible=visible,
                       workdir=workdir)

    key = trace_cache.trace_key(model, example_inputs, kwargs, options, visible, workdir)
    plan = trace_cache.load(key, compile_now) if key else None
    if plan is None:
        plan = compile_now()
        if key:
            trace_cache.store(key, plan)
    compiled = CompiledModel(plan, options.key())
    compiled.instance_spec = spec  # resolved once, here
    return compiled


def place(spec, copies: int, lnc: int | None) -> list[int]:
    """Round-robin placement of `copies` model copies on the visible cores."""
    from trnsim.sim.placement import place_copies

    return place_copies(visible_cores(spec.logical_cores(lnc), spec.name), copies, spec.name)


def report_cache_path(compiled: CompiledModel, copies: int) -> Path | None:
    """Where a model's report for `copies` copies is cached (keyed on program, instance and the
    code that simulates and reports it)."""
    root, key = cache_dir(), compiled.meta.get("cache_key")
    if root is None or key is None:
        return None
    return root / (f"{key}.report-{copies}-{fingerprint(compiled.instance_spec)[:16]}-"
                   f"{code_digest(REPORT_CODE)}.json")
