"""`trnsim.trace(model, example_inputs, ...)`: torch_neuronx.trace's call, on simulated hardware.

capture (torch.export) -> pass pipeline -> lowering to one program -> CompiledModel, with a
compile cache: the lowered program of a (kernel-level graph, options, trnsim version) is kept on
disk (JSON, weights excluded: they come from the live model), so a second trace of the same model
skips lowering. The cache lives in $TRNSIM_CACHE_DIR (default ~/.cache/trnsim; "off" disables).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from trnsim import __version__, hardware
from trnsim.hardware.spec import fingerprint
from trnsim.runtime.cores import CoresUnavailableError, visible_cores
from trnsim.runtime.model import CompiledModel, InputSpec, OutputSpec

CACHE_ENV = "TRNSIM_CACHE_DIR"
# torch.export, the NKI tracer and the lowering keep per-process state (the current trace, the
# fake-tensor mode): one trace or lowering at a time; other threads wait their turn
COMPILE_LOCK = threading.RLock()


def trace(model: Any, example_inputs: Any, *, instance: str = "inf2.xlarge", cores: int = 1,
          auto_cast: str | None = None, auto_cast_type: str | None = None,
          optlevel: int | None = None, lnc: int | None = None, workdir: str | None = None,
          dump_after: tuple[str, ...] | str = (), kwargs: dict | None = None,
          tensor_parallel: int | None = None, pipeline_cores: int | None = None,
          model_type: str | None = None) -> CompiledModel:
    """Compile `model` for `instance` (torch_neuronx.trace semantics; see trnsim.compiler).

    auto_cast / auto_cast_type / optlevel default to NEURON_CC_FLAGS, else neuronx-cc's defaults
    (matmult, bf16, -O2); model_type (neuronx-cc's --model-type) to NEURON_CC_FLAGS, else
    ``transformer`` (torch-neuronx's default). The model uses `cores` NeuronCores of the visible ones
    (NEURON_RT_VISIBLE_CORES / NEURON_RT_NUM_CORES): copies of it for throughput (data
    parallel), each copy split over `tensor_parallel` cores. By default a copy takes one core
    if the model fits that core's share of HBM, else the fewest of `cores` that hold it;
    `tensor_parallel=N` asks for N (like neuronx-distributed's tp_degree; `cores` defaults to N).
    On Inferentia (inf1), `pipeline_cores=N` (neuron-cc's --neuroncore-pipeline-cores) cuts the
    model into N stages on N cores (see trnsim.runtime.pipeline).
    """
    with COMPILE_LOCK:
        return _trace(model, example_inputs, instance=instance, cores=cores, auto_cast=auto_cast,
                      auto_cast_type=auto_cast_type, optlevel=optlevel, lnc=lnc, workdir=workdir,
                      dump_after=dump_after, kwargs=kwargs, tensor_parallel=tensor_parallel,
                      pipeline_cores=pipeline_cores, model_type=model_type)


def _trace(model: Any, example_inputs: Any, *, instance: str, cores: int, auto_cast, auto_cast_type,
           optlevel, lnc, workdir, dump_after, kwargs, tensor_parallel,
           pipeline_cores, model_type) -> CompiledModel:
    from trnsim.compiler import capture, options_from_env, run_pipeline

    spec = hardware.instance(instance)
    if cores == 1 and (tensor_parallel or pipeline_cores or 1) > 1:
        cores = tensor_parallel or pipeline_cores  # the cores a split model needs
    options = options_from_env(instance=spec.name, cores=cores, auto_cast=auto_cast,
                               auto_cast_type=auto_cast_type, optlevel=optlevel, lnc=lnc,
                               dump_after=dump_after or None, tensor_parallel=tensor_parallel,
                               pipeline_cores=pipeline_cores, model_type=model_type)
    if options.cores == 1 and (options.pipeline_cores or 1) > 1:  # asked in NEURON_CC_FLAGS
        options = replace(options, cores=options.pipeline_cores)
    physical_cores(options, spec)  # an LNC the chip does not have is an error, before capture
    timings: dict[str, float] = {}
    start = time.perf_counter()
    graph = capture(model, example_inputs, kwargs)
    timings["capture_s"] = time.perf_counter() - start
    if (options.pipeline_cores or 1) > 1:
        return _trace_pipelined(graph, options, spec, timings)
    start = time.perf_counter()
    kernel_graph = run_pipeline(graph, options)
    timings["passes_s"] = time.perf_counter() - start
    placement = place(spec, options.cores, options.lnc)
    ranks = kernel_graph.meta.get("tensor_parallel", 1)
    if ranks > 1:
        _check_fabric(spec, ranks, options.lnc)
    start = time.perf_counter()
    lowered, cached = _lower_cached(kernel_graph, options, spec)
    timings["cache_load_s" if cached else "lower_s"] = time.perf_counter() - start
    compiled = _compiled(kernel_graph, lowered, spec, options, placement)
    compiled.meta.update(timings=timings, cache_hit=cached,
                         cache_key=cache_key(kernel_graph, options, spec.chip.core)
                         if cache_dir() else None,
                         weight_bytes=kernel_graph.weight_bytes(),
                         meta_tensors=graph.meta.get("meta_tensors", {}),
                         memory_plan=kernel_graph.meta.get("memory_plan"),
                         ignored_flags=list(options.ignored_flags))
    if workdir:
        Path(workdir).mkdir(parents=True, exist_ok=True)
        (Path(workdir) / "graph.txt").write_text(kernel_graph.pretty())
    return compiled


def place(spec, copies: int, lnc: int | None) -> list[int]:
    """Round-robin placement of `copies` model copies on the visible cores."""
    total = spec.logical_cores(lnc)
    visible = visible_cores(total, spec.name)
    if copies > len(visible):
        raise CoresUnavailableError(f"cores={copies} on {spec.name}: Requested:{copies} "
                                    f"Available:{len(visible)} visible NeuronCores; copies",
                                    copies, len(visible))
    return [visible[i % len(visible)] for i in range(copies)]


def _trace_pipelined(graph, options, spec, timings: dict) -> CompiledModel:
    """neuron-cc's NeuronCore Pipeline: stages compiled (and cached) one by one."""
    from trnsim.compiler import run_pipeline
    from trnsim.compiler.passes.pipeline import split_stages
    from trnsim.errors import UnsupportedError
    from trnsim.runtime.pipeline import PipelineStage, cache_weights

    core = spec.chip.core
    stages = options.pipeline_cores
    if core.version != 1:
        raise UnsupportedError(f"pipeline_cores={stages}: --neuroncore-pipeline-cores is "
                               f"neuron-cc's, for Inferentia (inf1); on {spec.name} split a model "
                               f"over cores with tensor_parallel")
    if (options.tensor_parallel or 1) > 1:
        raise UnsupportedError("pipeline_cores and tensor_parallel together")
    if options.cores % stages:
        raise CoresUnavailableError(f"cores={options.cores} for copies of a {stages}-stage "
                                    f"pipeline: cores", options.cores, stages)
    placement = place(spec, options.cores, options.lnc)
    start = time.perf_counter()
    front = run_pipeline(graph, replace(options, tensor_parallel=1), stop_after="tensor_parallel")
    parts = split_stages(front, stages)
    compiled_stages, calls, cache_hits = [], [], []
    for part in parts:
        kernel_graph = run_pipeline(part.graph, options, start_after="tensor_parallel")
        lowered, cached = _lower_cached(kernel_graph, options, spec)
        program = lowered.program
        source = cache_weights(program, core) if not cached else \
            (lambda program=program: cache_weights(program(), core))
        compiled_stages.append(PipelineStage(source, list(zip(part.inputs, lowered.inputs,
                                                              strict=True)),
                                             list(zip(part.outputs, lowered.outputs, strict=True))))
        calls += lowered.kernels
        cache_hits.append(cached)
    timings["passes_and_lowering_s"] = time.perf_counter() - start
    inputs, outputs = _specs(front, [n.name for n in front.inputs],
                             [n.name for n in front.outputs])  # stages hand values over by name
    compiled = CompiledModel(name=graph.name, program_source=compiled_stages[0].program_source,
                             inputs=inputs, outputs=outputs, instance=spec.name,
                             options=options.key(), input_structure=front.input_structure,
                             output_structure=front.output_structure, kernels=calls,
                             placement=placement, stages=compiled_stages)
    compiled.meta.update(timings=timings, cache_hit=all(cache_hits), cache_key=None,
                         weight_bytes=front.weight_bytes(),
                         meta_tensors=graph.meta.get("meta_tensors", {}),
                         ignored_flags=list(options.ignored_flags))
    return compiled


def _check_fabric(spec, ranks: int, lnc: int | None) -> None:
    """Tensor-parallel ranks talk through collectives: refuse, before lowering, an instance
    whose fabric trnsim does not model (Inferentia's neuron-cc pipelines across cores instead)."""
    from trnsim.errors import UnsupportedError
    from trnsim.nki.current.world import World
    from trnsim.nki.current.world import place as place_ranks

    try:
        place_ranks(World(ranks=ranks, instance=spec.name), spec.chip, lnc or spec.chip.default_lnc)
    except UnsupportedError as error:
        raise UnsupportedError(f"tensor parallel over {ranks} cores of {spec.name}: {error}") \
            from None


def _specs(graph, input_names: list[str], output_names: list[str]):
    """The model's input and output specs, named as the program (or the stages) call them."""
    inputs = [InputSpec(name, n.shape, n.dtype.name, n.attrs.get("torch_dtype"))
              for name, n in zip(input_names, graph.inputs, strict=True)]
    out_dtypes = graph.meta.get("output_torch_dtypes") or [None] * len(graph.outputs)
    outputs = [OutputSpec(name, n.shape, n.dtype.name, td)
               for name, n, td in zip(output_names, graph.outputs, out_dtypes, strict=True)]
    return inputs, outputs


def _compiled(graph, lowered, spec, options, placement) -> CompiledModel:
    inputs, outputs = _specs(graph, lowered.inputs, lowered.outputs)
    partner = lowered.program.partner if isinstance(lowered.program, _LazyLowering) \
        else lowered.partner
    return CompiledModel(name=graph.name, program_source=lowered.program,
                         partner_source=partner, shared=lowered.shared, inputs=inputs,
                         outputs=outputs,
                         instance=spec.name, options=options.key(),
                         input_structure=graph.input_structure,
                         output_structure=graph.output_structure, kernels=lowered.kernels,
                         placement=placement,
                         tensor_parallel=graph.meta.get("tensor_parallel", 1))


# --- compile cache ------------------------------------------------------------------------------
def cache_dir() -> Path | None:
    value = os.environ.get(CACHE_ENV, str(Path.home() / ".cache" / "trnsim"))
    return None if value.lower() in ("", "off", "0", "none") else Path(value)


def cache_key(graph, options, core) -> str:
    text = graph.pretty(constants=True, sources=True)
    payload = json.dumps({"graph": text, "options": options.key(), "core": fingerprint(core),
                          "trnsim": __version__, "code": _code_digest()}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


# What decides a lowered program (an edited kernel must never read a stale cached program),
# and what decides a report of it (the simulator, the fabric, the report itself).
PROGRAM_CODE = ("kernels", "compiler/lowering", "nki", "isa", "hardware")
REPORT_CODE = ("sim", "collectives", "runtime")
_CODE_DIGESTS: dict[tuple[str, ...], str] = {}


def _code_digest(packages: tuple[str, ...] = PROGRAM_CODE) -> str:
    """A digest of the source files of `packages` (paths under trnsim/)."""
    if packages not in _CODE_DIGESTS:
        root = Path(__file__).resolve().parents[1]
        h = hashlib.sha256()
        for package in packages:
            for path in sorted((root / package).rglob("*.py")):
                h.update(path.read_bytes())
        _CODE_DIGESTS[packages] = h.hexdigest()[:16]
    return _CODE_DIGESTS[packages]


def physical_cores(options, spec) -> int:
    """Physical NeuronCores the lowering splits one logical core's (one tensor-parallel rank's)
    work over: the LNC, 2 by default on Trainium2/3 (only they have logical cores)."""
    from trnsim.hardware.devices import resolve_lnc

    return resolve_lnc(spec, options.lnc)


def _lower_cached(graph, options, spec):
    """(Lowered, cache hit). A hit skips lowering: the cache holds the lowering's small facts
    (tensor names, kernel calls) and the program is lowered again only when something needs its
    instructions (a functional call, a profile, save, or a report not cached yet). Lowering is
    deterministic and, with kernel-call replay, faster than decoding a stored instruction list."""
    from trnsim.compiler.lowering import KernelCall, Lowered, lower

    core = spec.chip.core
    lnc = physical_cores(options, spec)
    root = cache_dir()
    path = root / f"{cache_key(graph, options, core)}.json" if root else None
    if path is not None and path.exists():
        try:
            data = json.loads(path.read_text())
            calls = [KernelCall(**c) for c in data["kernels"]]
            return Lowered(_LazyLowering(graph, core, lnc), data["inputs"], data["outputs"], calls,
                           shared=tuple(data.get("shared", ()))), True
        except (OSError, KeyError, TypeError, ValueError):
            pass  # a stale or unreadable entry: compile again and overwrite it
    lowered = lower(graph, core, lnc=lnc)
    if path is not None:
        write_json(path, {"inputs": lowered.inputs, "outputs": lowered.outputs,
                          "kernels": [vars(c) for c in lowered.kernels],
                          "shared": list(lowered.shared)})
    return lowered, False


class _LazyLowering:
    """The program of a cache hit, lowered on first use (and, under LNC=2, its partner's)."""

    def __init__(self, graph, core, lnc: int = 1) -> None:
        self._args = (graph, core, lnc)
        self._lowered = None

    def _lower(self):
        with COMPILE_LOCK:
            if self._lowered is None:
                from trnsim.compiler.lowering import lower

                graph, core, lnc = self._args
                self._lowered = lower(graph, core, lnc=lnc)
        return self._lowered

    def __call__(self):
        return self._lower().program

    @property
    def partner(self):
        """Core 1's program (None unless LNC=2), lowered with core 0's."""
        if self._args[2] < 2:
            return None
        return lambda: self._lower().partner


def write_json(path: Path, data: dict) -> None:
    """Write a cache entry atomically; a cache that cannot be written is skipped silently."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(path)
    except OSError:
        pass


def report_cache_path(compiled: CompiledModel, copies: int) -> Path | None:
    """Where a model's report for `copies` copies is cached (keyed on program, instance and the
    code that simulates and reports it)."""
    root, key = cache_dir(), compiled.meta.get("cache_key")
    if root is None or key is None:
        return None
    return root / (f"{key}.report-{copies}-{fingerprint(compiled.instance_spec)[:16]}-"
                   f"{_code_digest(REPORT_CODE)}.json")
