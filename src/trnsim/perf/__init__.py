"""Performance reports built from simulator profiles (latency, throughput, cost, breakdowns)."""

from trnsim.perf.report import KernelTime, ModelReport, bound_fractions, build_report, kernel_times

__all__ = ["KernelTime", "ModelReport", "bound_fractions", "build_report", "kernel_times"]
