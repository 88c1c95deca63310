"""The training step report: device time by phase and kernel, throughput, MFU, HBM per core.

A step is the graphs executed from one `mark_step` to the next (a `.item()` inside the step
adds its own graph). MFU = the step's TensorE FLOPs (the matmuls trnsim's compiler emitted for
the forward, backward and optimizer: no recomputation, so they are the model's FLOPs) over the
job's dense bf16 peak for the step time, as Neuron's training code computes it (model FLOPs per
second over world size x per-core peak).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from trnsim.runtime.xla.executor import PHASES


@dataclass
class StepReport:
    instance: str
    world_size: int
    mode: str  # which ranks were simulated
    step_ms: float
    phase_ms: dict[str, float]
    samples_per_step: int | None
    throughput_per_s: float | None  # samples per second, whole job
    mfu: float | None
    graphs: int  # graphs executed in the step
    compilations: int  # distinct graphs compiled in the whole run
    kernels_ms: dict[str, float] = field(default_factory=dict)  # op -> ms
    hbm: dict | None = None
    recompilations: list[str] = field(default_factory=list)
    # gradient all-reduces: end-to-end time on the fabric, and the part hidden under the
    # backward (the "collectives" phase adds what the step waits for, total - overlapped, to
    # the scaling of the reduced values on the engines)
    collectives_total_ms: float = 0.0
    collectives_overlapped_ms: float = 0.0
    collective_count: int = 0

    def to_dict(self) -> dict:
        return dict(vars(self))

    def __str__(self) -> str:
        lines = [f"training step on {self.instance} ({self.mode})",
                 f"  device time per step: {self.step_ms:.3f} ms  (" +
                 ", ".join(f"{p} {self.phase_ms.get(p, 0.0):.3f} ms" for p in PHASES) + ")"]
        if self.throughput_per_s is not None:
            lines.append(f"  throughput: {self.throughput_per_s:.1f} samples/s "
                         f"({self.samples_per_step} per step per core x {self.world_size} cores)")
        if self.mfu is not None:
            lines.append(f"  MFU: {self.mfu * 100:.1f}% of dense bf16 peak")
        lines.append(f"  graphs per step: {self.graphs}; compilations in the run: "
                     f"{self.compilations}")
        if self.collective_count:
            lines.append(f"  collectives: {self.collective_count} all-reduce(s), "
                         f"{self.collectives_total_ms:.3f} ms on the fabric, "
                         f"{self.collectives_overlapped_ms:.3f} ms of it overlapping the backward")
        if self.hbm:
            mib = 1 << 20
            h = self.hbm
            lines.append(f"  HBM per NeuronCore: {h['total_bytes'] / mib:.1f} of "
                         f"{h['capacity_bytes'] / mib:.0f} MiB (weights "
                         f"{h['weights_bytes'] / mib:.1f}, gradients "
                         f"{h['gradients_bytes'] / mib:.1f}, optimizer state "
                         f"{h['optimizer_state_bytes'] / mib:.1f}, activations "
                         f"{h['activations_bytes'] / mib:.1f} MiB)")
        if self.kernels_ms:
            lines.append("  time by kernel:")
            for op, ms in sorted(self.kernels_ms.items(), key=lambda kv: -kv[1])[:10]:
                lines.append(f"    {op:<24} {ms:9.3f} ms")
        lines += [f"  {r}" for r in self.recompilations]
        return "\n".join(lines)


def last_step(graphs: list) -> list:
    """The graphs of the last complete step (up to and including the last mark_step graph)."""
    ends = [i for i, g in enumerate(graphs) if g.why == "mark_step"]
    if not ends:
        return graphs[-1:]
    start = ends[-2] + 1 if len(ends) > 1 else 0
    return graphs[start:ends[-1] + 1]


def write_step_trace(path, directory, device=None):
    """One trace of the last step: its graphs' traces (written to `directory` as each graph was
    compiled, see `executor.profile_dir`) one after another, as the device ran them."""
    import json
    from pathlib import Path

    from trnsim.errors import InvalidArgumentError
    from trnsim.runtime.xla.device import DEVICE
    from trnsim.runtime.xla.executor import trace_path
    from trnsim.sim.perfetto import concatenate

    step = last_step((device or DEVICE).graphs)
    files = [trace_path(Path(directory), g.key) for g in step]
    missing = [str(f) for f in files if not f.is_file()]
    if not step or missing:
        raise InvalidArgumentError(f"no trace of the step's graphs in {directory} (graphs are "
                                   f"traced when compiled with the trace directory set): "
                                   f"{', '.join(missing) or 'no step ran'}")
    documents = [json.loads(f.read_text()) for f in files]
    titles = [f"graph {n + 1} of {len(step)} ({g.why})" for n, g in enumerate(step)]
    Path(path).write_text(json.dumps(concatenate(documents, titles)))
    return Path(path)


def step_report(samples_per_step: int | None = None, device=None) -> StepReport:
    from trnsim.runtime.xla.device import DEVICE

    device = device or DEVICE
    executor = device.executor
    if executor is None or not device.graphs:
        from trnsim.errors import InvalidArgumentError

        raise InvalidArgumentError("no step has run on the xla device yet (call xm.mark_step())")
    from trnsim.runtime.xla.collective import simulated_world, world_size

    world = world_size()
    step = last_step(device.graphs)
    phase_ns: dict[str, float] = defaultdict(float)
    kernels: dict[str, float] = defaultdict(float)
    flops = 0
    collectives_ns, exposed_ns, collective_count = 0.0, 0.0, 0
    for g in step:
        c = g.compiled
        for p, ns in (c.phase_ns or {}).items():
            phase_ns[p] += ns
        phase_ns["collectives"] += g.exposed_collective_ns
        collectives_ns += g.collective_ns
        exposed_ns += g.exposed_collective_ns
        collective_count += len(g.collectives)
        for k in c.kernels:
            kernels[k["op"]] += k["ns"] / 1e6
        flops += c.flops
    total_ns = sum(phase_ns.values())
    samples = samples_per_step if samples_per_step is not None else guess_samples(step[-1])
    throughput = samples * world / (total_ns * 1e-9) if samples and total_ns else None
    peak = executor.instance.chip.core.peak_flops("bf16")
    mfu = flops / (total_ns * 1e-9) / peak if total_ns and peak and flops else None
    if world == 1:
        mode = "one rank, simulated"
    elif simulated_world():
        mode = (f"timing mode: one rank simulated, standing for {world} identical data-parallel "
                f"ranks; collectives simulated for {world} ranks")
    else:
        mode = (f"rank 0's step simulated; the other {world - 1} ranks run the same graph "
                f"(numbers on gloo); collectives simulated for {world} ranks")
    hbm = step[-1].hbm.to_dict() if step[-1].hbm is not None else None
    return StepReport(executor.instance.name, world, mode, total_ns / 1e6,
                      {p: phase_ns.get(p, 0.0) / 1e6 for p in PHASES}, samples, throughput, mfu,
                      len(step), len(executor.memory), dict(kernels), hbm,
                      list(executor.recompilations), collectives_ns / 1e6,
                      max(0.0, collectives_ns - exposed_ns) / 1e6,
                      collective_count)


def guess_samples(graph) -> int | None:
    """Samples per step from a script: the leading size of the batch tensors the step read
    (device data that does not belong to a module: inputs transferred by the script)."""
    sizes = [v.shape[0] for v in graph.inputs if v.shape and v.source and "(" not in v.source
             and v.dtype.is_floating_point is False]
    return max(sizes) if sizes else None
