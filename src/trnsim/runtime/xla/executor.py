"""Compile a cut graph once per structure and "execute" it: its simulated device time.

Two cache levels, as on Neuron: an in-memory JIT cache keyed on the graph's structure, then an
on-disk persistent cache (NEURON_CC_FLAGS `--cache_dir=`, else NEURON_COMPILE_CACHE_URL, else
trnsim's cache directory; `--no_cache` turns it off) holding the simulated timing of each
compiled graph as JSON. The disk key also covers the compile options (NEURON_CC_FLAGS), the
instance's core and the simulator's code, so a changed flag or simulator recompiles.

Compilation: the adapter `translate.to_ir` -> `compiler.run_pipeline` -> lowering -> one
timing-only run on the instruction-level simulator (the same path as `trnsim.trace`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from trnsim.runtime.xla.collective import all_reduce_ns, overlap
from trnsim.runtime.xla.graph import StepGraph, recompile_reason
from trnsim.runtime.xla.metrics import METRICS

INSTANCE_ENV = "TRNSIM_INSTANCE"
PHASES = ("forward", "backward", "optimizer", "collectives")
PROFILE_ENV = "TRNSIM_XLA_PROFILE_DIR"
# Neuron's runtime capture: NEURON_RT_INSPECT_ENABLE=1 writes profiles to
# NEURON_RT_INSPECT_OUTPUT_DIR, "./output" by default (neuron-explorer environment variables)
INSPECT_ENABLE_ENV, INSPECT_DIR_ENV, INSPECT_DEFAULT_DIR = (
    "NEURON_RT_INSPECT_ENABLE", "NEURON_RT_INSPECT_OUTPUT_DIR", "output")


def profile_dir() -> Path | None:
    """Where each compiled graph's trace goes, or None (tracing is opt-in)."""
    if os.environ.get(PROFILE_ENV):
        return Path(os.environ[PROFILE_ENV])
    if os.environ.get(INSPECT_ENABLE_ENV) == "1":
        return Path(os.environ.get(INSPECT_DIR_ENV) or INSPECT_DEFAULT_DIR)
    return None
OVERLAP_ENV = "TRNSIM_XLA_COLLECTIVE_OVERLAP"  # "0": collectives wait for the whole backward


@dataclass
class CompiledStep:
    """What one compiled graph costs on the device."""

    key: str
    device_ns: float
    phase_ns: dict[str, float] = field(default_factory=dict)
    kernels: list[dict] = field(default_factory=list)  # {op, source, ns, flops}
    flops: int = 0
    engine_utilisation: dict[str, float] = field(default_factory=dict)
    instructions: int = 0
    root_ready_ns: list[float] = field(default_factory=list)  # per graph root: when written


def _cc_flags() -> list[str]:
    return shlex.split(os.environ.get("NEURON_CC_FLAGS", ""))


def persistent_cache_dir() -> Path | None:
    """Neuron's rule: --cache_dir in NEURON_CC_FLAGS wins over NEURON_COMPILE_CACHE_URL."""
    flags = _cc_flags()
    if "--no_cache" in flags:
        return None
    for flag in flags:
        if flag.startswith("--cache_dir="):
            return Path(flag.split("=", 1)[1])
    url = os.environ.get("NEURON_COMPILE_CACHE_URL")
    if url:
        return Path(url)
    from trnsim.runtime.compile import cache_dir

    root = cache_dir()
    return None if root is None else root / "neuron-compile-cache"


