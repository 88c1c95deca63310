"""The lazy xla device (trnsim.runtime.xla): unmodified torch-xla scripts, each run in its own
process under `python -m trnsim.run` (the device registers a PyTorch backend and a process-wide
torch-function mode, which must not leak into the other tests)."""

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

SCRIPTS = Path(__file__).parent / "xla_scripts"
SRC = Path(__file__).resolve().parents[2] / "src"


def run_script(tmp_path, *argv: str, launcher: tuple[str, ...] = (), **env: str) -> dict:
    environ = {**os.environ, "PYTHONPATH": str(SRC), "TRNSIM_CACHE_DIR": str(tmp_path), **env}
    command = [*launcher] if launcher else [sys.executable]
    done = subprocess.run([*command, "-m", "trnsim.run", *argv], capture_output=True, text=True,
                          env=environ, timeout=600, cwd=tmp_path)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


@pytest.fixture(scope="module")
def lazy(tmp_path_factory):
    root = tmp_path_factory.mktemp("lazy")
    result = run_script(root, str(SCRIPTS / "lazy_semantics.py"),
                        TRNSIM_XLA_PROFILE_DIR=str(root / "traces"))
    result["traces"] = sorted(p.name for p in (root / "traces").glob("*.json"))
    return result


def test_item_cuts_the_graph_at_the_users_line(lazy):
    assert lazy["device_type"] == "xla:0"
    assert lazy["item_graphs"] == 1 and lazy["item_why"] == ".item()"
    assert lazy["item_source_line"] == "lazy_semantics.py:25"


def test_same_step_compiles_once_then_hits_the_cache(lazy):
    # step 1 was cut by .item() (its forward ran apart), step 2 is the steady graph, 3-4 reuse it
    assert lazy["cache"] == ["compiled", "compiled", "memory", "memory"]
    assert lazy["counters"]["CachedCompile"] == 2
    assert lazy["losses"][-1] < lazy["losses"][0]
    assert "CompileTime" in lazy["short_report"] and "ExecuteTime" in lazy["short_report"]


def test_recompilation_names_the_tensor_the_shapes_and_the_line(lazy):
    (message,) = lazy["recompilations"]
    assert "lazy_semantics.py:58" in message  # the mark_step that cut it
    assert "created at lazy_semantics.py:53" in message
    assert "float32[5, 16] to float32[6, 16]" in message


def test_step_report_splits_device_time_and_counts_hbm(lazy):
    report = lazy["report"]
    phases = report["phase_ms"]
    assert report["step_ms"] > 0 and phases["forward"] > 0 and phases["backward"] > 0
    assert phases["optimizer"] > 0 and phases["collectives"] == 0
    assert report["step_ms"] == pytest.approx(sum(phases.values()))
    assert report["throughput"] == pytest.approx(8 / (report["step_ms"] * 1e-3))
    weights = (16 * 32 + 32 + 32 * 4 + 4) * 4
    assert report["hbm"]["weights_bytes"] == weights
    # the script frees the gradients (zero_grad) before mark_step: they still held HBM
    assert report["hbm"]["gradients_bytes"] == weights
    assert report["hbm"]["activations_bytes"] > 0


def test_each_compiled_graph_writes_a_perfetto_trace_when_asked(lazy):
    assert len(lazy["traces"]) == lazy["uncached_compiles"] > lazy["counters"]["UncachedCompile"]


def test_unknown_symbol_names_itself_and_the_line(lazy):
    kind, text = lazy["unknown"]
    assert kind == "UnsupportedError"
    assert "xla_model.no_such_function" in text and "lazy_semantics.py:61" in text


# GPT-2's values are the simulator's (fp32 matmuls: neuronx-cc's default casts them to bf16)
SIMULATED = {"bert": {}, "gpt2": {"TRNSIM_XLA_VALUES": "simulated",
                                  "NEURON_CC_FLAGS": "--auto-cast none"}}


@pytest.mark.parametrize("model", ["bert", "gpt2"])
def test_seed_loop_trains_with_eager_gradients(tmp_path, model):
    result = run_script(tmp_path, str(SCRIPTS / "seed_loop.py"), model, **SIMULATED[model])
    assert result["grad_error"] < 1e-5  # fp32: the same ops as eager PyTorch
    losses = result["losses"]
    assert all(b < a for a, b in itertools.pairwise(losses)), losses
    assert losses == pytest.approx(result["cpu_losses"], rel=1e-5)  # eager fp32 on CPU
    assert result["cache"][2:] == ["memory", "memory"]  # one compilation for steps 2..n
    assert result["step_ns"] > 0


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_data_parallel_ranks_agree_with_one_process(tmp_path):
    torchrun = Path(sys.executable).with_name("torchrun")
    result = run_script(tmp_path, str(SCRIPTS / "data_parallel.py"),
                        launcher=(str(torchrun), "--nproc_per_node=4", "--master_addr=127.0.0.1",
                                  f"--master_port={_free_port()}"),
                        TRNSIM_INSTANCE="trn1.32xlarge")
    assert result["ranks_identical"]
    assert result["error_vs_single"] < 1e-6
    assert result["collectives"] == [["all_reduce", (16 * 8 + 16 + 2 * 16 + 2) * 4, 4]]
    assert result["collective_ms"] > 0


