"""`compile(model, example_inputs, options) -> ExecutionPlan`: the compiler's one entry point.

capture (torch.export) -> pass pipeline (`passes.PIPELINE`) -> lowering (`lowering.lower`,
through the compile cache) -> one `trnsim.sim.ExecutionPlan`: the programs, the core each runs
on, the tensors they share, the fabric. What a model becomes depends on the options and the
graph, never on who asked:

- one program per physical core of a logical NeuronCore (two under LNC=2 on Trainium2/3);
- a model split over ranks (tensor parallel; `passes.memory` picks the degree unless asked):
  every rank runs those programs with its chunks of the weights, ranks placed on the instance's
  fabric by `trnsim.sim.placement`;
- on Inferentia (inf1) with ``pipeline_cores=N``, neuron-cc's NeuronCore Pipeline: the graph cut
  into N stages (`passes.pipeline.split_stages`), one program per stage and core, each keeping
  its weights on chip when they fit (`lowering.onchip.cache_weights`).

The model's copies (data parallel) go round-robin onto the visible cores (`visible`, from
NEURON_RT_VISIBLE_CORES, given by `runtime`).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trnsim.compiler.cache import COMPILE_LOCK, cache_dir, cache_key, lower_cached
from trnsim.compiler.options import CompileOptions
from trnsim.errors import CoresUnavailableError, UnsupportedError

if TYPE_CHECKING:  # the plan's classes are imported when a compile runs: importing the
    # compiler (its options, its cache's location) does not load the simulator
    from trnsim.sim.execution_plan import ExecutionPlan, PlanFabric


def compile(model: Any, example_inputs: Any, options: CompileOptions, *,
            kwargs: dict | None = None, visible: list[int] | None = None,
            workdir: str | None = None) -> ExecutionPlan:
    """Compile `model` for `options.instance` into an ExecutionPlan (see module doc).
    `visible`: the cores copies may use (default: all of the instance's logical cores). One
    compile at a time per process (`COMPILE_LOCK`); other threads wait their turn."""
    from trnsim.compiler.capture import capture
    from trnsim.sim.collector import collector_paused

    # the collector paused (`trnsim.sim.collector`): capture and the passes make a graph of
    # long-lived nodes, which every collection triggered meanwhile would walk again
    with COMPILE_LOCK, collector_paused(promote=True):
        physical_cores(options)  # an LNC the chip does not have is an error, before capture
        start = time.perf_counter()
        graph = capture(model, example_inputs, kwargs)
        timings = {"capture_s": time.perf_counter() - start}
        return compile_graph(graph, options, visible=visible, workdir=workdir, timings=timings)


def compile_graph(graph, options: CompileOptions, *, visible: list[int] | None = None,
                  workdir: str | None = None, timings: dict | None = None) -> ExecutionPlan:
    """The same, from a graph already captured (`compiler.ir.Graph`): what the training path's
    lazy tensors build (`runtime.xla`) enters here."""
    with COMPILE_LOCK:
        return _compile(graph, options, visible, workdir, dict(timings or {}))


def _compile(graph, options: CompileOptions, visible: list[int] | None, workdir: str | None,
             timings: dict[str, float]) -> ExecutionPlan:
    from trnsim.compiler.passes import run_pipeline
    from trnsim.sim.execution_plan import ExecutionPlan, PlannedCore
    from trnsim.sim.placement import place_copies  # loads the collectives model
    from trnsim.sim.sync import CoreSlot

    spec = options.spec
    physical = physical_cores(options)
    if visible is None:
        visible = list(range(spec.logical_cores(options.lnc)))
    if (options.pipeline_cores or 1) > 1:
        return _compile_pipelined(graph, options, visible, timings)
    start = time.perf_counter()
    kernel_graph = run_pipeline(graph, options)
    timings["passes_s"] = time.perf_counter() - start
    placement = place_copies(visible, options.cores, spec.name)
    ranks = kernel_graph.meta.get("tensor_parallel", 1)
    fabric, chips = _fabric(options, ranks) if ranks > 1 else (None, (0,))
    start = time.perf_counter()
    lowered, cached = lower_cached(kernel_graph, options, spec.chip.core, physical)
    timings["cache_load_s" if cached else "lower_s"] = time.perf_counter() - start
    programs = [lowered.program] + ([lowered.partner] if lowered.partner is not None else [])
    inputs, outputs = _specs(kernel_graph, lowered.inputs, lowered.outputs)
    reads = tuple((s.name, s.name) for s in inputs)
    writes = tuple((s.name, s.name) for s in outputs)
    cores = [PlannedCore(program=c, slot=CoreSlot(chip=chips[r], group=r, rank=r, lnc_index=c),
                         shard=r, inputs=reads if c == 0 else (),
                         outputs=writes if r == 0 and c == 0 else ())
             for r in range(ranks) for c in range(len(programs))]
    plan = ExecutionPlan(
        name=graph.name, instance=spec.name, programs=programs, cores=cores, inputs=inputs,
        outputs=outputs, shared=lowered.shared, fabric=fabric, lnc=options.lnc,
        input_structure=kernel_graph.input_structure,
        output_structure=kernel_graph.output_structure, kernels=lowered.kernels,
        placement=placement)
    plan.meta.update(timings=timings, cache_hit=cached,
                     cache_key=cache_key(kernel_graph, options, spec.chip.core)
                     if cache_dir() else None,
                     weight_bytes=kernel_graph.weight_bytes(),
                     meta_tensors=graph.meta.get("meta_tensors", {}),
                     memory_plan=kernel_graph.meta.get("memory_plan"),
                     ignored_flags=list(options.ignored_flags))
    if workdir:
        Path(workdir).mkdir(parents=True, exist_ok=True)
        (Path(workdir) / "graph.txt").write_text(kernel_graph.pretty())
    return plan


def physical_cores(options: CompileOptions) -> int:
    """Physical NeuronCores the lowering splits one logical core's (one tensor-parallel rank's)
    work over: the LNC, 2 by default on Trainium2/3 (only they have logical cores)."""
    from trnsim.hardware.devices import resolve_lnc

    return resolve_lnc(options.spec, options.lnc)


def _fabric(options: CompileOptions, ranks: int) -> tuple[PlanFabric, tuple[int, ...]]:
    """Tensor-parallel ranks talk through collectives: place them on the instance's fabric, and
    refuse, before lowering, an instance whose fabric trnsim does not model (Inferentia's
    neuron-cc pipelines across cores instead). Returns the fabric and each rank's chip."""
    from trnsim.sim.execution_plan import PlanFabric
    from trnsim.sim.placement import place_ranks

    spec = options.spec
    lnc = options.lnc or spec.chip.default_lnc
    try:
        placement = place_ranks(ranks, spec, lnc)
    except UnsupportedError as error:
        raise UnsupportedError(f"tensor parallel over {ranks} cores of {spec.name}: {error}") \
            from None
    return PlanFabric(spec.name, lnc, placement.endpoints), placement.chips


