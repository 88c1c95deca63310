"""neuron-monitor's configuration and JSON report, built from trnsim's runtime registry.

The report has neuron-monitor's shape (neuron_runtime_data, system_data, instance_info,
neuron_hardware_info) and every group carries its ``period`` (seconds actually covered) and
``error``. Runtime groups come from `trnsim.runtime.registry` (see its `sample` module for what
utilisation means on a simulated device); system groups from the host, through psutil.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from trnsim import hardware
from trnsim.errors import InvalidArgumentError, UnknownNameError
from trnsim.runtime.registry.process import HBM_KINDS
from trnsim.runtime.registry.sample import ProcessSample, Sampler

DEFAULT_PERIOD_S = 5.0  # neuron-monitor's default
MIN_PERIOD_S = 0.1
MAX_CONFIG_BYTES = 1 << 20
RUNTIME_METRICS = ("neuroncore_counters", "execution_stats", "memory_used",
                   "neuron_runtime_vcpu_usage")
SYSTEM_METRICS = ("vcpu_usage", "memory_info", "neuron_hw_counters")
ECC_EVENTS = ("mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected",
              "sram_ecc_uncorrected")
# neuron_device_version by neuron_device_type. Documented: inferentia2 "v3" (the Neuron docs'
# neuron-monitor example on inf2), trainium2 "v4" (neuron-monitor on trn2). Assumed from the
# generation order (Inferentia, Trainium, Inferentia2, Trainium2, Trainium3): the others.
DEVICE_VERSION = {"inferentia": "v1", "trainium": "v2", "inferentia2": "v3", "trainium2": "v4",
                  "trainium3": "v5"}
_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_period(text: object, where: str) -> float:
    """neuron-monitor's period strings: "500ms", "1s", "5m", "1h"."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)\s*", str(text))
    if not match:
        raise InvalidArgumentError(f"{where}: period {text!r}: write a number and a unit (500ms, "
                                   f"1s, 5m, 1h)")
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if seconds < MIN_PERIOD_S:
        raise InvalidArgumentError(f"{where}: period {text!r} is under the {MIN_PERIOD_S:g} s minimum")
    return seconds


@dataclass
class Group:
    """One metric group to collect every `period_s`."""

    kind: str
    period_s: float
    sampler: Sampler = field(default_factory=Sampler)
    due_at: float = 0.0
    collected_at: float | None = None
    last: dict = field(default_factory=dict)  # runtime groups: tag -> data; system: the data


@dataclass
class RuntimeFilter:
    tag_filter: re.Pattern
    groups: list[Group]


@dataclass
class MonitorConfig:
    period_s: float
    runtimes: list[RuntimeFilter]
    system: list[Group]

    @property
    def tick_s(self) -> float:
        """How often anything can fall due."""
        periods = [g.period_s for r in self.runtimes for g in r.groups]
        return min([self.period_s, *periods, *(g.period_s for g in self.system)])


def default_config(period_s: float = DEFAULT_PERIOD_S) -> MonitorConfig:
    """Every group, every period (what neuron-monitor reports without a configuration)."""
    return MonitorConfig(period_s, [RuntimeFilter(re.compile(".*"), [Group(k, period_s)
                                                                   for k in RUNTIME_METRICS])],
                         [Group(k, period_s) for k in SYSTEM_METRICS])


def read_config(path: str) -> MonitorConfig:
    """Load a neuron-monitor JSON configuration; unknown keys and metric types are errors."""
    file = Path(path)
    try:
        size = file.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise InvalidArgumentError(f"{path}: {size} bytes, over the {MAX_CONFIG_BYTES}-byte limit "
                                       f"of a monitor configuration")
        data = json.loads(file.read_text())
    except OSError as error:
        raise InvalidArgumentError(f"{path}: {error.strerror or error}") from None
    except ValueError as error:
        raise InvalidArgumentError(f"{path}: not JSON ({error})") from None
    return config_from_dict(data, path)


def config_from_dict(data: object, where: str) -> MonitorConfig:
    _keys(data, {"period", "neuron_runtimes", "system_metrics"}, where)
    period = parse_period(data.get("period", f"{DEFAULT_PERIOD_S:g}s"), where)
    runtimes = []
    for i, entry in enumerate(_list(data.get("neuron_runtimes", []), f"{where}: neuron_runtimes")):
        at = f"{where}: neuron_runtimes[{i}]"
        _keys(entry, {"tag_filter", "metrics"}, at)
        try:
            pattern = re.compile(str(entry.get("tag_filter", ".*")))
        except re.error as error:
            raise InvalidArgumentError(f"{at}: tag_filter: {error}") from None
        runtimes.append(RuntimeFilter(pattern, _groups(entry.get("metrics", []), RUNTIME_METRICS,
                                                       period, f"{at}.metrics")))
    system = _groups(data.get("system_metrics", []), SYSTEM_METRICS, period,
                     f"{where}: system_metrics")
    return MonitorConfig(period, runtimes, system)


