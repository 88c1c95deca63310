"""`--search`: enumerate layouts, keep those that fit HBM, rank by throughput per dollar.

Each candidate is an independent task: its compute comes from the shared per-shape timing cache
(every shape the fitting candidates need is simulated once, up front, by the driver), its
collectives from the fabric model (cached on disk too). Tasks run in-process, or on Ray (a local
Ray by default, `address` for a cluster): the same function on the same inputs, so the two give
identical results, in the candidates' order.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from trnsim.errors import InvalidArgumentError, TrnsimError
from trnsim.perf.scale.layout import Layout, Training
from trnsim.perf.scale.memory import training_memory
from trnsim.perf.scale.model import ModelSpec
from trnsim.perf.scale.plan import (
    TrainingPlan,
    compose,
    microbatches_of,
    resolve_layout,
    shapes_for,
)
from trnsim.perf.scale.system import System
from trnsim.perf.scale.timing import Timer, Timing


@dataclass
class SearchResult:
    evaluated: int  # candidates enumerated
    fitting: int  # of them, those that fit HBM
    plans: list[TrainingPlan]  # fitting ones, best first
    rejected: dict[str, int] = field(default_factory=dict)  # reason -> count
    backend: str = "in-process"
    seconds: float = 0.0
    start_seconds: float = 0.0  # of `seconds`, starting a local Ray (0 in-process)

    def to_dict(self, top: int | None = None) -> dict:
        return {"evaluated": self.evaluated, "fitting": self.fitting, "backend": self.backend,
                "seconds": self.seconds, "start_seconds": self.start_seconds, "rejected": self.rejected,
                "plans": [p.to_dict() for p in self.plans[:top]]}


def _powers_of_two(limit: int) -> list[int]:
    return [1 << k for k in range(limit.bit_length()) if (1 << k) <= limit]


SCHEDULES = (("1f1b", 1), ("gpipe", 1), ("interleaved", 2), ("interleaved", 4))


def candidates(model: ModelSpec, system: System, work: Training, *,
               micro_batches: Iterable[int] = (1, 2, 4),
               tps: Iterable[int] | None = None) -> list[tuple[Layout, Training]]:
    """Every TP (a power of two dividing the heads, within a node; or `tps`), PP (a power of
    two up to the layers), micro-batch, SP, ZeRO-1, recomputation, pipeline schedule (1F1B,
    GPipe, interleaved with 2 or 4 chunks per rank) and DP overlap (none, bucketed)."""
    out = []
    allowed = [t for t in _powers_of_two(system.cores_per_node) if model.heads % t == 0]
    if tps is not None:
        allowed = [t for t in allowed if t in set(tps)]
    pps = [p for p in _powers_of_two(min(model.layers, system.cores)) if p <= model.layers]
    for tp, pp, mb, sp, zero1, rc, (schedule, v), overlap in itertools.product(
            allowed, pps, micro_batches, (False, True), (False, True), (False, True),
            SCHEDULES, (0.0, 1.0)):
        if sp and tp == 1:
            continue
        if pp == 1 and schedule != "1f1b":
            continue  # one stage has no schedule to choose
        if v > 1 and model.layers % (pp * v):
            continue
        layout = Layout(tp=tp, pp=pp, sp=sp, zero1=zero1, recompute=rc, virtual_stages=v,
                        schedule=schedule, lnc=system.lnc, dp_overlap=overlap)
        out.append((layout, replace(work, micro_batch=mb)))
    return out


def _prepare(model: ModelSpec, system: System, pairs: list[tuple[Layout, Training]]):
    """Resolve and memory-check each candidate; (ready, rejected reasons)."""
    ready, rejected = [], {}
    for layout, work in pairs:
        try:
            layout = resolve_layout(model, system, layout, work)
            m = microbatches_of(layout, work)
        except TrnsimError as error:
            reason = str(error).split(":")[-1].strip()[:60]
            rejected[reason] = rejected.get(reason, 0) + 1
            continue
        memory = training_memory(model, layout, work, m, system.hbm_bytes_per_core)
        if not memory.fits:
            rejected["does not fit HBM"] = rejected.get("does not fit HBM", 0) + 1
            continue
        ready.append((layout, work, m, memory))
    return ready, rejected


TimingTable = dict[tuple[str, str, str, object], Timing]


def evaluate(model: ModelSpec, system: System, items: list,
             timings: TimingTable) -> list[TrainingPlan]:
    """Compose the plans of prepared candidates (the task body). `timings`: every shape's
    simulated timing, keyed (precision, optimizer, kind, shape), resolved once by the driver,
    so a task reads no timing file and digests no spec."""
    plans = []
    for layout, work, m, memory in items:
        found = []
        for kind, shape in shapes_for(model, layout, work):
            timing = timings.get((work.precision, work.optimizer, kind, shape))
            if timing is None:
                raise TrnsimError(f"{layout.label()}: {kind} {shape.key()} is not in the "
                                  "timing table")
            found.append(timing)
        head = found[1] if len(found) > 1 else Timing(0.0, 0.0, 0.0)
        plans.append(compose(model, system, layout, work, m, memory, found[0], head))
    return plans


def timing_table(system: System, ready: list, model: ModelSpec,
                 progress: Callable[[str], None] | None = None) -> TimingTable:
    """Simulate every distinct shape the candidates need (cache misses only, one child process
    per precision and optimizer), then read each once."""
    wanted: dict[tuple[str, str], dict] = {}
    for layout, work, _, _ in ready:
        for item in shapes_for(model, layout, work):
            wanted.setdefault((work.precision, work.optimizer), {})[item] = None
    table: TimingTable = {}
    for (precision, optimizer), items in wanted.items():
        timer = Timer(system.instance, precision, optimizer, progress)
        timer.ensure(list(items))
        for kind, shape in items:
            table[(precision, optimizer, kind, shape)] = timer.timing(kind, shape)
    return table


def _rank_key(plan: TrainingPlan) -> tuple:
    per_dollar = plan.tokens_per_dollar
    return (-(per_dollar if per_dollar is not None else plan.tokens_per_s), plan.step_ms,
            plan.layout, plan.micro_batch, plan.schedule)


def search(model: ModelSpec, system: System, work: Training, *, backend: str = "ray",
           ray_address: str | None = None, max_days: float | None = None,
           tokens: float | None = None, chunks: int = 8,
           micro_batches: Iterable[int] = (1, 2, 4), tps: Iterable[int] | None = None,
           progress: Callable[[str], None] | None = None) -> SearchResult:
    """The fitting layouts, best throughput per dollar first (per second where the system has
    no price); `max_days`: only those that train `tokens` within that many days."""
    start = time.perf_counter()
    pairs = candidates(model, system, work, micro_batches=micro_batches, tps=tps)
    if backend not in ("ray", "in-process"):
        raise InvalidArgumentError(f"backend {backend!r}: ray or in-process")
    ready, rejected = _prepare(model, system, pairs)
    table = timing_table(system, ready, model, progress)
    if progress:
        progress(f"composing {len(ready)} fitting layouts ({backend})")
    started = [0.0]
    if backend == "ray":
        plans = _run_ray(model, system, ready, table, chunks, ray_address, started)
    else:
        plans = evaluate(model, system, ready, table)
    if max_days is not None:
        if tokens is None:
            raise InvalidArgumentError("a --max-days target needs --tokens")
        plans = [p for p in plans if p.time_to_train(tokens)["days"] <= max_days]
    plans.sort(key=_rank_key)
    return SearchResult(len(pairs), len(ready), plans, rejected, backend,
                        time.perf_counter() - start, started[0])


def _run_ray(model, system, ready, table: TimingTable, chunks: int, address: str | None,
             started_s: list[float]) -> list[TrainingPlan]:
    """`started_s[0]`: seconds spent starting Ray (importing it, ray.init)."""
    begin = time.perf_counter()
    try:
        import ray
    except ImportError:
        raise InvalidArgumentError("Ray is not installed (pip install 'trnsim[cluster]'); or search "
                                   "in-process (--no-ray)") from None
    started = False
    if not ray.is_initialized():
        kwargs = {"address": address} if address else {"num_cpus": 2}
        ray.init(include_dashboard=False, log_to_driver=False, ignore_reinit_error=True,
                 configure_logging=False, **kwargs)
        started = True
    started_s[0] = time.perf_counter() - begin
    try:
        task = ray.remote(evaluate)
        size = max(1, -(-len(ready) // max(1, chunks)))
        shared = [ray.put(value) for value in (model, system, table)]  # stored once
        refs = [task.remote(shared[0], shared[1], ready[i:i + size], shared[2])
                for i in range(0, len(ready), size)]
        return [plan for part in ray.get(refs) for plan in part]
    finally:
        if started:
            ray.shutdown()
