"""`trnsim monitor --prometheus-port N`: the monitor's reports as Prometheus metrics.

Metric and label names follow AWS's neuron-monitor-prometheus.py exporter, so dashboards built
on it (Grafana's Neuron dashboard) read trnsim unchanged: every series carries the instance labels
(availability_zone, instance_id, instance_name, instance_type, region, subnet_id), runtime series
``runtime_tag`` too. Gauges hold the latest report; the ``*_total`` counters add each report's
period counts, as the exporter does. Served by the official client library on 127.0.0.1 only.
"""

from __future__ import annotations

import threading

from trnsim.errors import TrnsimError

INSTANCE_LABELS = ("availability_zone", "instance_id", "instance_name", "instance_type", "region",
                   "subnet_id")
CORE_MEMORY_KINDS = ("constants", "model_code", "model_shared_scratchpad", "runtime_memory",
                     "tensors")


class ReportCollector:
    """A prometheus_client collector answering each scrape from the latest report."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._report: dict | None = None
        self._status: dict[tuple[str, str], float] = {}  # (runtime_tag, status_type) -> total
        self._errors: dict[tuple[str, str], float] = {}
        self._ecc: dict[tuple[str, str], float] = {}  # (device index, event) -> total

    def update(self, report: dict) -> None:
        with self._lock:
            self._report = report
            for runtime in report["neuron_runtime_data"]:
                stats = runtime["report"].get("execution_stats")
                if stats:
                    tag = runtime["neuron_runtime_tag"]
                    for kind, count in stats["execution_summary"].items():
                        self._status[tag, kind] = self._status.get((tag, kind), 0.0) + count
                    for kind, count in stats["error_summary"].items():
                        self._errors[tag, kind] = self._errors.get((tag, kind), 0.0) + count
            hw = report["system_data"].get("neuron_hw_counters")
            for device in (hw or {}).get("neuron_devices", []):
                index = str(device["neuron_device_index"])
                for event, count in device.items():
                    if event != "neuron_device_index":
                        self._ecc[index, event] = self._ecc.get((index, event), 0.0) + count

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        with self._lock:
            report = self._report
            status, errors, ecc = dict(self._status), dict(self._errors), dict(self._ecc)
        if report is None:
            return
        info = report["instance_info"]
        base = {"availability_zone": info["instance_availability_zone"],
                "instance_id": info["instance_id"], "instance_name": info["instance_name"],
                "instance_type": info["instance_type"], "region": info["instance_region"],
                "subnet_id": info["subnet_id"]}

        def family(kind, name, help_text, *extra):
            return kind(name, help_text, labels=[*INSTANCE_LABELS, *extra])

        def values(labels: dict) -> list[str]:
            return [str(labels[k]) for k in (*INSTANCE_LABELS, *[k for k in labels if k not in base])]

        instance = family(GaugeMetricFamily, "instance_info", "EC2 instance information")
        instance.add_metric(values(base), 1.0)
        yield instance
        hardware = report["neuron_hardware_info"]
        hw_info = family(GaugeMetricFamily, "neuron_hardware_info", "Neuron hardware information",
                         "neuron_device_count", "neuroncore_per_device_count")
        hw_info.add_metric(values({**base, "neuron_device_count": hardware["neuron_device_count"],
                                   "neuroncore_per_device_count":
                                       hardware["neuroncore_per_device_count"]}), 1.0)
        yield hw_info
        yield from self._runtime_families(report, base, family, values, status, errors)
        yield from self._system_families(report, base, family, values, ecc, CounterMetricFamily)

    def _runtime_families(self, report, base, family, values, status, errors):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        util = family(GaugeMetricFamily, "neuroncore_utilization_ratio",
                      "NeuronCore utilization ratio", "neuroncore", "runtime_tag")
        memory = {k: family(GaugeMetricFamily, f"neuroncore_memory_usage_{k}",
                            f"NeuronCore memory utilization for {k.replace('_', ' ')}",
                            "memory_location", "neuroncore", "runtime_tag")
                  for k in CORE_MEMORY_KINDS}
        used = family(GaugeMetricFamily, "neuron_runtime_memory_used_bytes",
                      "Runtime memory used bytes", "memory_location", "runtime_tag")
        latency = family(GaugeMetricFamily, "execution_latency_seconds",
                         "Execution latency in seconds", "percentile", "runtime_tag")
        vcpu = family(GaugeMetricFamily, "neuron_runtime_vcpu_usage_ratio",
                      "Runtime vCPU utilization ratio", "runtime_tag", "usage_type")
        for runtime in report["neuron_runtime_data"]:
            tag, groups = runtime["neuron_runtime_tag"], runtime["report"]
            for core, counters in groups.get("neuroncore_counters", {}).get(
                    "neuroncores_in_use", {}).items():
                util.add_metric(values({**base, "neuroncore": core, "runtime_tag": tag}),
                                counters["neuroncore_utilization"] / 100.0)
            memory_used = groups.get("memory_used")
            if memory_used:
                totals = memory_used["neuron_runtime_used_bytes"]
                for location in ("host", "neuron_device"):
                    used.add_metric(values({**base, "memory_location": location,
                                            "runtime_tag": tag}), totals[location])
                for core, kinds in totals["usage_breakdown"]["neuroncore_memory_usage"].items():
                    for kind, nbytes in kinds.items():
                        memory[kind].add_metric(values({**base, "memory_location": "None",
                                                        "neuroncore": core, "runtime_tag": tag}),
                                                nbytes)
            stats = groups.get("execution_stats")
            if stats:
                for percentile, seconds in (stats["latency_stats"]["total_latency"] or {}).items():
                    latency.add_metric(values({**base, "percentile": percentile,
                                               "runtime_tag": tag}), seconds)
            cpu = groups.get("neuron_runtime_vcpu_usage")
            if cpu:
                for kind, percent in cpu["vcpu_usage"].items():
                    vcpu.add_metric(values({**base, "runtime_tag": tag, "usage_type": kind}),
                                    percent / 100.0)
        status_family = family(CounterMetricFamily, "execution_status",
                               "Execution status total", "runtime_tag", "status_type")
        for (tag, kind), total in sorted(status.items()):
            status_family.add_metric(values({**base, "runtime_tag": tag, "status_type": kind}), total)
        error_family = family(CounterMetricFamily, "execution_errors", "Execution errors total",
                              "error_type", "runtime_tag")
        for (tag, kind), total in sorted(errors.items()):
            error_family.add_metric(values({**base, "error_type": kind, "runtime_tag": tag}), total)
        yield from (util, *memory.values(), used, latency, vcpu, status_family, error_family)

    def _system_families(self, report, base, family, values, ecc, counter):
        from prometheus_client.core import GaugeMetricFamily

        system = report["system_data"]
        memory = system.get("memory_info")
        if memory:
            for part in ("memory_total", "memory_used", "swap_total", "swap_used"):
                gauge = family(GaugeMetricFamily, f"system_{part}_bytes",
                               f"System {part.split('_')[0]} {part.split('_')[1]}_bytes bytes")
                gauge.add_metric(values(base), memory[f"{part}_bytes"])
                yield gauge
        cpu = system.get("vcpu_usage")
        if cpu:
            count = family(GaugeMetricFamily, "system_vcpu_count", "System vCPU count")
            count.add_metric(values(base), len(cpu["usage_data"]))
            yield count
            ratio = family(GaugeMetricFamily, "system_vcpu_usage_ratio",
                           "System CPU utilization ratio", "usage_type")
            for kind in ("user", "system"):
                ratio.add_metric(values({**base, "usage_type": kind}),
                                 cpu["average_usage"][kind] / 100.0)
            yield ratio
        if ecc:
            events = family(counter, "hardware_ecc_events", "Hardware ecc events total",
                            "event_type", "neuron_device_index")
            for (device, event), total in sorted(ecc.items()):
                events.add_metric(values({**base, "event_type": event,
                                          "neuron_device_index": device}), total)
            yield events


def serve(collector: ReportCollector, port: int, host: str = "127.0.0.1"):
    """Start the exporter's HTTP server (a daemon thread); returns the server to shut down."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as error:
        raise TrnsimError(f"cannot serve Prometheus metrics on {host}:{port}: {error}") from None
    return server
