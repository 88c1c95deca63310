"""Inline SVG charts of the profile report: engine timeline, DMA bandwidth, roofline.

Drawn on the server as plain SVG (no script, no web font, no network), one user unit per
pixel at the reference width; every mark carries a <title> the browser shows on hover. A
stream with more instructions than `MAX_MARKS_PER_STREAM` is drawn as its occupancy per time
column instead, so a two-million-instruction trace stays a few MB.
"""

from __future__ import annotations

import math
from html import escape

import numpy as np

from trnsim.perf.profile_report.analysis import TIMELINE_COLUMNS, CoreFigures, occupancy
from trnsim.perf.profile_report.trace_file import CoreTrace
from trnsim.sim.report import format_bytes, format_ns

MAX_MARKS_PER_STREAM = 3000
LABEL_WIDTH = 120  # px left of the plot for track names
PLOT_WIDTH = TIMELINE_COLUMNS  # one time column per px
ENGINE_COLOURS = {"tensor": "#1f77b4", "vector": "#2ca02c", "scalar": "#ff7f0e",
                  "gpsimd": "#9467bd", "sync": "#7f7f7f", "dma": "#d62728"}
OTHER_COLOUR = "#8c564b"
WAIT_COLOURS = {"in order": "#c7c7c7", "tensor pipeline": "#aec7e8",
                "dma queue/bandwidth": "#ff9896", "shared port": "#dbdb8d",
                "other cores": "#c49c94", "collectives fabric": "#9edae5"}


def colour(engine: str) -> str:
    return ENGINE_COLOURS.get(engine, OTHER_COLOUR)


def wait_colour(cause: str) -> str:
    """A wait on another engine takes that engine's colour (lighter: drawn with opacity)."""
    return WAIT_COLOURS.get(cause) or ENGINE_COLOURS.get(cause, OTHER_COLOUR)


def _nice_ticks(total: float, count: int = 6) -> list[float]:
    if total <= 0:
        return [0.0]
    raw = total / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(int(total / step) + 1)]


def _axis(total: float, y: float) -> list[str]:
    parts = [f'<line x1="{LABEL_WIDTH}" y1="{y:.1f}" x2="{LABEL_WIDTH + PLOT_WIDTH}" '
             f'y2="{y:.1f}" class="axis"/>']
    for tick in _nice_ticks(total):
        x = LABEL_WIDTH + tick / total * PLOT_WIDTH if total else LABEL_WIDTH
        parts.append(f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{x:.1f}" y2="{y + 4:.1f}" '
                     f'class="axis"/><text x="{x:.1f}" y="{y + 15:.1f}" class="tick" '
                     f'text-anchor="middle">{escape(format_ns(tick))}</text>')
    return parts


def _instruction_title(core: CoreTrace, i: int) -> str:
    busy = core.end_ns[i] - core.start_ns[i]
    where = f" at {core.sources[i]}" if core.sources[i] else ""
    waited = f"; waited on {core.waited_on[i]}" if core.waited_on[i] else ""
    return escape(f"{core.names[i]}{where}: {format_ns(busy)} from "
                  f"{format_ns(core.start_ns[i] - core.offset_ns)}{waited}")


