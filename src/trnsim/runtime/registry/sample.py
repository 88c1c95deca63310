"""Two reads of a process's record -> what happened in between (a reporting period).

Utilisation on a simulated machine: a process's timeline is its host work at the speed it ran
(wall time outside executions) plus its executions at their simulated device time (the time
spent simulating them does not count). A NeuronCore's utilisation is the share of that timeline
during which it was executing: a loop that calls a model back to back keeps its core near 100%,
time spent preparing inputs on the host or sleeping lowers it, as on the real device. Per-engine
figures are shares of the core's execution time, FLOP/s and DMA bytes/s are per second of the
timeline.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from trnsim.runtime.registry.process import ERROR_KINDS, HBM_KINDS, STATUS_KINDS

PERCENTILES = (0, 1, 25, 50, 75, 99, 100)  # neuron-monitor's latency_stats keys p0 ... p100


@dataclass
class CoreSample:
    instance: str
    core: int
    utilisation: float  # 0..1 of the process's timeline in the period
    engine_utilisation: dict[str, float]  # engine -> 0..1 of the core's execution time
    flops_per_s: float
    dma_bytes_per_s: float
    executions: int
    errors: int
    hbm_bytes: dict[str, int]  # neuron-monitor's kinds, of the models now loaded on the core


@dataclass
class ProcessSample:
    record: dict  # the latest read
    period_s: float  # wall time between the two reads (since the process started: first read)
    timeline_s: float
    cores: list[CoreSample]
    status: dict[str, int]  # executions in the period by neuron-monitor's status kinds
    errors: dict[str, int]
    total_latency_s: dict[str, float] | None  # p0..p100 of the period's executions, None: idle
    device_latency_s: dict[str, float] | None
    vcpu_percent: dict[str, float] = field(default_factory=dict)  # user/system, of all vCPUs

    @property
    def pid(self) -> int:
        return self.record["pid"]

    @property
    def tag(self) -> str:
        return self.record["tag"]


def sample(latest: dict, previous: dict | None) -> ProcessSample:
    """The period between `previous` (None: the process's start) and `latest`."""
    base = previous or {"written_at": latest["started_at"], "timeline_ns": 0.0,
                        "device_wall_s": 0.0, "execution_status": {}, "errors": {},
                        "cores": [], "cpu_s": {"user": 0.0, "system": 0.0}}
    period = max(latest["written_at"] - base["written_at"], 0.0)
    device_wall = latest["device_wall_s"] - base["device_wall_s"]
    timeline = (latest["timeline_ns"] - base["timeline_ns"]) * 1e-9 + max(period - device_wall, 0.0)
    before = {(c["instance"], c["core"]): c for c in base["cores"]}
    hbm = _hbm_by_core(latest["models"])
    cores = []
    for now in latest["cores"]:
        key = (now["instance"], now["core"])
        old = before.get(key, {})
        device_s = (now["device_ns"] - old.get("device_ns", 0.0)) * 1e-9
        busy = {e: ns - old.get("engine_busy_ns", {}).get(e, 0.0)
                for e, ns in now["engine_busy_ns"].items()}
        cores.append(CoreSample(
            instance=key[0], core=key[1],
            utilisation=min(device_s / timeline, 1.0) if timeline > 0 else 0.0,
            engine_utilisation={e: min(ns * 1e-9 / device_s, 1.0) if device_s > 0 else 0.0
                                for e, ns in busy.items()},
            flops_per_s=(now["flops"] - old.get("flops", 0)) / timeline if timeline > 0 else 0.0,
            dma_bytes_per_s=((now["dma_bytes"] - old.get("dma_bytes", 0)) / timeline
                             if timeline > 0 else 0.0),
            executions=now["executions"] - old.get("executions", 0),
            errors=now["errors"] - old.get("errors", 0),
            hbm_bytes=hbm.get(key, dict.fromkeys(HBM_KINDS, 0))))
    rows = [r for r in latest["latency"] if r[0] > base["written_at"]]
    cpus = os.cpu_count() or 1
    return ProcessSample(
        record=latest, period_s=period, timeline_s=timeline,
        cores=sorted(cores, key=lambda c: (c.instance, c.core)),
        status={k: latest["execution_status"].get(k, 0) - base["execution_status"].get(k, 0)
                for k in STATUS_KINDS},
        errors={k: latest["errors"].get(k, 0) - base["errors"].get(k, 0) for k in ERROR_KINDS},
        total_latency_s=_percentiles([r[1] for r in rows]),
        device_latency_s=_percentiles([r[2] for r in rows]),
        vcpu_percent={kind: (100.0 * (latest["cpu_s"][kind] - base["cpu_s"][kind]) / (period * cpus)
                             if period > 0 else 0.0) for kind in ("user", "system")})


def _hbm_by_core(models: list[dict]) -> dict[tuple[str, int], dict[str, int]]:
    used: dict[tuple[str, int], dict[str, int]] = {}
    for model in models:
        for core in model["cores"]:
            slot = used.setdefault((model["instance"], core), dict.fromkeys(HBM_KINDS, 0))
            for kind, nbytes in model["hbm"].get(str(core), {}).items():
                slot[kind] = slot.get(kind, 0) + nbytes
    return used


def _percentiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    points = np.percentile(np.asarray(values, dtype=np.float64), PERCENTILES)
    return {f"p{p}": float(v) for p, v in zip(PERCENTILES, points, strict=True)}


class Sampler:
    """Keeps each process's previous read, so each call reports the period since the last."""

    def __init__(self) -> None:
        self._previous: dict[tuple[int, float], dict] = {}

    def __call__(self, records: list[dict]) -> list[ProcessSample]:
        samples, seen = [], {}
        for record in records:
            key = (record["pid"], record["started_at"])
            samples.append(sample(record, self._previous.get(key)))
            seen[key] = record
        self._previous = seen  # processes that have gone are forgotten
        return samples
