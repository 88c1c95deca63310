"""Performance: model reports (built in `trnsim.runtime.report`), `trnsim bench`, `trnsim validate`."""

from trnsim.runtime.report import (
    KernelTime,
    ModelReport,
    bound_fractions,
    build_report,
    cost_per_inference,
    kernel_times,
)

__all__ = ["KernelTime", "ModelReport", "bound_fractions", "build_report", "cost_per_inference",
           "kernel_times"]
