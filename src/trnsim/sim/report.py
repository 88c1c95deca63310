"""`summary_table`: a profile's summary as text tables for people (rendered with rich)."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table


def format_ns(value: float) -> str:
    """A time for people: ns, us or ms."""
    if value >= 1e6:
        return f"{value / 1e6:,.3f} ms"
    if value >= 1e3:
        return f"{value / 1e3:,.3f} us"
    return f"{value:,.1f} ns"


def format_bytes(value: float) -> str:
    """A size for people: B, KiB, MiB or GiB."""
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value >= size:
            return f"{value / size:,.2f} {unit}"
    return f"{value:,.0f} B"


_ns, _bytes = format_ns, format_bytes  # short names for the tables below


def _headline(profile) -> Table:
    s = profile.summary
    table = Table(title=f"{profile.program.name} on {s.core} (core {profile.core_index}, "
                        f"{profile.chip.name}, {profile.mode})", show_header=False)
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("total latency", _ns(s.total_ns))
    table.add_row("instructions", f"{s.instructions:,}")
    if s.tensor_precision:
        table.add_row(f"TensorE FLOPs ({s.tensor_precision})", f"{s.tensor_flops:,}")
        table.add_row("TensorE FLOP utilisation (vs peak)", f"{100 * s.tensor_flops_utilisation:.1f} %")
    table.add_row("DMA moved", f"{_bytes(s.dma_bytes)} in {s.dma_transfers:,} transfers")
    table.add_row("DMA bandwidth (over the run / while active)",
                  f"{s.dma_bytes_per_s / 1e9:,.1f} / {s.dma_active_bytes_per_s / 1e9:,.1f} GB/s")
    table.add_row("HBM read / written", f"{_bytes(s.hbm_read_bytes)} / {_bytes(s.hbm_write_bytes)}")
    table.add_row("SBUF peak per partition",
                  f"{_bytes(s.sbuf_peak_bytes_per_partition)} of {_bytes(s.sbuf_bytes_per_partition)}")
    table.add_row("PSUM peak per partition",
                  f"{_bytes(s.psum_peak_bytes_per_partition)} of {_bytes(s.psum_bytes_per_partition)}")
    return table


def _streams(profile) -> Table:
    s = profile.summary
    table = Table(title="where the time went, per stream")
    for name, justify in (("stream", "left"), ("instr", "right"), ("active", "right"),
                          ("util", "right"), ("waiting on", "left"), ("idle after", "right")):
        table.add_column(name, justify=justify)
    streams = list(s.streams.values())
    dma = [st for st in streams if st.engine == "dma"]
    for st in streams:
        if st.engine == "dma" and len(dma) > 4:
            continue
        waits = ", ".join(f"{k} {_ns(v)}" for k, v in list(st.waiting_ns.items())[:3]) or "-"
        table.add_row(st.name, f"{st.instructions:,}", _ns(st.active_ns), f"{100 * st.utilisation:.1f} %",
                      waits, _ns(st.idle_after_ns))
    if len(dma) > 4:
        active = s.engine_active_ns.get("dma", 0.0)
        table.add_row(f"dma ({len(dma)} queues)", f"{sum(st.instructions for st in dma):,}", _ns(active),
                      f"{100 * s.engine_utilisation.get('dma', 0.0):.1f} %", "-", "-")
    return table


def summary_table(profile, width: int = 110) -> str:
    """The headline figures and the per-stream breakdown as plain text, `width` columns wide."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, color_system=None, force_terminal=False)
    console.print(_headline(profile))
    console.print(_streams(profile))
    return buffer.getvalue()