def _compile_pipelined(graph, options: CompileOptions, visible: list[int],
                       timings: dict) -> ExecutionPlan:
    """neuron-cc's NeuronCore Pipeline: stages compiled (and cached) one by one."""
    from trnsim.compiler.lowering.onchip import cache_weights
    from trnsim.compiler.passes import run_pipeline
    from trnsim.compiler.passes.pipeline import split_stages
    from trnsim.sim.execution_plan import ExecutionPlan, PlannedCore
    from trnsim.sim.placement import place_copies
    from trnsim.sim.sync import CoreSlot

    spec = options.spec
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
    placement = place_copies(visible, options.cores, spec.name)
    start = time.perf_counter()
    front = run_pipeline(graph, replace(options, tensor_parallel=1), stop_after="tensor_parallel")
    parts = split_stages(front, stages)
    per_chip = spec.chip.logical_cores()
    programs, cores, calls, cache_hits = [], [], [], []
    for index, part in enumerate(parts):
        kernel_graph = run_pipeline(part.graph, options, start_after="tensor_parallel")
        lowered, cached = lower_cached(kernel_graph, options, core, 1)
        program = lowered.program
        programs.append(cache_weights(program, core) if not cached else
                        (lambda program=program: cache_weights(program(), core)))
        slot = CoreSlot(chip=index // per_chip, group=index, lnc_index=index % per_chip)
        cores.append(PlannedCore(program=index, slot=slot, stage=index,
                                 inputs=tuple(zip(part.inputs, lowered.inputs, strict=True)),
                                 outputs=tuple(zip(part.outputs, lowered.outputs, strict=True))))
        calls += lowered.kernels
        cache_hits.append(cached)
    timings["passes_and_lowering_s"] = time.perf_counter() - start
    inputs, outputs = _specs(front, [n.name for n in front.inputs],
                             [n.name for n in front.outputs])  # stages hand values over by name
    plan = ExecutionPlan(name=graph.name, instance=spec.name, programs=programs, cores=cores,
                         inputs=inputs, outputs=outputs, lnc=options.lnc,
                         input_structure=front.input_structure,
                         output_structure=front.output_structure, kernels=calls,
                         placement=placement)
    plan.meta.update(timings=timings, cache_hit=all(cache_hits), cache_key=None,
                     weight_bytes=front.weight_bytes(),
                     meta_tensors=graph.meta.get("meta_tensors", {}),
                     ignored_flags=list(options.ignored_flags))
    return plan


def _specs(graph, input_names: list[str], output_names: list[str]):
    """The model's input and output specs, named as the program (or the stages) call them."""
    from trnsim.sim.execution_plan import TensorSpec

    inputs = [TensorSpec(name, tuple(n.attrs.get("whole_shape", n.shape)), n.dtype.name,
                         n.attrs.get("torch_dtype"), n.attrs.get("tp_shard"))
              for name, n in zip(input_names, graph.inputs, strict=True)]
    out_dtypes = graph.meta.get("output_torch_dtypes") or [None] * len(graph.outputs)
    outputs = [TensorSpec(name, n.shape, n.dtype.name, td)
               for name, n, td in zip(output_names, graph.outputs, out_dtypes, strict=True)]
    return inputs, outputs