def _groups(items: object, known: tuple[str, ...], period: float, where: str) -> list[Group]:
    groups = []
    for i, item in enumerate(_list(items, where)):
        _keys(item, {"type", "period"}, f"{where}[{i}]")
        kind = item.get("type")
        if kind not in known:
            raise UnknownNameError(f"metric type at {where}[{i}]", str(kind), known)
        own = parse_period(item["period"], f"{where}[{i}]") if "period" in item else period
        groups.append(Group(kind, own))
    return groups


def _keys(item: object, allowed: set[str], where: str) -> None:
    if not isinstance(item, dict):
        raise InvalidArgumentError(f"{where}: expected a JSON object, got {type(item).__name__}")
    unknown = sorted(set(item) - allowed)
    if unknown:
        raise InvalidArgumentError(f"{where}: unknown key {unknown[0]!r} (known: "
                                   f"{', '.join(sorted(allowed))})")


def _list(items: object, where: str) -> list:
    if not isinstance(items, list):
        raise InvalidArgumentError(f"{where}: expected a JSON list")
    return items


# --- the report -------------------------------------------------------------------------------
class Monitor:
    """Builds one report per call of `report()`, collecting the groups that are due."""

    def __init__(self, config: MonitorConfig, instance: str, host) -> None:
        self.config = config
        self.spec = hardware.instance(instance)
        self.host = host  # SystemSampler

    def report(self, records: list[dict], now: float | None = None) -> dict:
        now = time.monotonic() if now is None else now
        for runtime in self.config.runtimes:
            for group in runtime.groups:
                if now >= group.due_at:
                    group.due_at = now + group.period_s
                    mine = [r for r in records if runtime.tag_filter.search(r["tag"])]
                    group.last = {s.tag: self._runtime_group(group.kind, s)
                                  for s in group.sampler(mine)}
        system = {}
        for group in self.config.system:
            if now >= group.due_at:
                group.due_at = now + group.period_s
                since = self.host.started if group.collected_at is None else group.collected_at
                group.collected_at = now
                group.last = {**self._system_group(group.kind), "period": now - since}
            system[group.kind] = group.last
        return {"neuron_runtime_data": self._runtime_data(records),
                "system_data": system,
                "instance_info": {"instance_name": "", "instance_id": "", "instance_type": self.spec.name,
                                  "instance_availability_zone": "",
                                  "instance_availability_zone_id": "", "instance_region": "",
                                  "ami_id": "", "subnet_id": "", "error": ""},
                "neuron_hardware_info": self.hardware_info()}

    def hardware_info(self) -> dict:
        chip = self.spec.chip
        return {"neuron_device_type": chip.neuron_device_type,
                "neuron_device_version": DEVICE_VERSION.get(chip.neuron_device_type, ""),
                "neuroncore_version": chip.core.monitor_version,
                "neuron_device_count": self.spec.chips,
                "neuron_device_memory_size": chip.memory_bytes,
                "neuroncore_per_device_count": chip.logical_cores(),
                "logical_neuroncore_config": chip.default_lnc, "error": ""}

    def _runtime_data(self, records: list[dict]) -> list[dict]:
        out = []
        for record in records:
            runtime = next((r for r in self.config.runtimes if r.tag_filter.search(record["tag"])),
                           None)
            if runtime is None:
                continue
            groups = {g.kind: g.last[record["tag"]] for g in runtime.groups if record["tag"] in g.last}
            out.append({"pid": record["pid"], "address": "", "neuron_runtime_tag": record["tag"],
                        "error": "", "report": groups})
        return out

    def _runtime_group(self, kind: str, s: ProcessSample) -> dict:
        on_instance = [c for c in s.cores if c.instance == self.spec.name]
        if kind == "neuroncore_counters":
            physical = self.spec.chip.default_lnc if self.spec.chip.core.monitor_version == "v3d" else 1
            cores = {}
            for c in on_instance:
                entry = {"neuroncore_utilization": 100.0 * c.utilisation, "flops": c.flops_per_s}
                if physical > 1:
                    entry["v3d"] = {f"nc_v3.{i}": {"neuroncore_utilization": 100.0 * c.utilisation}
                                    for i in range(physical)}
                cores[str(c.core)] = entry
            return {"period": s.period_s, "neuroncores_in_use": cores, "error": ""}
        if kind == "execution_stats":
            return {"period": s.period_s, "error_summary": s.errors,
                    "execution_summary": s.status,
                    "latency_stats": {"total_latency": s.total_latency_s,
                                      "device_latency": s.device_latency_s}, "error": ""}
        if kind == "memory_used":
            return {"period": s.period_s, **self._memory(s, on_instance), "error": ""}
        return {"period": s.period_s, "vcpu_usage": s.vcpu_percent, "error": ""}

    def _memory(self, s: ProcessSample, cores) -> dict:
        per_device = self.spec.chip.logical_cores()
        device = sum(sum(c.hbm_bytes.values()) for c in cores)
        host = int(s.record["host_memory_bytes"])
        models = []
        for model in s.record["models"]:
            if model["instance"] != self.spec.name:
                continue
            graphs = {}
            for i, core in enumerate(model["cores"]):
                hbm = model["hbm"][str(core)]
                graphs[f"sg_{i:02d}"] = {
                    "memory_used_bytes": {
                        "host": 0, "neuron_device": sum(hbm.values()),
                        "usage_breakdown": {
                            "host": {"application_memory": 0, "constants": 0, "dma_buffers": 0,
                                     "tensors": 0},
                            "neuron_device": {k: hbm[k] for k in ("constants", "model_code",
                                                                  "runtime_memory", "tensors")}}},
                    "neuroncore_index": core, "neuron_device_index": core // per_device}
            last = model["last_execution_at"]
            models.append({"name": model["name"], "uuid": model["uuid"], "model_id": model["model_id"],
                           "is_running": bool(last and last > s.record["written_at"] - s.period_s),
                           "subgraphs": graphs})
        return {"neuron_runtime_used_bytes": {
                    "host": host, "neuron_device": device,
                    "usage_breakdown": {
                        "host": {"application_memory": host, "constants": 0, "dma_buffers": 0,
                                 "tensors": 0},
                        "neuroncore_memory_usage": {str(c.core): {k: c.hbm_bytes.get(k, 0)
                                                                  for k in HBM_KINDS}
                                                    for c in cores}}},
                "loaded_models": models}

    def _system_group(self, kind: str) -> dict:
        if kind == "vcpu_usage":
            return self.host.vcpu_usage()
        if kind == "memory_info":
            return self.host.memory_info()
        return {"neuron_devices": [{"neuron_device_index": d, **dict.fromkeys(ECC_EVENTS, 0)}
                                   for d in range(self.spec.chips)], "error": ""}


class SystemSampler:
    """The host's vCPU and memory use (psutil), each call covering the time since the last."""

    def __init__(self) -> None:
        import psutil

        self.psutil = psutil
        self.started = time.monotonic()
        self._switches = psutil.cpu_stats().ctx_switches
        psutil.cpu_times_percent(percpu=True)  # starts psutil's interval

    def vcpu_usage(self) -> dict:
        per_cpu = [_cpu_fields(t) for t in self.psutil.cpu_times_percent(percpu=True)]
        average = {k: round(sum(c[k] for c in per_cpu) / len(per_cpu), 2) for k in per_cpu[0]}
        switches = self.psutil.cpu_stats().ctx_switches
        count, self._switches = switches - self._switches, switches
        return {"average_usage": average,
                "usage_data": {str(i): c for i, c in enumerate(per_cpu)},
                "context_switch_count": count, "error": ""}

    def memory_info(self) -> dict:
        memory, swap = self.psutil.virtual_memory(), self.psutil.swap_memory()
        return {"memory_total_bytes": memory.total,
                "memory_used_bytes": memory.total - memory.available,
                "swap_total_bytes": swap.total, "swap_used_bytes": swap.used, "error": ""}


def _cpu_fields(times) -> dict:
    """psutil's per-CPU percentages under neuron-monitor's names."""
    return {"user": times.user, "nice": getattr(times, "nice", 0.0), "system": times.system,
            "idle": times.idle, "io_wait": getattr(times, "iowait", 0.0),
            "irq": getattr(times, "irq", 0.0), "soft_irq": getattr(times, "softirq", 0.0)}
