"""Human-readable renderings of performance reports (rich tables rendered to text)."""

from __future__ import annotations

import io
import math

from rich.console import Console
from rich.table import Table


def significant(value: float, digits: int = 4) -> str:
    """`value` to `digits` significant figures in plain notation, never an exponent: 18,930 /
    124.2 / 3.004 / 0.07640 (values of 10**digits and more keep every integer digit)."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:,.{decimals}f}"
    if decimals and len(text.lstrip("-0.,").replace(",", "").replace(".", "")) > digits:
        text = f"{value:,.{decimals - 1}f}"  # rounding carried into a new digit: 9.9996 -> 10.00
    return text


def _render(*tables, width: int = 140) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    for t in tables:
        console.print(t)
    return console.export_text()


def _end_to_end_rows(report) -> list[tuple[str, str]]:
    """End to end through the framework, and the host's parts of it (`runtime.host_time`)."""
    host = getattr(report, "host", None)
    if not host or report.end_to_end_ms is None:
        return []
    return [("latency (end to end)", f"{report.end_to_end_ms:.3f} ms"),
            (f"  host: dispatch / inputs in / outputs out ({host['link']})",
             f"{host['dispatch_ns'] / 1e3:.0f} / {host['input_copy_ns'] / 1e3:.1f} / "
             f"{host['output_copy_ns'] / 1e3:.1f} us")]


def report_table(report, top: int = 12, width: int = 140) -> str:
    head = Table(title=f"{report.model} on {report.instance} ({report.core})", show_header=False)
    head.add_column("figure")
    head.add_column("value", justify="right")
    cost = ("-" if report.cost_per_inference_usd is None
            else f"${significant(report.cost_per_inference_usd * 1e6, 3)} "
                 f"(at ${report.price_per_hour}/h)")
    rows = [
        ("batch", str(report.batch)),
        ("latency (device)", f"{report.latency_ms:.3f} ms"),
        *_end_to_end_rows(report),
        (f"throughput ({report.copies} copies)", f"{report.throughput_per_s:,.1f} inferences/s"),
        ("cost per million inferences", cost),
        ("TensorE FLOP utilisation", f"{100 * report.tensor_flops_utilisation:.1f} %"),
        ("bound: tensor / dma / other", " / ".join(f"{100 * report.bound[k]:.0f}%"
                                                   for k in ("tensor", "dma", "other"))),
        ("HBM read / written", f"{report.hbm_read_bytes / 2**20:,.1f} / "
                               f"{report.hbm_write_bytes / 2**20:,.1f} MiB"),
        ("SBUF / PSUM peak per partition", f"{report.sbuf_peak_bytes_per_partition / 1024:.1f} / "
                                           f"{report.psum_peak_bytes_per_partition / 1024:.1f} KiB"),
    ]
    for name, value in rows:
        head.add_row(name, value)
    ops = Table(title="time by kernel type")
    for col in ("kernel", "count", "span ms", "TensorE busy ms", "DMA MiB", "GFLOP"):
        ops.add_column(col, justify="right" if col != "kernel" else "left")
    for op, row in sorted(report.by_op.items(), key=lambda kv: -kv[1]["span_ns"]):
        ops.add_row(op, str(row["kernels"]), f"{row['span_ns'] / 1e6:.3f}",
                    f"{row['tensor_busy_ns'] / 1e6:.3f}", f"{row['dma_bytes'] / 2**20:.1f}",
                    f"{row['flops'] / 1e9:.2f}")
    slow = Table(title=f"slowest {top} kernels (span; kernels overlap)")
    for col in ("kernel", "source", "span us", "TensorE busy us"):
        slow.add_column(col)
    for k in sorted(report.kernels, key=lambda k: -k.span_ns)[:top]:
        slow.add_row(k.label, k.source or "", f"{k.span_ns / 1e3:.1f}", f"{k.tensor_busy_ns / 1e3:.1f}")
    return _render(head, ops, slow, width=width) + "\n".join(report.notes)
