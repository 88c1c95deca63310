"""torch_xla.debug.metrics: counters and timed metrics, printed in torch-xla's format.

CompileTime and ExecuteTime hold the simulated figures (compile = trnsim's compile of the graph
on this host; execute = the simulated device time of the graph), so the report answers "how long
would this step take on the NeuronCore"; the host wall time of each execution is kept apart as
`HostExecuteTime`.
"""

from __future__ import annotations

from collections import defaultdict


class Metrics:
    def __init__(self) -> None:
        self.counters: dict[str, int] = defaultdict(int)
        self.samples: dict[str, list[float]] = defaultdict(list)  # name -> values (ns or count)

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] += n

    def sample(self, name: str, value: float) -> None:
        self.samples[name].append(float(value))

    def clear(self) -> None:
        self.counters.clear()
        self.samples.clear()

    def report(self, counter_names=None, metric_names=None) -> str:
        lines = []
        for name in metric_names if metric_names is not None else sorted(self.samples):
            values = self.samples.get(name)
            if not values:
                continue
            timed = name.endswith("Time")
            fmt = format_ns if timed else (lambda v: f"{v:g}")
            ordered = sorted(values)
            pct = "; ".join(f"{p}%={fmt(ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))])}"
                            for p in (1, 5, 10, 20, 50, 80, 90, 95, 99))
            lines += [f"Metric: {name}", f"  TotalSamples: {len(values)}",
                      f"  Accumulator: {fmt(sum(values))}", f"  Percentiles: {pct}"]
        for name in counter_names if counter_names is not None else sorted(self.counters):
            if name in self.counters:
                lines += [f"Counter: {name}", f"  Value: {self.counters[name]}"]
        return "\n".join(lines) + "\n"


def format_ns(ns: float) -> str:
    """torch-xla's duration format: 09s969ms486.408us."""
    us_total = ns / 1e3
    s, rem = divmod(us_total, 1e6)
    ms, us = divmod(rem, 1e3)
    out = ""
    if s:
        out += f"{int(s):02d}s"
    if s or ms:
        out += f"{int(ms):03d}ms"
    return out + f"{us:.3f}us"


METRICS = Metrics()