def timeline(core: CoreTrace, figures: CoreFigures) -> str:
    """One track per stream (TensorE load/multiply, VectorE, ..., one per DMA queue)."""
    total = figures.total_ns or 1.0
    scale = PLOT_WIDTH / total
    y = 4.0
    parts = []
    edges = np.linspace(0.0, total, TIMELINE_COLUMNS + 1)
    for row in figures.streams:
        height = 9.0 if row.engine == "dma" else 18.0
        index = np.flatnonzero(core.tid == row.tid)
        fill = colour(row.engine)
        marks = [f'<g class="track" data-stream="{escape(row.name)}" '
                 f'data-engine="{escape(row.engine)}" data-instructions="{len(index)}">',
                 f'<text x="{LABEL_WIDTH - 6}" y="{y + height - 3:.1f}" class="label" '
                 f'text-anchor="end">{escape(row.name)}</text>',
                 f'<rect x="{LABEL_WIDTH}" y="{y:.1f}" width="{PLOT_WIDTH}" '
                 f'height="{height:.1f}" class="lane"/>']
        starts = core.start_ns[index] - core.offset_ns
        ends = core.end_ns[index] - core.offset_ns
        if len(index) <= MAX_MARKS_PER_STREAM:
            for i, s, e in zip(index.tolist(), starts.tolist(), ends.tolist(), strict=True):
                width = max((e - s) * scale, 0.5)
                marks.append(f'<rect x="{LABEL_WIDTH + s * scale:.2f}" y="{y:.1f}" '
                             f'width="{width:.2f}" height="{height:.1f}" fill="{fill}">'
                             f'<title>{_instruction_title(core, i)}</title></rect>')
        else:
            busy = occupancy(starts, ends, edges)
            for column in np.flatnonzero(busy > 0).tolist():
                share = float(busy[column])
                marks.append(f'<rect x="{LABEL_WIDTH + column}" y="{y:.1f}" width="1" '
                             f'height="{height:.1f}" fill="{fill}" '
                             f'fill-opacity="{max(round(share, 2), 0.05)}"><title>'
                             f'{escape(row.name)} busy {100 * share:.0f}% from '
                             f'{escape(format_ns(edges[column]))}</title></rect>')
        marks.append("</g>")
        parts += marks
        y += height + 2
    parts += _axis(total, y + 2)
    height = y + 24
    return (f'<svg class="timeline" viewBox="0 0 {LABEL_WIDTH + PLOT_WIDTH + 10} {height:.0f}" '
            f'width="{LABEL_WIDTH + PLOT_WIDTH + 10}" height="{height:.0f}" role="img" '
            f'aria-label="engine timeline">' + "".join(parts) + "</svg>")


def bandwidth_chart(figures: CoreFigures, ceiling: float | None) -> str:
    """DMA bandwidth per time column, with the core's HBM ceiling when known."""
    rates = figures.dma_bytes_per_s
    top = max(float(rates.max()) if len(rates) else 0.0, ceiling or 0.0) or 1.0
    height, pad = 90.0, 6.0
    total = figures.total_ns or 1.0

    def y_of(value: float) -> float:
        return pad + height * (1 - value / top)

    points = [f"{LABEL_WIDTH},{y_of(0):.1f}"]
    for column, value in enumerate(rates.tolist()):
        points.append(f"{LABEL_WIDTH + column:.1f},{y_of(value):.1f}")
        points.append(f"{LABEL_WIDTH + column + 1:.1f},{y_of(value):.1f}")
    points.append(f"{LABEL_WIDTH + len(rates)},{y_of(0):.1f}")
    parts = [f'<text x="{LABEL_WIDTH - 6}" y="{pad + 10}" class="label" text-anchor="end">'
             f'{top / 1e9:,.0f} GB/s</text>',
             f'<text x="{LABEL_WIDTH - 6}" y="{pad + height}" class="label" '
             f'text-anchor="end">0</text>',
             f'<polygon points="{" ".join(points)}" fill="{colour("dma")}" fill-opacity="0.5" '
             f'stroke="{colour("dma")}" stroke-width="0.5"><title>DMA bandwidth: '
             f'{escape(format_bytes(figures.dma_bytes))} in {escape(format_ns(total))}'
             f'</title></polygon>']
    if ceiling:
        parts.append(f'<line x1="{LABEL_WIDTH}" x2="{LABEL_WIDTH + PLOT_WIDTH}" '
                     f'y1="{y_of(ceiling):.1f}" y2="{y_of(ceiling):.1f}" class="ceiling"/>'
                     f'<text x="{LABEL_WIDTH + PLOT_WIDTH - 4}" y="{y_of(ceiling) + 12:.1f}" '
                     f'class="tick" text-anchor="end">HBM/DMA ceiling of one core '
                     f'{ceiling / 1e9:,.0f} GB/s</text>')
    parts += _axis(total, pad + height + 2)
    full = pad + height + 26
    return (f'<svg class="bandwidth" viewBox="0 0 {LABEL_WIDTH + PLOT_WIDTH + 10} {full:.0f}" '
            f'width="{LABEL_WIDTH + PLOT_WIDTH + 10}" height="{full:.0f}" role="img" '
            f'aria-label="DMA bandwidth over time">' + "".join(parts) + "</svg>")


