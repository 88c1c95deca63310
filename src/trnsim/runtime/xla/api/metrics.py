"""`torch_xla.debug.metrics`: the metrics report, with simulated device time."""

from __future__ import annotations

from trnsim.runtime.xla.metrics import METRICS

SHORT_COUNTERS = ("CachedCompile", "UncachedCompile", "MarkStep", "PersistentCacheHit")
SHORT_METRICS = ("CompileTime", "ExecuteTime", "TransferToDeviceTime", "TransferFromDeviceTime")


def metrics_report() -> str:
    return METRICS.report()


def short_metrics_report(counter_names=None, metric_names=None) -> str:
    return METRICS.report(counter_names or SHORT_COUNTERS, metric_names or SHORT_METRICS)


def counter_names() -> list[str]:
    return sorted(METRICS.counters)


def counter_value(name: str):
    return METRICS.counters.get(name)


def metric_names() -> list[str]:
    return sorted(METRICS.samples)


def metric_data(name: str):
    values = METRICS.samples.get(name)
    if not values:
        return None
    return len(values), sum(values), [(0.0, v) for v in values]


def clear_all() -> None:
    METRICS.clear()


def clear_counters() -> None:
    METRICS.counters.clear()


def clear_metrics() -> None:
    METRICS.samples.clear()


def executed_fallback_ops() -> list[str]:
    return []


def __getattr__(name: str):
    from trnsim.runtime.xla.api import missing

    return missing("torch_xla.debug.metrics", name)