class Executor:
    def __init__(self, instance: str = "trn1.2xlarge", timing: bool = True) -> None:
        from trnsim import hardware

        self.instance = hardware.instance(instance)
        self.timing = timing  # False: graphs are keyed and counted but not compiled (DP ranks > 0)
        self.memory: dict[str, CompiledStep] = {}
        self.memory_use: dict[str, object] = {}  # graph key -> HbmUse of its first step
        self.by_site: dict[tuple, StepGraph] = {}
        self.recompilations: list[str] = []

    @classmethod
    def from_env(cls) -> Executor:
        rank = int(os.environ.get("RANK", "0"))
        timing = os.environ.get("TRNSIM_XLA_TIMING", "rank0")
        return cls(os.environ.get(INSTANCE_ENV, "trn1.2xlarge"),
                   timing == "all" or (timing == "rank0" and rank == 0))

    def execute(self, graph: StepGraph) -> None:
        from trnsim.runtime.registry import training_step

        with training_step(self, graph):  # counters for trnsim top / monitor
            self._execute(graph)

    def _execute(self, graph: StepGraph) -> None:
        METRICS.sample("TensorsGraphSize", len(graph.nodes))
        site = (graph.why, graph.source)
        previous = self.by_site.get(site)
        compiled = self.memory.get(graph.key)
        if compiled is None:
            METRICS.count("UncachedCompile")
            if previous is not None and previous.key != graph.key:
                reason = recompile_reason(graph, previous)
                message = (f"trnsim: recompiling the graph cut by {graph.why} at "
                           f"{graph.source}: {reason}")
                self.recompilations.append(message)
                print(message, file=sys.stderr)
            if graph.why == "mark_step":
                from trnsim.runtime.xla.memory import check_fits, hbm_use

                graph.hbm = hbm_use(graph, self.instance)
                check_fits(graph.hbm, self.instance, graph.source)
            start = time.perf_counter()
            compiled, graph.cache = self._compile(graph)
            METRICS.sample("CompileTime", (time.perf_counter() - start) * 1e9)
            self.memory[graph.key] = compiled
            self.memory_use[graph.key] = getattr(graph, "hbm", None)
        else:
            METRICS.count("CachedCompile")
            graph.cache = "memory"
            graph.hbm = getattr(self.memory_use, "get", dict().get)(graph.key)
        self.by_site[site] = graph
        graph.compiled = compiled
        METRICS.count("ExecuteComputation")
        if self.timing:
            self._time_collectives(graph, compiled)
        waited = graph.exposed_collective_ns
        if compiled.device_ns or waited:
            METRICS.sample("ExecuteTime", compiled.device_ns + waited)

    def _time_collectives(self, graph: StepGraph, compiled: CompiledStep) -> None:
        """Each collective on the fabric from when its inputs are written (see
        `collective.overlap`); a graph compiled without write times waits for all of them."""
        durations = [all_reduce_ns(nbytes, ranks, self.instance.name)
                     for _, nbytes, ranks in graph.collectives]
        graph.collective_ns = sum(durations)
        ready_of = dict(zip((r.uid for r in graph.roots), compiled.root_ready_ns, strict=False))
        end = compiled.device_ns
        ready = []
        for uids in (graph.collective_inputs or [[]] * len(durations)):
            times = [ready_of.get(u, end if ready_of else 0.0) for u in uids]
            ready.append(max(times) if times and ready_of else end)
        grads_ready = max(ready, default=end)
        if os.environ.get(OVERLAP_ENV) == "0":  # every collective after the last gradient
            ready = [grads_ready] * len(ready)
        graph.exposed_collective_ns, graph.collective_spans = overlap(
            list(zip(ready, durations, strict=True)), grads_ready)

    # --- compile ------------------------------------------------------------------------------
    def _disk_key(self, graph: StepGraph) -> str:
        from trnsim.hardware.spec import fingerprint
        from trnsim.runtime.compile import PROGRAM_CODE, REPORT_CODE, _code_digest
        from trnsim.runtime.xla.precision import DOWNCAST_ENVS

        payload = json.dumps({"graph": graph.key, "flags": _cc_flags(),
                              "downcast": [os.environ.get(n) for n in DOWNCAST_ENVS],
                              "core": fingerprint(self.instance.chip.core),
                              "code": _code_digest(PROGRAM_CODE) + _code_digest(REPORT_CODE)})
        return hashlib.sha256(payload.encode()).hexdigest()[:20]

    def _compile(self, graph: StepGraph) -> tuple[CompiledStep, str]:
        if not self.timing:
            return CompiledStep(graph.key, 0.0), "skipped"
        root = persistent_cache_dir()
        path = root / f"MODULE_{self._disk_key(graph)}" / "step.json" if root else None
        # the persistent cache keeps figures, not timelines: a graph to trace is simulated again
        if path is not None and path.exists() and profile_dir() is None:
            try:
                METRICS.count("PersistentCacheHit")
                return CompiledStep(**json.loads(path.read_text())), "disk"
            except (OSError, TypeError, ValueError):
                pass
        compiled = simulate_graph(graph, self.instance)
        if path is not None:
            from trnsim.runtime.compile import write_json

            write_json(path, asdict(compiled))
        return compiled, "compiled"


def simulate_graph(graph: StepGraph, instance) -> CompiledStep:
    """Compile `graph` with trnsim's compiler and time it on the instruction-level simulator."""
    from trnsim.compiler import compile_graph, options_from_env
    from trnsim.runtime.xla.translate import to_ir
    from trnsim.sim import run_plan

    # one process drives one NeuronCore (torch-xla's PJRT device): one physical core's program
    lnc = 1 if 1 in instance.chip.lnc_options else None
    options = options_from_env(instance=instance, cores=1, lnc=lnc)
    plan = compile_graph(to_ir(graph), options)
    profile = run_plan(plan, None, mode="timing", chip=instance.chip).profiles[0]
    trace_dir = profile_dir()
    if trace_dir:  # a Perfetto trace of each graph as it is compiled (opt-in, never by default)
        from trnsim.sim import write_trace

        trace_dir.mkdir(parents=True, exist_ok=True)
        write_trace([profile], trace_path(trace_dir, graph.key),
                    titles=[f"graph {graph.key} ({graph.why} at {graph.source})"])
    busy = busy_by_kernel(profile)
    rows = [{"op": op, "source": source, "ns": ns, "phase": phase_of(source)}
            for (op, source), ns in busy.items()]
    total = profile.total_ns
    work = sum(busy.values())
    if work > 0:  # engines run concurrently: a kernel's share of the step by its busy time
        for row in rows:
            row["ns"] *= total / work
    phase_ns = phase_timeline_ns(profile)
    flops = int(np.asarray(profile.flops, dtype=np.int64).sum())
    return CompiledStep(graph.key, total, phase_ns, rows, flops,
                        dict(profile.summary.engine_utilisation), len(profile),
                        output_ready_ns(profile, [spec.name for spec in plan.outputs]))


