"""TensorBoard on trnsim: a training script's SummaryWriter works under `python -m trnsim.run`
and its event files hold trnsim's step time, throughput and MFU beside the script's loss, read
back with TensorBoard's own reader. The same run's step trace makes a profile report."""

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.runtime.test_xla import SCRIPTS, run_script
from trnsim.runtime.xla.tensorboard import MFU_TAG, STEP_TIME_TAG, THROUGHPUT_TAG


def scalars(logdir: Path) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(logdir))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)]
            for tag in events.Tags()["scalars"]}


@pytest.fixture(scope="module")
def training(tmp_path_factory):
    root = tmp_path_factory.mktemp("tensorboard")
    result = run_script(root, str(SCRIPTS / "tensorboard_logging.py"), str(root / "runs"),
                        str(root / "step.json"), TRNSIM_XLA_PROFILE_DIR=str(root / "traces"))
    return root, result


def test_script_summary_writer_gets_trnsim_step_figures(training):
    root, result = training
    logdir = root / "runs"
    assert result["is_summary_writer"]  # the script's isinstance checks still hold
    logged = scalars(logdir)
    # the script's own scalar, as it wrote it
    assert [s for s, _ in logged["loss"]] == [1, 2, 3]
    assert [v for _, v in logged["loss"]] == pytest.approx(result["losses"], rel=1e-6)
    # trnsim's, one per mark_step, equal to the step report the script read at that step
    assert [s for s, _ in logged[STEP_TIME_TAG]] == [1, 2, 3]
    assert [v for _, v in logged[STEP_TIME_TAG]] == pytest.approx(result["step_ms"], rel=1e-6)
    assert logged[THROUGHPUT_TAG][-1][1] == pytest.approx(result["throughput"], rel=1e-6)
    assert logged[THROUGHPUT_TAG][-1][1] == pytest.approx(8 / (result["step_ms"][-1] * 1e-3),
                                                          rel=1e-5)
    assert logged[MFU_TAG][-1][1] == pytest.approx(100 * result["mfu"], rel=1e-5)


def test_training_step_trace_makes_a_report(training):
    from trnsim.perf.profile_report import read_trace, render
    from trnsim.perf.profile_report.analysis import figures

    root, result = training
    trace = read_trace(root / "step.json")
    # the step's graphs one after another: their device times add up to the step's
    total = sum(figures(core).total_ns for core in trace.cores)
    assert total == pytest.approx(result["step_ms"][-1] * 1e6, rel=1e-9)
    assert [core.title.split(":")[0] for core in trace.cores] == [
        f"graph {n + 1} of {len(trace.cores)} (mark_step)" for n in range(len(trace.cores))]
    assert render(trace).count('class="core"') == len(trace.cores)
