"""The profile report as one self-contained HTML page (inline CSS, SVG and a few lines of JS).

Sections per core, in the order a person asks: how long and how busy (headline, utilisation),
when (engine timeline, DMA bandwidth), why the engines waited, which instructions and source
lines cost the most, where each kernel sits on the roofline; then the Perfetto trace itself,
embedded, to save and open in ui.perfetto.dev. Every text from the trace is HTML-escaped.
"""

from __future__ import annotations

from html import escape

from trnsim import __version__
from trnsim.perf.profile_report import charts
from trnsim.perf.profile_report.analysis import CoreFigures, figures
from trnsim.perf.profile_report.trace_file import CoreTrace, TraceFile
from trnsim.sim.report import format_bytes, format_ns

# Traces larger than this are linked, not embedded (the page would take long to open)
EMBED_TRACE_MAX_BYTES = 32 << 20

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#222;
background:#fafafa}
header{background:#232f3e;color:#fff;padding:14px 24px}header h1{margin:0;font-size:20px}
header p{margin:4px 0 0;color:#ccd}main{padding:8px 24px 40px;max-width:1200px}
section{background:#fff;border:1px solid #ddd;border-radius:6px;margin:14px 0;padding:10px 16px}
h2{font-size:17px;margin:6px 0 10px}h3{font-size:15px;margin:14px 0 6px}
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{border:1px solid #e3e3e3;border-radius:5px;
padding:6px 12px;min-width:150px}.card b{display:block;font-size:18px}.card span{color:#666;
font-size:12px}.scroll{overflow-x:auto}table{border-collapse:collapse;margin:4px 0;width:100%}
th,td{text-align:left;padding:3px 8px;border-bottom:1px solid #eee;font-size:13px;
vertical-align:top}th{background:#f3f3f3;cursor:pointer}td.n{text-align:right;
font-variant-numeric:tabular-nums}code{font-size:12px}.bar{display:flex;height:14px;
width:100%;min-width:240px;border:1px solid #ccc;background:#fff}.bar span{display:block;
height:100%}.meter{background:#eee;height:12px;width:220px;display:inline-block;
vertical-align:middle}.meter span{display:block;height:100%}.legend span{display:inline-block;
margin-right:12px;font-size:12px}.legend i{display:inline-block;width:11px;height:11px;
margin-right:4px;vertical-align:-1px}svg text{font:11px system-ui,sans-serif;fill:#333}
svg .lane{fill:#f6f6f6}svg .axis{stroke:#888;stroke-width:1}svg .ceiling{stroke:#555;
stroke-dasharray:4 3}svg .roof{fill:none;stroke:#444;stroke-width:2}svg .kernel{
fill:#1f77b4;fill-opacity:.75;stroke:#fff}.note{color:#666;font-size:12px}
button{font:inherit;padding:4px 12px;cursor:pointer}
"""

# Sortable tables and the trace download; nothing else runs, and nothing is fetched.
_JS = """
document.querySelectorAll("table.sortable th").forEach(function (th, column) {
  th.addEventListener("click", function () {
    var body = th.closest("table").tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var numeric = th.classList.contains("n");
    var sign = th.dataset.sorted === "down" ? 1 : -1;
    th.dataset.sorted = sign === 1 ? "up" : "down";
    rows.sort(function (a, b) {
      var x = a.cells[column].dataset.v || a.cells[column].textContent;
      var y = b.cells[column].dataset.v || b.cells[column].textContent;
      return numeric ? sign * (parseFloat(x) - parseFloat(y)) : sign * x.localeCompare(y);
    });
    rows.forEach(function (row) { body.appendChild(row); });
  });
});
var save = document.getElementById("save-trace");
if (save) {
  save.addEventListener("click", function () {
    var text = document.getElementById("perfetto-trace").textContent;
    var link = document.createElement("a");
    link.href = URL.createObjectURL(new Blob([text], {type: "application/json"}));
    link.download = save.dataset.name;
    link.click();
  });
}
document.body.dataset.ready = "1";
"""


def _percent(value: float) -> str:
    return f"{100 * value:.1f} %"


def _cards(core: CoreTrace, fig: CoreFigures) -> str:
    summary = (core.meta or {}).get("summary") or {}
    cards = [("total latency", format_ns(fig.total_ns)), ("instructions", f"{len(core):,}")]
    if summary.get("tensor_precision"):
        cards.append((f"TensorE FLOP utilisation ({summary['tensor_precision']})",
                      _percent(summary.get("tensor_flops_utilisation", 0.0))))
    seconds = fig.total_ns * 1e-9
    cards.append(("DMA moved", format_bytes(fig.dma_bytes)))
    if seconds:
        cards.append(("DMA bandwidth over the run", f"{fig.dma_bytes / seconds / 1e9:,.1f} GB/s"))
    if summary:
        cards.append(("HBM read / written", f"{format_bytes(summary['hbm_read_bytes'])} / "
                      f"{format_bytes(summary['hbm_write_bytes'])}"))
        cards.append(("SBUF peak per partition",
                      f"{format_bytes(summary['sbuf_peak_bytes_per_partition'])} of "
                      f"{format_bytes(summary['sbuf_bytes_per_partition'])}"))
    return '<div class="cards">' + "".join(
        f'<div class="card"><span>{escape(k)}</span><b>{escape(v)}</b></div>' for k, v in cards
    ) + "</div>"


def _utilisation(fig: CoreFigures) -> str:
    rows = []
    for engine, active in fig.engine_active_ns.items():
        share = fig.engine_utilisation[engine]
        rows.append(f'<tr class="utilisation" data-engine="{escape(engine)}" '
                    f'data-utilisation="{share!r}"><td>{escape(engine)}</td>'
                    f'<td class="n" data-v="{active!r}">{escape(format_ns(active))}</td>'
                    f'<td class="n" data-v="{share!r}">{_percent(share)}</td><td>'
                    f'<span class="meter"><span style="width:{100 * min(share, 1):.1f}%;'
                    f'background:{charts.colour(engine)}"></span></span></td></tr>')
    return ('<table class="sortable"><thead><tr><th>engine</th><th class="n">active</th>'
            '<th class="n">utilisation</th><th>of the run</th></tr></thead><tbody>'
            + "".join(rows) + "</tbody></table>")


def _waits(fig: CoreFigures) -> str:
    total = fig.total_ns or 1.0
    causes = dict.fromkeys(c for row in fig.streams for c in row.waiting_ns)
    legend = "".join(f'<span><i style="background:{charts.wait_colour(c)}"></i>waiting on '
                     f'{escape(c)}</span>' for c in causes)
    rows = []
    for row in fig.streams:
        segments = [(row.active_ns, charts.colour(row.engine), 1.0, f"busy {format_ns(row.active_ns)}")]
        segments += [(ns, charts.wait_colour(c), 0.45, f"waiting on {c}: {format_ns(ns)}")
                     for c, ns in row.waiting_ns.items()]
        bar = "".join(f'<span style="width:{100 * ns / total:.2f}%;background:{fill};'
                      f'opacity:{alpha}" title="{escape(text)}"></span>'
                      for ns, fill, alpha, text in segments)
        waits = ", ".join(f"{c} {format_ns(ns)}" for c, ns in list(row.waiting_ns.items())[:3])
        rows.append(f'<tr class="waits" data-stream="{escape(row.name)}"><td>{escape(row.name)}'
                    f'</td><td class="n">{row.instructions:,}</td><td><div class="bar">{bar}'
                    f'</div></td><td>{escape(waits or "-")}</td><td class="n">'
                    f'{escape(format_ns(row.idle_after_ns))}</td></tr>')
    return (f'<p class="legend"><span><i style="background:#555"></i>busy (engine colour)</span>'
            f'{legend}<span><i style="background:#fff;border:1px solid #ccc"></i>idle after its '
            f'last instruction</span></p><table><thead><tr><th>stream</th><th class="n">instr'
            f'</th><th>the run, from start to end</th><th>waited on (largest)</th><th class="n">'
            f'idle after</th></tr></thead><tbody>' + "".join(rows) + "</tbody></table>")


def _instructions(rows, kind: str) -> str:
    body = []
    for r in rows:
        source = escape(r.source or "-")
        body.append(f'<tr class="{kind}" data-source="{escape(r.source or "")}"><td class="n">'
                    f'{r.index}</td><td><code>{escape(r.name)}</code></td><td>{escape(r.stream)}'
                    f'</td><td class="n" data-v="{r.busy_ns!r}">{escape(format_ns(r.busy_ns))}</td>'
                    f'<td class="n" data-v="{r.gap_ns!r}">{escape(format_ns(r.gap_ns))}</td>'
                    f'<td>{escape(r.waited_on or "-")}</td><td class="n" data-v="{r.start_ns!r}">'
                    f'{escape(format_ns(r.start_ns))}</td><td><code>{source}</code></td><td>'
                    f'<code>{escape("; ".join(r.operands[:2]))}</code></td></tr>')
    return ('<div class="scroll"><table class="sortable"><thead><tr><th class="n">#</th>'
            '<th>instruction</th><th>stream</th><th class="n">busy</th><th class="n">idle before'
            '</th><th>waited on</th><th class="n">start</th><th>source line</th><th>operands'
            '</th></tr></thead><tbody>' + "".join(body) + "</tbody></table></div>")


def _sources(fig: CoreFigures) -> str:
    busy_total = sum(s.busy_ns for s in fig.sources) or 1.0
    rows = "".join(
        f'<tr class="source" data-source="{escape(s.source)}"><td><code>{escape(s.source)}</code>'
        f'</td><td class="n">{s.instructions:,}</td><td class="n" data-v="{s.busy_ns!r}">'
        f'{escape(format_ns(s.busy_ns))}</td><td class="n">{_percent(s.busy_ns / busy_total)}</td>'
        f'<td>{escape(", ".join(f"{e} {format_ns(ns)}" for e, ns in s.engines.items()))}</td></tr>'
        for s in fig.sources)
    return ('<table class="sortable"><thead><tr><th>source line</th><th class="n">instructions'
            '</th><th class="n">engine-busy</th><th class="n">share of listed</th><th>by engine'
            '</th></tr></thead><tbody>' + rows + "</tbody></table>")


def _roofline(core: CoreTrace, fig: CoreFigures) -> str:
    meta = core.meta or {}
    precision = (meta.get("summary") or {}).get("tensor_precision")
    peak = (meta.get("peak_flops") or {}).get(precision) if precision else None
    bandwidth = meta.get("memory_bytes_per_s")
    plotted = [k for k in fig.kernels if k.flops > 0]
    if not plotted:
        return '<p class="note">No TensorE FLOPs in this run: no kernel to place on the roofline.</p>'
    note = (f"Roof: {precision} peak {peak / 1e12:,.1f} TFLOP/s and {bandwidth / 1e9:,.0f} GB/s "
            f"of HBM one core reaches alone (its DMA engines or the chip's HBM, the lower)."
            if peak and bandwidth else "This trace carries no core ceilings (not written by "
            "trnsim): kernels are placed without the roof.")
    rows = []
    for k in sorted(plotted, key=lambda k: -k.span_ns)[:20]:
        bound = attainable = ""
        if peak and bandwidth and k.intensity is not None:
            limit = min(peak, k.intensity * bandwidth)
            attainable = _percent(k.flops_per_s / limit)
            bound = "compute" if k.intensity * bandwidth >= peak else "memory"
        rows.append(f'<tr class="kernel" data-kernel="{escape(k.name)}" '
                    f'data-intensity="{k.intensity!r}" data-flops-per-s="{k.flops_per_s!r}">'
                    f'<td><code>{escape(k.name)}'
                    f'</code></td><td class="n" data-v="{k.span_ns!r}">{escape(format_ns(k.span_ns))}'
                    f'</td><td class="n">{k.flops:,}</td><td class="n">{escape(format_bytes(k.hbm_bytes))}'
                    f'</td><td class="n">{"-" if k.intensity is None else f"{k.intensity:,.1f}"}</td>'
                    f'<td class="n">{k.flops_per_s / 1e12:,.2f}</td><td>{bound or "-"}</td>'
                    f'<td class="n">{attainable or "-"}</td></tr>')
    return (f'<p class="note">{escape(note)}</p>' + charts.roofline(plotted, peak, bandwidth)
            + '<table class="sortable"><thead><tr><th>kernel</th><th class="n">span</th>'
            '<th class="n">TensorE FLOPs</th><th class="n">HBM bytes</th><th class="n">FLOPs/byte'
            '</th><th class="n">TFLOP/s</th><th>bound by</th><th class="n">of its roof</th></tr>'
            '</thead><tbody>' + "".join(rows) + "</tbody></table>")


def _dma_note(fig: CoreFigures) -> str:
    note = (f"{format_bytes(fig.dma_engine_bytes)} through the DMA engines, each transfer at the "
            f"share of the engines the simulator gave it")
    handed = fig.dma_bytes - fig.dma_engine_bytes
    if handed > 0:
        note += (f"; {format_bytes(handed)} more in on-chip hand-offs (tensors the compiler "
                 f"kept in SBUF: no engine, no HBM)")
    return note + "."


def _core_section(core: CoreTrace, number: int) -> str:
    fig = figures(core)
    meta = core.meta or {}
    ceiling = meta.get("memory_bytes_per_s")
    where = (f'{escape(meta["program"])} on {escape(meta["core"])} (core {meta["core_index"]}, '
             f'{escape(meta["chip"])}, {escape(meta["mode"])})' if meta else escape(core.title))
    return (f'<section class="core" id="core-{number}" data-pid="{core.pid}" '
            f'data-total-ns="{fig.total_ns!r}"><h2>{where}</h2>{_cards(core, fig)}'
            f'<h3>Engine timeline</h3><p class="note">One track per stream (TensorE has a load '
            f'and a multiply pipeline; each DMA queue is a track). Hover a mark for the '
            f'instruction, its source line and what it waited on.</p><div class="scroll">'
            f'{charts.timeline(core, fig)}</div><h3>DMA bandwidth over time</h3>'
            f'<p class="note">{escape(_dma_note(fig))}</p>'
            f'<div class="scroll">{charts.bandwidth_chart(fig, ceiling)}</div>'
            f'<h3>Utilisation per engine</h3>{_utilisation(fig)}'
            f'<h3>What each stream waited on</h3>{_waits(fig)}'
            f'<h3>Longest waits (dependency, semaphore and queue stalls)</h3>'
            f'{_instructions(fig.stalls, "stall")}'
            f'<h3>Slowest instructions</h3>{_instructions(fig.slowest, "slow")}'
            f'<h3>Source lines by engine-busy time</h3>{_sources(fig)}'
            f'<h3>Roofline</h3>{_roofline(core, fig)}</section>')


def _trace_section(trace: TraceFile) -> str:
    name = trace.path.rsplit("/", 1)[-1]
    if len(trace.text.encode()) > EMBED_TRACE_MAX_BYTES:
        return (f'<section id="perfetto"><h2>Perfetto trace</h2><p>The trace '
                f'(<code>{escape(trace.path)}</code>) is too large to embed '
                f'({len(trace.text) / 2**20:,.0f} MiB > {EMBED_TRACE_MAX_BYTES >> 20} MiB): open '
                f'that file in <code>https://ui.perfetto.dev</code> (Open trace file).</p></section>')
    payload = trace.text.replace("</", "<\\/")  # cannot close the script element
    return (f'<section id="perfetto"><h2>Perfetto trace</h2><p>The whole trace is embedded in '
            f'this page. <button id="save-trace" data-name="{escape(name)}">Save trace</button> '
            f'then open it in <code>https://ui.perfetto.dev</code> (Open trace file) or '
            f'<code>chrome://tracing</code> for every instruction, its operands and its '
            f'timing.</p><script type="application/json" id="perfetto-trace">{payload}</script>'
            f'</section>')


def render(trace: TraceFile) -> str:
    """The report of `trace` as one HTML document."""
    cores = "".join(_core_section(core, n) for n, core in enumerate(trace.cores))
    title = f"trnsim profile: {trace.path.rsplit('/', 1)[-1]}"
    nav = " · ".join(f'<a href="#core-{n}">{escape(core.title)}</a>'
                     for n, core in enumerate(trace.cores)) if len(trace.cores) > 1 else ""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"generator\" content=\"trnsim {escape(__version__)}\">"
            f"<title>{escape(title)}</title><style>{_CSS}</style></head><body>"
            f"<header><h1>{escape(title)}</h1><p>Simulated by trnsim {escape(__version__)}: one "
            f"section per core (or per graph of a training step); times are simulated, from the "
            f"start of the run. {nav}</p></header><main>{cores}{_trace_section(trace)}</main>"
            f"<script>{_JS}</script></body></html>\n")

