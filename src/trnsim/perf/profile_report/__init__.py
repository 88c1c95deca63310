"""`trnsim profile view`: a trace trnsim wrote, as one HTML page a person reads in a minute.

`trace_file` reads the trace (data only), `analysis` computes the figures with the simulator's
own definitions, `charts` draws the SVG, `page` assembles the self-contained document (no
network: inline CSS, SVG and script; the Perfetto trace embedded for deep dives).
"""

from __future__ import annotations

from pathlib import Path

from trnsim.perf.profile_report.page import render
from trnsim.perf.profile_report.trace_file import read_trace


def write_report(trace_path: str | Path, output: str | Path | None = None) -> Path:
    """Read `trace_path`, write its report to `output` (default: beside it, ``.html``)."""
    trace = read_trace(trace_path)
    target = Path(output) if output is not None else Path(trace_path).with_suffix(".html")
    target.write_text(render(trace), encoding="utf-8")
    return target


__all__ = ["read_trace", "render", "write_report"]
