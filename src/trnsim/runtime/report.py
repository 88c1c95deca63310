"""Model performance reports built from simulator profiles: latency, throughput, cost, breakdown.

Conventions (stated in every report):
- latency: one inference of the compiled batch on one NeuronCore with the rest of the chip idle
  (device time); end to end: that plus the host's share of a framework call (dispatch, inputs
  copied to the device and outputs back over PCIe: `trnsim.runtime.host_time`), what published
  latencies through torch-neuronx measure;
- throughput: one model copy per visible NeuronCore, all running at once (as torch-neuronx users
  deploy), so copies on one chip share its HBM bandwidth: copies x batch / loaded latency;
- cost per inference: the instance's on-demand $/hour / 3600 / throughput (None without a price);
- bound: of the run's time, the share TensorE was busy ("tensor"), DMA was moving data while
  TensorE idled ("dma"), and neither ("other": vector/scalar/gpsimd work or waiting).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from operator import attrgetter

import numpy as np


@dataclass
class KernelTime:
    label: str  # "k.matmul:matmul_5"
    op: str
    source: str | None
    instructions: int
    start_ns: float
    end_ns: float
    tensor_busy_ns: float
    dma_bytes: int
    flops: int

    @property
    def span_ns(self) -> float:
        return self.end_ns - self.start_ns


@dataclass
class ModelReport:
    model: str
    instance: str
    core: str
    batch: int
    copies: int
    latency_ms: float
    loaded_latency_ms: float
    throughput_per_s: float
    price_per_hour: float | None
    cost_per_inference_usd: float | None
    engine_utilisation: dict[str, float]
    tensor_flops_utilisation: float
    hbm_read_bytes: int
    hbm_write_bytes: int
    sbuf_peak_bytes_per_partition: int
    psum_peak_bytes_per_partition: int
    bound: dict[str, float]
    by_op: dict[str, dict]
    kernels: list[KernelTime] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # one framework call: host dispatch + input copies + `latency_ms` + output copies
    # (`trnsim.runtime.host_time`); None where the instance names no host
    end_to_end_ms: float | None = None
    host: dict = field(default_factory=dict)  # HostTime.to_dict()

    def to_dict(self, *, kernels: bool = True) -> dict:
        data = asdict(self)
        if not kernels:
            data.pop("kernels")
        return data

    @classmethod
    def from_dict(cls, data: dict) -> ModelReport:
        """A report back from `to_dict` (the compile cache keeps reports as JSON)."""
        data = dict(data)
        data["kernels"] = [KernelTime(**k) for k in data.get("kernels", [])]
        return cls(**data)

    def table(self, top: int = 12, width: int = 140) -> str:
        """As text `width` columns wide (the CLI passes the terminal's)."""
        from trnsim.runtime.report_tables import report_table

        return report_table(self, top=top, width=width)

    def __str__(self) -> str:
        return self.table()


def bound_fractions(profile) -> dict[str, float]:
    """Shares of the run with TensorE busy, only DMA busy, and neither."""
    total = profile.total_ns
    if total <= 0:
        return {"tensor": 0.0, "dma": 0.0, "other": 0.0}
    from trnsim.sim.engines import DMA_BASE, engine_name  # only when a report is built

    codes = list(profile.stream_records)
    tensor = profile.busy_intervals([c for c in codes if engine_name(c) == "tensor"])
    dma = profile.busy_intervals([c for c in codes if c >= DMA_BASE])
    tensor_ns = _length(tensor)
    dma_only = _length(_subtract(dma, tensor))
    return {"tensor": tensor_ns / total, "dma": dma_only / total,
            "other": max(0.0, 1.0 - (tensor_ns + dma_only) / total)}


def kernel_times(profile) -> list[KernelTime]:
    """Per kernel (instruction label): span, TensorE busy time, DMA bytes, FLOPs; kernels in the
    order their first instruction ran. Grouped with numpy: a 7B model's decode step runs about
    two million instructions in 600 kernels."""
    from trnsim.sim.engines import DMA_BASE, engine_name  # only when a report is built

    program = profile.program
    repeats = program.repeats
    spans = repeats.spans if repeats is not None and repeats.describes(program) else ()
    by_pc, names, sources = _kernel_of_instructions(program.instructions, spans)
    if profile.pcs is None:  # straight-line: record i ran instruction i
        kernel = by_pc[:len(profile)]
    else:
        pcs = np.asarray(profile.pcs, dtype=np.int64)
        kernel = by_pc[pcs] if len(pcs) else np.zeros(0, np.int64)
    count = len(names)
    is_tensor = np.isin(profile.stream, [c for c in profile.stream_records
                                         if engine_name(c) == "tensor"])
    is_dma = profile.stream >= DMA_BASE
    durations = profile.end_ns - profile.start_ns
    durations[~is_tensor] = 0.0  # adding +0.0 leaves each kernel's sum (from +0.0) as it is
    busy = np.bincount(kernel, weights=durations, minlength=count)  # in record order
    # per kernel: each run of records of one kernel reduced at once, then the (few) runs of a
    # kernel combined; min, max and integer sums are exact in any order, so these equal an
    # element-by-element `np.minimum.at` / `np.add.at` over the records
    instructions = np.bincount(kernel, minlength=count)
    first = np.full(count, len(kernel), dtype=np.int64)
    start = np.full(count, np.inf)
    end = np.full(count, -np.inf)
    dma_bytes = np.zeros(count, dtype=np.int64)
    flops = np.zeros(count, dtype=np.int64)
    if len(kernel):
        heads = np.flatnonzero(np.concatenate([[True], kernel[1:] != kernel[:-1]]))
        runs = kernel[heads]
        np.minimum.at(first, runs, heads)
        np.minimum.at(start, runs, np.minimum.reduceat(profile.start_ns, heads))
        np.maximum.at(end, runs, np.maximum.reduceat(profile.done_ns, heads))
        np.add.at(dma_bytes, kernel[is_dma], np.asarray(profile.column("nbytes", is_dma),
                                                         dtype=np.int64))
        np.add.at(flops, runs, np.add.reduceat(np.asarray(profile.flops, dtype=np.int64), heads))
    ran = [k for k in np.argsort(first, kind="stable") if instructions[k]]
    return [KernelTime(label=names[k], op=names[k].split(":")[0], source=sources.get(names[k]),
                       instructions=int(instructions[k]), start_ns=float(start[k]),
                       end_ns=float(end[k]), tensor_busy_ns=float(busy[k]),
                       dma_bytes=int(dma_bytes[k]), flops=int(flops[k])) for k in ran]


def _kernel_of_instructions(instructions, spans=()) -> tuple[np.ndarray, list[str], dict]:
    """(each instruction's kernel number, kernel labels in order of first appearance, each
    label's source as its last instruction names it). A kernel's instructions come in runs of
    one label, so labels are looked up once a run, not once an instruction (a 7B prefill runs
    5.5M instructions in about 600 kernel calls); a replayed call (`spans`, the program's
    `isa.Repeats`, whose spans are each of one label) is one label, not looked up per
    instruction."""
    if not len(instructions):
        return np.zeros(0, np.int64), [], {}
    label = attrgetter("label")
    found: list[str] = []  # the label of each unit: an instruction, or a replayed span
    starts = []  # where each unit starts, as arrays of consecutive units
    at = 0
    for start, length, _, _ in (*spans, (len(instructions), 0, 0, ())):
        found += map(label, instructions[at:start])
        starts.append(np.arange(at, start, dtype=np.int64))
        if length:
            found.append(instructions[start].label)
            starts.append(np.array([start], dtype=np.int64))
        at = start + length
    labels = np.empty(len(found), dtype=object)  # compared by numpy's loop, not a map
    labels[:] = found
    changed = labels[1:] != labels[:-1]
    heads = np.concatenate(starts)[np.concatenate([[0], np.flatnonzero(changed) + 1])]
    tails = np.append(heads[1:], len(instructions))
    codes: dict[str, int] = {}
    sources: dict = {}
    run_codes = np.empty(len(heads), dtype=np.int64)
    for run, (head, tail) in enumerate(zip(heads.tolist(), tails.tolist(), strict=True)):
        name = instructions[head].label
        run_codes[run] = codes.setdefault(name, len(codes))
        sources[name] = instructions[tail - 1].source
    return np.repeat(run_codes, tails - heads), list(codes), sources


def by_op(kernels: list[KernelTime]) -> dict[str, dict]:
    table: dict[str, dict] = {}
    for k in kernels:
        row = table.setdefault(k.op, {"kernels": 0, "span_ns": 0.0, "tensor_busy_ns": 0.0,
                                      "dma_bytes": 0, "flops": 0})
        row["kernels"] += 1
        row["span_ns"] += k.span_ns
        row["tensor_busy_ns"] += k.tensor_busy_ns
        row["dma_bytes"] += k.dma_bytes
        row["flops"] += k.flops
    return table


def cost_per_inference(price_per_hour: float | None, throughput_per_s: float) -> float | None:
    """USD per inference with the instance fully used: the price of one second over what the
    second serves (= the cost of one batch's instance time, shared by the copies, / batch)."""
    if price_per_hour is None or throughput_per_s <= 0:
        return None
    return price_per_hour / 3600.0 / throughput_per_s


def build_report(plan, *, instance, profiles: list, loaded_profiles: list, batch: int,
                 copies: int, cores_per_chip: int | None = None) -> ModelReport:
    """The report of an `ExecutionPlan`: `profiles` of one inference (one per planned core),
    `loaded_profiles` with the chip busy (`trnsim.sim.run_plan_loaded`). Stages run one after
    another (a pipeline) or, with one stage, its cores together (the slowest is the breakdown)."""
    if len(plan.stages()) > 1:
        return build_pipeline_report(model=plan.name, instance=instance, profiles=profiles,
                                     loaded_profiles=loaded_profiles, batch=batch, copies=copies)
    return core_report(model=plan.name, instance=instance,
                       profile=max(profiles, key=lambda p: p.total_ns),
                       loaded_profiles=loaded_profiles, batch=batch, copies=copies,
                       tensor_parallel=plan.ranks, physical=plan.physical,
                       cores_per_chip=cores_per_chip)


def core_report(*, model: str, instance, profile, loaded_profiles, batch: int,
                copies: int | None = None, tensor_parallel: int = 1,
                physical: int = 1, cores_per_chip: int | None = None) -> ModelReport:
    """`loaded_profiles`: the copies of one chip run together (or the ranks of one
    tensor-parallel copy); `copies`: all copies on the instance (chips are alike, so each chip's
    copies take the loaded latency); `tensor_parallel`: cores per copy; `physical`: physical
    cores per logical core running its kernels split (LNC=2), `profile` the slower one's;
    `cores_per_chip`: logical cores per chip (default: the chip's default LNC)."""
    summary = profile.summary
    copies = copies or max(1, len(loaded_profiles) // tensor_parallel)
    loaded_ns = max((p.total_ns for p in loaded_profiles), default=profile.total_ns)
    throughput = copies * batch / (loaded_ns * 1e-9) if loaded_ns > 0 else 0.0
    price = instance.price_per_hour
    per_chip = cores_per_chip or instance.chip.logical_cores()
    chips_used = max(1, -(-copies * tensor_parallel // per_chip))
    cost = cost_per_inference(price, throughput)
    kernels = kernel_times(profile)
    if tensor_parallel == 1 and physical > 1:
        notes = [f"latency: batch {batch} on one logical NeuronCore (LNC={physical}: each "
                 f"kernel split over {physical} {profile.core.name}s sharing HBM; the breakdown "
                 f"is the slower core's); throughput: {copies} copies (one per visible logical "
                 f"core) on {chips_used} chip(s) of {instance.name}"]
    elif tensor_parallel == 1:
        notes = [f"latency: batch {batch} on one {profile.core.name}; throughput: {copies} "
                 f"copies (one per visible core) on {chips_used} chip(s) of {instance.name}"]
    else:
        cores = (f"{profile.core.name}s" if physical == 1 else
                 f"logical NeuronCores (LNC={physical}: {physical} {profile.core.name}s each, "
                 f"each kernel split between them)")
        notes = [f"tensor parallel: each copy's weights split over {tensor_parallel} "
                 f"{cores} exchanging activations over the collectives fabric; "
                 f"latency: batch {batch}, the slowest rank (its profile is the breakdown); "
                 f"throughput: {copies} copies on {chips_used} chip(s) of {instance.name}"]
    if price is None:
        notes.append(f"no published on-demand price for {instance.name}: cost not computed")
    return ModelReport(
        model=model, instance=instance.name, core=profile.core.name, batch=batch, copies=copies,
        latency_ms=profile.total_ns / 1e6, loaded_latency_ms=loaded_ns / 1e6,
        throughput_per_s=throughput, price_per_hour=price, cost_per_inference_usd=cost,
        engine_utilisation=dict(summary.engine_utilisation),
        tensor_flops_utilisation=summary.tensor_flops_utilisation,
        hbm_read_bytes=summary.hbm_read_bytes, hbm_write_bytes=summary.hbm_write_bytes,
        sbuf_peak_bytes_per_partition=summary.sbuf_peak_bytes_per_partition,
        psum_peak_bytes_per_partition=summary.psum_peak_bytes_per_partition,
        bound=bound_fractions(profile), by_op=by_op(kernels), kernels=kernels, notes=notes)


def build_pipeline_report(*, model: str, instance, profiles: list, loaded_profiles: list,
                          batch: int, copies: int) -> ModelReport:
    """A neuron-cc pipeline: latency is the stages one after another; a copy finishes a request
    every slowest-stage time (stages streaming, each chip's stages sharing its DRAM); the
    breakdown lists every stage's kernels on one time line; engines are the slowest stage's."""
    slowest = max(profiles, key=lambda p: p.total_ns)
    loaded = max(loaded_profiles, key=lambda p: p.total_ns)
    report = core_report(model=model, instance=instance, profile=slowest,
                         loaded_profiles=[loaded], batch=batch, copies=copies,
                         tensor_parallel=len(profiles))
    kernels, offset = [], 0.0
    for profile in profiles:
        for k in kernel_times(profile):
            k.start_ns += offset
            k.end_ns += offset
            kernels.append(k)
        offset += profile.total_ns
    report.latency_ms = offset / 1e6
    report.kernels, report.by_op = kernels, by_op(kernels)
    report.hbm_read_bytes = sum(p.summary.hbm_read_bytes for p in profiles)
    report.hbm_write_bytes = sum(p.summary.hbm_write_bytes for p in profiles)
    from trnsim.sim.execution_plan import weights_on_chip

    resident = sum(weights_on_chip(p.program) for p in profiles)
    report.notes = [f"neuron-cc pipeline: {len(profiles)} stages on {len(profiles)} "
                    f"{slowest.core.name}s, {resident} with their weights cached on chip; latency: "
                    f"batch {batch} through every stage; throughput: {copies} copies streaming "
                    f"(slowest stage {loaded.total_ns / 1e6:.3f} ms with its chip busy)"]
    return report


# --- interval helpers (sorted disjoint intervals as (starts, ends) arrays) --------------------
def _length(intervals: tuple[np.ndarray, np.ndarray]) -> float:
    """Their total length, added one after another (Python's `sum`, as before vectorising)."""
    starts, ends = intervals
    return sum((ends - starts).tolist())


def _subtract(a: tuple[np.ndarray, np.ndarray],
              b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The parts of `a` outside `b`, in order: each interval of `a` cut by the gaps between
    `b`'s intervals (every end point is one of theirs: no arithmetic, so exact)."""
    a_start, a_end = a
    gap_start = np.concatenate([[-np.inf], b[1]])
    gap_end = np.concatenate([b[0], [np.inf]])
    first = np.searchsorted(gap_end, a_start, side="right")  # first gap ending after the start
    stop = np.searchsorted(gap_start, a_end, side="left")  # gaps starting before the end
    counts = np.maximum(stop - first, 0)
    owner = np.repeat(np.arange(len(a_start)), counts)
    gap = (np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
           + np.repeat(first, counts))
    starts = np.maximum(a_start[owner], gap_start[gap])
    ends = np.minimum(a_end[owner], gap_end[gap])
    keep = starts < ends
    return starts[keep], ends[keep]
