"""`trnsim serve --simulate`: a deployment of replicas under a workload, and what users see.

Requests are dispatched round-robin to the replicas as they arrive (llmperf's data-parallel
endpoints are visited round-robin), each replica schedules its own with continuous batching
(`scheduler.Replica`), and the per-request times are gathered into TTFT, TPOT and inter-token
latency percentiles, throughput, goodput under SLOs, and KV-cache use.

The KV cache's capacity comes from HBM: the NeuronCores of a replica hold its share of the
weights (bf16) and, within ``KV_MEMORY_FRACTION`` of their memory, the cache.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from trnsim import hardware
from trnsim.errors import InvalidArgumentError
from trnsim.perf.serving.scheduler import Replica, ReplicaTrace, SchedulerConfig
from trnsim.perf.serving.steps import StepCosts
from trnsim.perf.serving.workload import Request

# vLLM's default gpu_memory_utilization (0.9): the fraction of device memory the engine takes
# for weights and KV cache, the rest left to activations and the runtime.
KV_MEMORY_FRACTION = 0.9
PERCENTILES = (50, 90, 99)


def kv_blocks(instance: str, tensor_parallel: int, lnc: int | None, weight_bytes: int,
              kv_bytes_per_token: int, block_size: int) -> int:
    """KV-cache blocks one replica's HBM holds after its weights."""
    spec = hardware.instance(instance)
    per_core = spec.chip.memory_bytes / spec.chip.logical_cores(lnc)
    memory = per_core * tensor_parallel * KV_MEMORY_FRACTION
    free = memory - weight_bytes
    if free <= 0:
        raise InvalidArgumentError(
            f"weights ({weight_bytes / 2**30:.1f} GiB) do not fit the {tensor_parallel} "
            f"NeuronCore(s) of a replica on {spec.name} ({memory / 2**30:.1f} GiB usable); "
            f"raise --tp")
    return int(free // (kv_bytes_per_token * block_size))


@dataclass(frozen=True)
class SLO:
    ttft_ms: float | None = None
    tpot_ms: float | None = None

    def met(self, ttft: float, tpot: float) -> bool:
        return ((self.ttft_ms is None or ttft <= self.ttft_ms)
                and (self.tpot_ms is None or tpot <= self.tpot_ms))


@dataclass
class ServingReport:
    requests: int
    replicas: int
    duration_s: float
    throughput_tokens_per_s: float  # output tokens
    throughput_requests_per_s: float
    goodput_requests_per_s: float | None
    slo: dict
    ttft_ms: dict
    tpot_ms: dict
    itl_ms: dict
    e2e_ms: dict
    kv_cache_mean_use: float
    kv_cache_peak_use: float
    kv_blocks_per_replica: int
    preemptions: int
    iterations: int
    device_busy_fraction: float
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def _percentiles(values) -> dict:
    if len(values) == 0:
        return {f"p{q}": None for q in PERCENTILES} | {"mean": None}
    array = np.asarray(values, dtype=np.float64)
    result = {f"p{q}": float(v) for q, v in zip(PERCENTILES, np.percentile(array, PERCENTILES),
                                                strict=True)}
    result["mean"] = float(array.mean())
    return result


def simulate(requests: list[Request], config: SchedulerConfig, costs: StepCosts, *,
             replicas: int = 1, slo: SLO = SLO(), draft: StepCosts | None = None
             ) -> ServingReport:
    """Run the workload on `replicas` copies of the deployment (`draft`: the draft model's step
    costs, with `config.speculation`)."""
    if replicas < 1:
        raise InvalidArgumentError(f"replicas must be >= 1; got {replicas}")
    if not requests:
        raise InvalidArgumentError("the workload has no requests")
    share: list[list[Request]] = [[] for _ in range(replicas)]
    for index, request in enumerate(sorted(requests, key=lambda r: r.arrival_ms)):
        share[index % replicas].append(request)
    traces = [Replica(config, costs, draft).run(part) for part in share if part]
    return _report(traces, requests, replicas, slo)


def _report(traces: list[ReplicaTrace], requests: list[Request], replicas: int,
            slo: SLO) -> ServingReport:
    sequences = [s for t in traces for s in t.sequences]
    start = min(r.arrival_ms for r in requests)
    end = max(t.end_ms for t in traces)
    duration_s = max(end - start, 1e-9) / 1e3
    ttft = [s.first_token_ms - s.request.arrival_ms for s in sequences]
    tpot = [(s.finish_ms - s.first_token_ms) / (s.request.output_tokens - 1)
            for s in sequences if s.request.output_tokens > 1]
    itl = np.concatenate([np.asarray(s.itl_ms) for s in sequences]) if sequences else []
    e2e = [s.finish_ms - s.request.arrival_ms for s in sequences]
    tokens = sum(s.request.output_tokens for s in sequences)
    goodput = None
    if slo.ttft_ms is not None or slo.tpot_ms is not None:
        good = sum(slo.met(s.first_token_ms - s.request.arrival_ms,
                           (s.finish_ms - s.first_token_ms) / max(s.request.output_tokens - 1, 1))
                   for s in sequences)
        goodput = good / duration_s
    block_ms = sum(t.kv_block_ms for t in traces)
    capacity_ms = sum(t.kv_blocks * (t.end_ms - start) for t in traces)
    return ServingReport(
        requests=len(sequences), replicas=replicas, duration_s=duration_s,
        throughput_tokens_per_s=tokens / duration_s,
        throughput_requests_per_s=len(sequences) / duration_s, goodput_requests_per_s=goodput,
        slo={"ttft_ms": slo.ttft_ms, "tpot_ms": slo.tpot_ms},
        ttft_ms=_percentiles(ttft), tpot_ms=_percentiles(tpot), itl_ms=_percentiles(itl),
        e2e_ms=_percentiles(e2e),
        kv_cache_mean_use=block_ms / capacity_ms if capacity_ms else 0.0,
        kv_cache_peak_use=max(t.kv_peak_blocks / t.kv_blocks for t in traces),
        kv_blocks_per_replica=traces[0].kv_blocks,
        preemptions=sum(s.preemptions for s in sequences),
        iterations=sum(t.iterations for t in traces),
        device_busy_fraction=sum(t.busy_ms for t in traces) / (replicas * (end - start) or 1.0))
