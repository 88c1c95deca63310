"""`trnsim train --tensorboard DIR --trace FILE`, end to end in its own process (the lazy device
must not leak into other tests), on a one-layer GPT-2 small enough to train in seconds: the
event files (read with TensorBoard's own reader) hold loss, step time, throughput and MFU per
step, equal to the step report; the step's trace makes a profile report."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("tensorboard")

SRC = Path(__file__).resolve().parents[2] / "src"
# the zoo's models are too large for a test; the command is the same for a tiny entry
TINY = """
import sys
from trnsim.perf.training import TRAIN_ZOO, TrainEntry
TRAIN_ZOO["tiny-gpt2"] = TrainEntry("tiny-gpt2", "GPT2LMHeadModel", "GPT2Config",
    dict(n_embd=64, n_layer=1, n_head=2, vocab_size=512, n_positions=64), "lm", default_seq=32)
from trnsim.cli import main
main(sys.argv[1:])
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("train")
    env = {**os.environ, "PYTHONPATH": str(SRC), "TRNSIM_CACHE_DIR": str(root / "cache")}
    done = subprocess.run([sys.executable, "-c", TINY, "train", "--model", "tiny-gpt2",
                           "--steps", "3", "--seq", "32", "--micro-batch", "2", "--json",
                           "--trace", "step.json", "--tensorboard", "runs"],
                          capture_output=True, text=True, env=env, cwd=root, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return root, json.loads(done.stdout)


def test_tensorboard_event_files_hold_the_step_figures(trained):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from trnsim.runtime.xla.tensorboard import LOSS_TAG, MFU_TAG, STEP_TIME_TAG, THROUGHPUT_TAG

    root, report = trained
    events = EventAccumulator(str(root / "runs"))
    events.Reload()
    assert {LOSS_TAG, STEP_TIME_TAG, THROUGHPUT_TAG, MFU_TAG} <= set(events.Tags()["scalars"])
    for tag in (LOSS_TAG, STEP_TIME_TAG, THROUGHPUT_TAG, MFU_TAG):
        assert [e.step for e in events.Scalars(tag)] == [1, 2, 3], tag
    last = {tag: events.Scalars(tag)[-1].value for tag in (STEP_TIME_TAG, THROUGHPUT_TAG, MFU_TAG)}
    assert last[STEP_TIME_TAG] == pytest.approx(report["step_ms"], rel=1e-6)
    assert last[THROUGHPUT_TAG] == pytest.approx(report["throughput_per_s"], rel=1e-6)
    assert last[MFU_TAG] == pytest.approx(100 * report["mfu"], rel=1e-5)
    losses = [e.value for e in events.Scalars(LOSS_TAG)]
    assert all(0 < loss < 10 for loss in losses)  # cross-entropy over 512 tokens: ln 512 = 6.2


def test_step_trace_makes_a_report(trained):
    from trnsim.perf.profile_report import read_trace
    from trnsim.perf.profile_report.analysis import figures

    root, report = trained
    trace = read_trace(root / "step.json")
    assert len(trace.cores) == report["graphs"]
    total = sum(figures(core).total_ns for core in trace.cores)
    assert total == pytest.approx(report["step_ms"] * 1e6, rel=1e-9)


def test_shapes_only_times_the_same_step_without_values(trained):
    """The shapes-only run of the fixture's job, on its compile cache: the valued run is the
    fixture's (its trace and event files are outputs, not inputs of the step's timing).
    `--shapes-only --tensorboard` is refused in tests/cli/test_train.py."""
    root, valued = trained
    env = {**os.environ, "PYTHONPATH": str(SRC), "TRNSIM_CACHE_DIR": str(root / "cache")}
    done = subprocess.run([sys.executable, "-c", TINY, "train", "--model", "tiny-gpt2",
                           "--steps", "3", "--seq", "32", "--micro-batch", "2", "--json",
                           "--shapes-only"],
                          capture_output=True, text=True, env=env, cwd=root, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    shapes = json.loads(done.stdout)
    # no instruction's cost depends on a value: the same graphs, the same step
    assert shapes["step_ms"] == pytest.approx(valued["step_ms"], rel=1e-9)
    assert shapes["phase_ms"] == pytest.approx(valued["phase_ms"], rel=1e-9)


def test_shapes_only_is_for_its_run_alone(trained, tmp_path):
    """run_training(shapes_only=True) leaves the device computing values for the next run (on
    the fixture's compile cache: the same job's graphs)."""
    script = TINY.replace("from trnsim.cli import main\nmain(sys.argv[1:])\n", """
import os
from trnsim.perf.training import run_training
from trnsim.runtime.xla.device import DEVICE, VALUES_ENV
kw = dict(micro_batch=2, seq=32, steps=1)
shapes = run_training("tiny-gpt2", shapes_only=True, **kw)
assert not DEVICE.shapes_only and VALUES_ENV not in os.environ
valued = run_training("tiny-gpt2", **kw)
assert abs(valued.step_ms - shapes.step_ms) <= 1e-9 * shapes.step_ms, (valued.step_ms, shapes.step_ms)
print("ok")
""")
    assert "run_training" in script
    env = {**os.environ, "PYTHONPATH": str(SRC), "TRNSIM_CACHE_DIR": str(trained[0] / "cache")}
    env.pop("TRNSIM_XLA_VALUES", None)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