def roofline(kernels, peak: float | None, bandwidth: float | None) -> str:
    """Log-log roofline: achieved FLOP/s against FLOPs per HBM byte, one dot per kernel."""
    points = [k for k in kernels if k.flops > 0 and k.hbm_bytes > 0 and k.span_ns > 0]
    width, height, left, bottom = 640.0, 360.0, 70.0, 40.0
    xs = [k.intensity for k in points] or [1.0]
    ys = [k.flops_per_s for k in points] or [1e12]
    ridge = peak / bandwidth if peak and bandwidth else None
    x_lo = 10 ** math.floor(math.log10(min([*xs, ridge or xs[0]]) / 2))
    x_hi = 10 ** math.ceil(math.log10(max([*xs, ridge or xs[0]]) * 2))
    y_hi = 10 ** math.ceil(math.log10(max([*ys, peak or ys[0]]) * 1.5))
    y_lo = 10 ** math.floor(math.log10(min(ys) / 10))

    def px(x: float) -> float:
        return left + (math.log10(x) - math.log10(x_lo)) / math.log10(x_hi / x_lo) * (width - left - 30)

    def py(y: float) -> float:
        y = min(max(y, y_lo), y_hi)
        return 10 + (1 - (math.log10(y) - math.log10(y_lo)) / math.log10(y_hi / y_lo)) * (
            height - bottom - 10)

    parts = [f'<rect x="{left}" y="10" width="{width - left - 30}" height="{height - bottom - 10}" '
             f'class="lane"/>']
    for decade in range(round(math.log10(x_lo)), round(math.log10(x_hi)) + 1):
        x = px(10.0**decade)
        parts.append(f'<text x="{x:.1f}" y="{height - bottom + 15}" class="tick" '
                     f'text-anchor="middle">{10.0**decade:g}</text>')
    for decade in range(round(math.log10(y_lo)), round(math.log10(y_hi)) + 1):
        y = py(10.0**decade)
        parts.append(f'<text x="{left - 4}" y="{y + 3:.1f}" class="tick" text-anchor="end">'
                     f'{10.0**decade / 1e12:g} T</text>')
    parts.append(f'<text x="{(left + width) / 2}" y="{height - 6}" class="label" '
                 f'text-anchor="middle">arithmetic intensity (TensorE FLOPs per HBM byte)</text>'
                 f'<text x="14" y="{(height - bottom) / 2}" class="label" text-anchor="middle" '
                 f'transform="rotate(-90 14 {(height - bottom) / 2})">FLOP/s</text>')
    if peak and bandwidth:
        roof = [(x_lo, x_lo * bandwidth), (ridge, peak), (x_hi, peak)]
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in roof)
        parts.append(f'<polyline points="{path}" class="roof"><title>roof: '
                     f'{peak / 1e12:,.1f} TFLOP/s, {bandwidth / 1e9:,.0f} GB/s (ridge at '
                     f'{ridge:,.1f} FLOPs/byte)</title></polyline>')
    for k in points:
        parts.append(f'<circle cx="{px(k.intensity):.1f}" cy="{py(k.flops_per_s):.1f}" r="4" '
                     f'class="kernel" data-kernel="{escape(k.name)}"><title>{escape(k.name)}: '
                     f'{k.intensity:,.1f} FLOPs/byte, {k.flops_per_s / 1e12:,.2f} TFLOP/s over '
                     f'{escape(format_ns(k.span_ns))}</title></circle>')
    return (f'<svg class="roofline" viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" '
            f'height="{height:.0f}" role="img" aria-label="roofline">' + "".join(parts) + "</svg>")
