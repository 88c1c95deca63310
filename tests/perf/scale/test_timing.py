"""The per-shape timer: a measuring child that dies says how, and which shapes it left."""

import pytest

from trnsim.perf.scale.layer import HeadShape, LayerShape
from trnsim.perf.scale.timing import MeasurementError, Timer

LAYER = LayerShape(64, 2, 1, 32, 64, True, "rms", True, True, 1, 32)
HEAD = HeadShape(64, 100, "rms", 1, 32)


def test_a_child_killed_by_the_oom_killer_is_named_with_the_shapes_left(tmp_path, monkeypatch):
    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(tmp_path))
    timer = Timer("trn1.32xlarge", "bf16", "adamw")
    monkeypatch.setattr(timer, "_run_child", lambda request, env, count: (-9, 1, ""))
    with pytest.raises(MeasurementError) as caught:
        timer.ensure([("layer", LAYER), ("head", HEAD)])
    message = str(caught.value)
    assert "killed by SIGKILL" in message and "out of host memory" in message
    assert "1 of 2 shape(s) timed" in message and HEAD.key() in message
    assert LAYER.key() not in message.split("not timed:")[1]
