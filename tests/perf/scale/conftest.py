"""Timings written straight into the planner's cache, so composition and search are tested
without simulating (the simulated path has its own tests in test_agreement.py)."""

import json

import pytest

from trnsim.perf.scale.timing import entry_path


def synthetic(kind: str, shape) -> dict:
    """A timing that grows with the shape's work (any monotone stand-in would do)."""
    tokens = shape.micro_batch * shape.seq
    width = shape.ffn if kind == "layer" else shape.vocab
    forward = 1e3 + tokens * shape.hidden * width * 1e-3
    return {"forward_ns": forward, "backward_ns": 2 * forward,
            "optimizer_ns": shape.hidden * width * 1e-2, "flops": 0.0, "chunks": 1}


@pytest.fixture
def fake_timings(tmp_path, monkeypatch):
    """Returns `write(model, system, pairs)` that caches synthetic timings for every shape the
    (layout, work) pairs need."""
    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(tmp_path / "cache"))
    from trnsim.perf.scale.plan import resolve_layout, shapes_for

    def write(model, system, pairs):
        for layout, work in pairs:
            try:
                layout = resolve_layout(model, system, layout, work)
            except Exception:
                continue
            for kind, shape in shapes_for(model, layout, work):
                path = entry_path(kind, shape, system.instance, work.precision, work.optimizer)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(synthetic(kind, shape)))

    return write
