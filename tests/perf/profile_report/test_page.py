"""The HTML report's content against the simulator's own profile: every stream on the timeline,
utilisation equal to `ProfileSummary`, the slowest instructions with their source lines, the DMA
bandwidth series holding every byte, the roofline point, and escaping of what the trace says."""

import json
import re
from html.parser import HTMLParser

import numpy as np
import pytest

from trnsim.errors import InvalidArgumentError
from trnsim.perf.profile_report import read_trace, render, write_report
from trnsim.perf.profile_report.analysis import figures


class Elements(HTMLParser):
    """Every start tag with its attributes, in document order."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def find(self, tag: str, cls: str) -> list[dict]:
        return [a for t, a in self.tags if t == tag and cls in (a.get("class") or "").split()]


@pytest.fixture(scope="module")
def page(kernel_trace):
    return render(read_trace(kernel_trace))


@pytest.fixture(scope="module")
def elements(page):
    return Elements(page)


def test_timeline_has_a_track_for_every_stream_of_every_engine(kernel_profile, elements):
    tracks = elements.find("g", "track")
    assert {t["data-stream"] for t in tracks} == set(kernel_profile.summary.streams)
    assert {t["data-engine"] for t in tracks} == set(kernel_profile.summary.engine_active_ns)
    assert sum(int(t["data-instructions"]) for t in tracks) == len(kernel_profile)


def test_utilisation_equals_the_simulators_summary(kernel_profile, elements):
    rows = {r["data-engine"]: float(r["data-utilisation"]) for r in elements.find("tr", "utilisation")}
    expected = kernel_profile.summary.engine_utilisation
    assert set(rows) == set(expected)
    for engine, share in expected.items():
        assert rows[engine] == pytest.approx(share, rel=1e-9)


def test_waits_per_stream_equal_the_simulators(kernel_profile, kernel_trace):
    (core,) = read_trace(kernel_trace).cores
    rows = {r.name: r for r in figures(core).streams}
    for name, stream in kernel_profile.summary.streams.items():
        assert rows[name].active_ns == pytest.approx(stream.active_ns, rel=1e-9)
        assert set(rows[name].waiting_ns) == set(stream.waiting_ns)
        for cause, ns in stream.waiting_ns.items():
            assert rows[name].waiting_ns[cause] == pytest.approx(ns, rel=1e-9, abs=1e-6)


def test_slowest_instructions_are_the_slowest_and_carry_their_source_lines(kernel_profile, elements):
    rows = elements.find("tr", "slow")
    busy = kernel_profile.end_ns - kernel_profile.start_ns
    slowest = np.argsort(-busy, kind="stable")[:len(rows)]
    assert len(rows) == 15
    assert [r["data-source"] for r in rows] == [kernel_profile.record(int(i)).source for i in slowest]
    # the tutorial kernel's own lines (not the command line's machinery that called it)
    assert all(re.fullmatch(r"tutorials\.py:\d+", r["data-source"]) for r in rows)


def test_dma_bandwidth_series_holds_every_byte(kernel_profile, kernel_trace):
    (core,) = read_trace(kernel_trace).cores
    fig = figures(core)
    moved = float(np.sum(fig.dma_bytes_per_s * np.diff(fig.dma_edges_ns) * 1e-9))
    assert moved == pytest.approx(kernel_profile.summary.dma_bytes, rel=1e-9)
    # every byte through the DMA engines (this kernel has no on-chip hand-off)
    assert kernel_profile.nbytes[np.unique(kernel_profile.moved_record)].sum() == \
        kernel_profile.summary.dma_bytes
    # never above what the core's DMA engines can move (each transfer at most its own rate)
    dma = kernel_profile.core.dma
    assert fig.dma_bytes_per_s.max() <= dma.engines * dma.bytes_per_s_per_engine * (1 + 1e-9)


def test_roofline_places_the_kernel_at_its_flops_per_hbm_byte(kernel_profile, elements):
    (point,) = elements.find("circle", "kernel")
    assert point["data-kernel"] == kernel_profile.program.name
    (row,) = elements.find("tr", "kernel")
    summary = kernel_profile.summary
    intensity = summary.tensor_flops / (summary.hbm_read_bytes + summary.hbm_write_bytes)
    assert float(row["data-intensity"]) == pytest.approx(intensity, rel=1e-12)
    # the whole program is the kernel: its FLOP/s is the summary's FLOP utilisation of the peak
    achieved = summary.tensor_flops_utilisation * summary.tensor_peak_flops
    assert float(row["data-flops-per-s"]) == pytest.approx(achieved, rel=1e-9)


def test_page_is_self_contained_and_embeds_the_trace(kernel_trace, page):
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "@import" not in page and "url(" not in page
    embedded = re.search(r'<script type="application/json" id="perfetto-trace">(.*?)</script>',
                         page, re.S).group(1)
    assert json.loads(embedded.replace("<\\/", "</")) == json.loads(kernel_trace.read_text())


def test_text_from_the_trace_is_escaped(kernel_trace, tmp_path):
    document = json.loads(kernel_trace.read_text())
    evil = "<script>alert(1)</script>"
    for event in document["traceEvents"]:
        if event["ph"] == "X":
            event["args"]["source"] = evil
            event["name"] = evil
    path = tmp_path / "evil.json"
    path.write_text(json.dumps(document))
    page = render(read_trace(path))
    assert "alert(1)</script>" not in page.replace("alert(1)<\\/script>", "")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_bad_traces_are_refused_by_name(tmp_path):
    for text, message in (("not json", "not JSON"), ('{"traceEvents": 3}', "no traceEvents"),
                          ('{"traceEvents": []}', "no instructions"),
                          ('{"traceEvents": [], "metadata": {"trnsim": {"format": 99, '
                           '"cores": []}}}', "not one this trnsim reads"),
                          ('{"traceEvents": [], "metadata": {"trnsim": {"format": 1, '
                           '"cores": [{"pid": "0"}]}}}', "field pid is '0'"),
                          ('{"traceEvents": [], "metadata": []}', "no instructions"),
                          ("[" * 100000 + "]" * 100000, "nested too deeply")):
        path = tmp_path / "bad.json"
        path.write_text(text)
        with pytest.raises(InvalidArgumentError, match=message):
            read_trace(path)


def test_write_report_defaults_to_the_trace_name(kernel_trace):
    path = write_report(kernel_trace)
    assert path == kernel_trace.with_suffix(".html") and path.read_text().startswith("<!DOCTYPE")