def test_hbm_overflow_names_each_part():
    from trnsim import hardware
    from trnsim.runtime.xla.memory import HbmOverflowError, HbmUse, check_fits, core_capacity

    spec = hardware.instance("trn1.2xlarge")
    gib = 1 << 30
    use = HbmUse(6 * gib, 6 * gib, 12 * gib, 3 * gib, core_capacity(spec))
    assert use.capacity == 16 * gib
    with pytest.raises(HbmOverflowError) as error:
        check_fits(use, spec, "train.py:9")
    text = str(error.value)
    for part in ("weights 6.00 GiB", "gradients 6.00 GiB", "optimizer state 12.00 GiB",
                 "activations 3.00 GiB", "16.00 GiB", "train.py:9"):
        assert part in text


def test_stochastic_rounding_is_seeded_and_unbiased(tmp_path):
    result = run_script(tmp_path, str(SCRIPTS / "rounding.py"), TRNSIM_XLA_TIMING="off")
    assert result["rne"] == 256.0 and result["downcast_rne"] == 256.0  # every +0.5 is lost
    assert result["sr_seed0"] == result["sr_seed0_again"]  # same seed, same bits
    assert result["sr_seed0"] != result["sr_seed3"]
    for value in (result["sr_seed0"], result["sr_seed3"], result["downcast_sr"]):
        # E = 256 + 256 * 0.5 = 384; each add rounds up by 2 with p = 1/4: sd = 2 * sqrt(48)
        assert abs(value - 384.0) < 6 * 2 * 48 ** 0.5, value


@pytest.fixture(scope="module")
def overlap_runs(tmp_path_factory):
    env = {"TRNSIM_INSTANCE": "trn1.32xlarge", "TRNSIM_XLA_SIMULATED_WORLD": "32",
           "ALLREDUCE_GRADIENTS_BUCKET_SIZE_MB": "2"}
    return {flag: run_script(tmp_path_factory.mktemp(f"overlap{flag}"),
                             str(SCRIPTS / "overlap.py"), TRNSIM_XLA_COLLECTIVE_OVERLAP=flag,
                             **env) for flag in ("1", "0")}


def test_bucketed_all_reduces_overlap_the_backward(overlap_runs):
    on, off = overlap_runs["1"]["report"], overlap_runs["0"]["report"]
    assert on["collective_count"] == off["collective_count"] == 4  # 4 MiB of grads, 2 MiB buckets
    assert on["collectives_total_ms"] == pytest.approx(off["collectives_total_ms"])
    assert off["collectives_overlapped_ms"] == pytest.approx(0.0, abs=1e-9)
    assert on["collectives_overlapped_ms"] > 0
    assert on["step_ms"] < off["step_ms"]
    waited = on["collectives_total_ms"] - on["collectives_overlapped_ms"]
    assert off["phase_ms"]["collectives"] - on["phase_ms"]["collectives"] == pytest.approx(
        on["collectives_overlapped_ms"])  # the same graph: only the wait differs
    assert on["phase_ms"]["collectives"] >= waited - 1e-9  # (plus the engines' scaling)
    assert overlap_runs["1"]["params"] == overlap_runs["0"]["params"]  # timing only


def test_meta_weights_are_refused_by_name_and_train_once_materialised(lazy):
    kind, text = lazy["meta"]
    assert kind == "MetaTensorError"
    assert "meta device" in text and "[4, 16]" in text and "to_empty" in text
    assert "lazy_semantics.py:" in text
    assert lazy["materialised_loss"] > 0


def test_shapes_only_device_times_the_step_as_the_valued_one_and_refuses_reads(tmp_path):
    (tmp_path / "values").mkdir()
    (tmp_path / "shapes").mkdir()  # caches apart: the second run compiles and simulates too
    valued = run_script(tmp_path / "values", str(SCRIPTS / "shapes_only.py"))
    shapes = run_script(tmp_path / "shapes", str(SCRIPTS / "shapes_only.py"),
                        TRNSIM_XLA_VALUES="shapes")
    assert not valued["meta"] and valued["read"] == "ok"
    assert shapes["meta"]  # no storage behind a device tensor
    assert shapes["phase_ms"] == valued["phase_ms"]  # no instruction's cost reads a value
    assert shapes["read"].startswith("ShapesOnlyError: .item() reads a device value")
    assert "shapes_only.py:" in shapes["read"]


def test_activation_checkpointing_trains_to_the_plain_gradients(tmp_path):
    import numpy as np

    result = run_script(tmp_path, str(SCRIPTS / "checkpointing.py"))
    plain, checkpointed = result["plain"], result["checkpointed"]
    np.testing.assert_allclose(checkpointed["grad"], plain["grad"], rtol=1e-6, atol=1e-6)
    assert checkpointed["backward_ms"] > 0


def test_non_reentrant_checkpointing_trains_and_its_errors_reach_the_script(tmp_path):
    import numpy as np

    result = run_script(tmp_path, str(SCRIPTS / "checkpoint_nonreentrant.py"))
    for name in ("plain", "checkpointed", "after"):
        for grad, reference in zip(result[name], result["cpu"], strict=True):
            np.testing.assert_allclose(grad, reference, rtol=1e-6, atol=1e-6, err_msg=name)
    for grad, plain in zip(result["checkpointed"], result["plain"], strict=True):
        np.testing.assert_array_equal(grad, plain)  # the recomputation is the same fp32 work
    assert result["raised"] == "ValueError: the recomputation failed"
    assert result["mismatch"].startswith("CheckpointError: torch.utils.checkpoint")
    assert result["backward_op"].startswith("RuntimeError: mat1 and mat2 shapes cannot be mult")
