"""The warm-trace cache: a second trace of the same model skips capture and lowering."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")

import trnsim  # noqa: E402
import trnsim.compiler  # noqa: E402


class Small(torch.nn.Module):
    def __init__(self, scale: float = 0.5) -> None:
        super().__init__()
        self.up = torch.nn.Linear(64, 128)
        self.down = torch.nn.Linear(128, 64)
        self.scale = scale

    def forward(self, x):
        return self.down(torch.relu(self.up(x))) * self.scale


@pytest.fixture(scope="module")
def shared_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")  # the unchanged model's trace is compiled once


@pytest.fixture
def cache(monkeypatch, shared_dir):
    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(shared_dir))
    return shared_dir


def _no_capture(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("captured again")
    monkeypatch.setattr(sys.modules["trnsim.compiler.capture"], "capture", refuse)


def test_a_warm_trace_reports_without_capturing_and_runs_alike(cache, monkeypatch):
    torch.manual_seed(0)
    model, x = Small().eval(), torch.randn(4, 64)
    cold = trnsim.trace(model, (x,), instance="inf2.xlarge")
    cold_report, cold_out = cold.report(), cold(x)
    assert not cold.meta.get("trace_cache_hit")
    with monkeypatch.context() as patch:
        _no_capture(patch)
        warm = trnsim.trace(model, (x,), instance="inf2.xlarge")
        report = warm.report()  # the report is cached beside the compile cache's program
    assert warm.meta["trace_cache_hit"] and report.latency_ms == cold_report.latency_ms
    assert [s.shape for s in warm.inputs] == [s.shape for s in cold.inputs]
    out = warm(x)  # a functional call compiles the live model now
    assert torch.equal(out, cold_out)
    assert warm.program.instructions == cold.program.instructions


@pytest.mark.parametrize("change", ["shape", "attribute", "small weight", "options", "hook"])
def test_what_decides_the_capture_misses_the_cache(cache, change, monkeypatch):
    torch.manual_seed(0)
    model, x = Small().eval(), torch.randn(4, 64)
    trnsim.trace(model, (x,), instance="inf2.xlarge")
    options = {"instance": "inf2.xlarge"}
    if change == "shape":
        x = torch.randn(2, 64)
    elif change == "attribute":
        model.scale = 0.25
    elif change == "small weight":
        with torch.no_grad():
            model.down.bias[0] += 1  # parameters this small are keyed by value
    elif change == "options":
        options["auto_cast"] = "none"
    else:
        model.register_forward_hook(lambda module, args, out: out)
    calls = []
    real = sys.modules["trnsim.compiler.compile"].compile
    monkeypatch.setattr(sys.modules["trnsim.compiler"], "compile",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    again = trnsim.trace(model, (x,), **options)
    assert calls and not again.meta.get("trace_cache_hit")