def output_ready_ns(profile, names: list[str]) -> list[float]:
    """When each output tensor of the compiled program holds its value: the end of the last
    instruction writing it. An output that is a view of a kernel's result is copied out at the
    end of the program; its value was ready when that result was written (the copy's source)."""
    from trnsim.compiler.lowering import VIEWS
    from trnsim.isa import Memory

    program = profile.program
    pcs = profile.pcs if profile.pcs is not None else np.arange(len(profile))
    end = np.zeros(len(program.instructions))
    if len(pcs):
        np.maximum.at(end, np.asarray(pcs, dtype=np.int64), profile.end_ns)
    writers: dict[str, list[int]] = {}
    by_label: dict[str, list[int]] = {}
    for pc, ins in enumerate(program.instructions):
        by_label.setdefault(ins.label, []).append(pc)
        for ap in ins.writes():
            if ap.memory is Memory.HBM:
                writers.setdefault(ap.tensor, []).append(pc)

    def written(name: str) -> float:
        return float(max((end[pc] for pc in writers.get(name, ())), default=0.0))

    ready = []
    for name in names:
        own = writers.get(name, [])
        labels = {program.instructions[pc].label for pc in own}
        if own and all(label.split(":")[0] in VIEWS for label in labels):
            sources = {ap.tensor for label in labels for pc in by_label[label]
                       for ap in program.instructions[pc].reads()
                       if ap.memory is Memory.HBM and ap.tensor != name}
            ready.append(max((written(src) for src in sources), default=0.0))
        else:
            ready.append(written(name))
    return ready


def trace_path(directory: Path, key: str) -> Path:
    return directory / f"graph-{key}.json"


def busy_by_kernel(profile) -> dict[tuple[str, str | None], float]:
    """Engine-busy time (sum of instruction durations) per (kernel op, source line)."""
    program = profile.program
    pcs = profile.pcs if profile.pcs is not None else np.arange(len(profile))
    keys: dict[tuple, int] = {}
    by_pc = np.array([keys.setdefault((ins.label.split(":")[0], ins.source), len(keys))
                      for ins in program.instructions], dtype=np.int64)
    which = by_pc[np.asarray(pcs, dtype=np.int64)] if len(pcs) else np.zeros(0, np.int64)
    busy = np.bincount(which, weights=profile.end_ns - profile.start_ns, minlength=len(keys))
    return {key: float(busy[i]) for key, i in keys.items() if busy[i] > 0}


def phase_timeline_ns(profile) -> dict[str, float]:
    """Device time by phase along the timeline: each instant of the graph goes to the phases
    with an instruction in flight then, shared equally when several are (the forward's last
    kernel overlapping the backward's first), and an instant with none in flight to the phases
    of the next busy one. Not busy time: the engines and 16 DMA queues run at once and a DMA's
    record spans its wait for engines, so summed busy time weighed DMA-heavy kernels many times
    over (a Llama-3-70B TP16 layer's forward, 11.3 ms of timeline, counted 14.9 ms, and its
    7.4 ms optimizer 2.4 ms)."""
    out = dict.fromkeys(PHASES, 0.0)
    program = profile.program
    pcs = np.asarray(profile.pcs if profile.pcs is not None else np.arange(len(profile)),
                     dtype=np.int64)
    if not len(pcs):
        return out
    index = {p: i for i, p in enumerate(PHASES)}
    of_pc = np.array([index[phase_of(ins.source)] for ins in program.instructions], np.int64)
    which = of_pc[pcs]
    start, end = np.asarray(profile.start_ns, float), np.asarray(profile.end_ns, float)
    edges = np.unique(np.concatenate([[0.0, float(profile.total_ns)], start, end]))
    lengths = np.diff(edges)
    active = np.zeros((len(PHASES), len(lengths)), dtype=bool)
    for p in np.unique(which):
        delta = np.zeros(len(edges))
        np.add.at(delta, np.searchsorted(edges, start[which == p]), 1.0)
        np.add.at(delta, np.searchsorted(edges, end[which == p]), -1.0)
        active[p] = np.cumsum(delta)[:-1] > 0.5
    busy = np.flatnonzero(active.any(axis=0))
    if not len(busy):
        return out
    following = busy[np.minimum(np.searchsorted(busy, np.arange(len(lengths))), len(busy) - 1)]
    active = active[:, following]
    share = lengths / active.sum(axis=0)
    for p, i in index.items():
        out[p] = float(share[active[i]].sum())
    return out


def phase_of(source: str | None) -> str:
    """Sources carry their phase: "train.py:14 (backward)" (see `lazy.user_source`)."""
    if source and source.endswith(")") and "(" in source:
        phase = source.rsplit("(", 1)[1][:-1]
        if phase in PHASES:
            return phase
    return "forward"
