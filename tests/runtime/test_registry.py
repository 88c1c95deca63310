"""The runtime registry: records written atomically in a private directory, read back, removed
when their process dies; period samples; the hook in a compiled model's call."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trnsim.runtime.registry import store
from trnsim.runtime.registry.process import ProcessRecord
from trnsim.runtime.registry.sample import Sampler, sample

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture
def registry(tmp_path):
    return store.ensure_dir(tmp_path / "registry")


def _record(directory) -> ProcessRecord:
    record = ProcessRecord(directory)
    record._stop.set()  # tests flush by hand
    return record


def test_directory_is_private_and_checked(tmp_path):
    directory = store.ensure_dir(tmp_path / "reg")
    assert (directory.stat().st_mode & 0o777) == 0o700
    directory.chmod(0o755)
    with pytest.raises(store.RegistryDirError, match="open to other users"):
        store.read_records(directory)
    link = tmp_path / "link"
    link.symlink_to(directory)
    with pytest.raises(store.RegistryDirError, match="not a directory"):
        store.check_dir(link)


def test_default_directory_is_per_user(monkeypatch, tmp_path):
    environ = {"XDG_RUNTIME_DIR": str(tmp_path)}
    assert store.registry_dir(environ) == tmp_path / "trnsim"
    assert store.registry_dir({}).name == f"trnsim-{os.getuid()}"
    assert store.registry_dir({store.DIR_ENV: "/x/y"}) == Path("/x/y")


def test_counters_round_trip_and_record_is_removed_at_close(registry):
    record = _record(registry)
    model = record.load_model(name="m", kind="inference", instance="inf2.xlarge", cores=[1],
                              hbm_by_core={1: {"constants": 100, "tensors": 20}})
    started = record.begin()
    record.executed(model, started, device_ns=2_000.0,
                    per_core={1: {"engine_busy_ns": {"tensor": 500.0}, "dma_bytes": 64, "flops": 10}})
    record.failed(model, record.begin(), status="incorrect_input", error="generic")
    record.flush()
    [read] = store.read_records(registry)
    assert read["pid"] == os.getpid() and read["tag"] == str(os.getpid())
    [core] = read["cores"]
    assert (core["instance"], core["core"], core["executions"], core["errors"]) == ("inf2.xlarge", 1, 1, 1)
    assert core["engine_busy_ns"] == {"tensor": 500.0} and core["dma_bytes"] == 64
    assert read["execution_status"]["completed"] == 1
    assert read["execution_status"]["incorrect_input"] == 1
    assert read["models"][0]["hbm"]["1"]["constants"] == 100
    assert len(read["latency"]) == 1 and read["latency"][0][2] == pytest.approx(2e-6)
    assert not [p for p in registry.iterdir() if p.name.startswith(store.TEMP_PREFIX)]
    record.close()
    assert store.read_records(registry) == []


def test_a_killed_process_leaves_no_entry(registry):
    child = textwrap.dedent(f'''
        import sys, time
        sys.path.insert(0, {str(SRC)!r})
        from trnsim.runtime.registry.process import ProcessRecord
        record = ProcessRecord(__import__("pathlib").Path({str(registry)!r}))
        record.load_model(name="m", kind="inference", instance="trn1.2xlarge", cores=[0],
                          hbm_by_core={{}})
        record.flush()
        print("ready", flush=True)
        time.sleep(60)
    ''')
    process = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline().strip() == "ready"
        assert [r["pid"] for r in store.read_records(registry)] == [process.pid]
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    assert store.read_records(registry) == []
    assert not store.record_path(registry, process.pid).exists()


def test_a_reused_pid_is_not_the_recorded_process(registry):
    record = {"format": store.FORMAT, "pid": os.getpid(), "proc_start": -1, "started_at": 0.0}
    store.write_record(registry, record)
    if store.process_start(os.getpid()) is None:
        pytest.skip("no /proc: start times are not available on this system")
    assert store.read_records(registry) == []  # our pid, another start time: a dead process


def test_records_that_are_not_ours_are_skipped(registry):
    (registry / "123.json").write_text("not json")
    (registry / "124.json").write_text(json.dumps({"format": 99, "pid": 124}))
    (registry / "notes.txt").write_text("x")
    assert store.read_records(registry) == []


def _snapshot(written_at, timeline_ns, device_wall_s, device_ns, busy, flops=0, latency=()):
    return {"pid": 1, "tag": "1", "started_at": 0.0, "written_at": written_at,
            "timeline_ns": timeline_ns, "device_wall_s": device_wall_s,
            "execution_status": {"completed": len(latency)}, "errors": {},
            "cpu_s": {"user": 0.0, "system": 0.0}, "host_memory_bytes": 0, "models": [],
            "latency": [list(row) for row in latency],
            "cores": [{"instance": "trn1.2xlarge", "core": 0, "executions": len(latency),
                       "errors": 0, "device_ns": device_ns, "engine_busy_ns": busy,
                       "dma_bytes": 0, "flops": flops}]}


def test_utilisation_is_device_time_over_host_plus_device_time():
    before = _snapshot(10.0, 0.0, 0.0, 0.0, {"tensor": 0.0})
    # in 2 s of wall time: 1.5 s inside executions worth 0.25 s of device time; 0.5 s on the host
    after = _snapshot(12.0, 0.25e9, 1.5, 0.25e9, {"tensor": 0.2e9}, flops=3e9,
                      latency=[(11.0, 0.75, 0.125), (12.0, 0.75, 0.125), (9.0, 1.0, 1.0)])
    period = sample(after, before)
    [core] = period.cores
    assert period.period_s == 2.0 and period.timeline_s == pytest.approx(0.75)
    assert core.utilisation == pytest.approx(0.25 / 0.75)
    assert core.engine_utilisation["tensor"] == pytest.approx(0.8)
    assert core.flops_per_s == pytest.approx(3e9 / 0.75)
    assert period.device_latency_s["p50"] == pytest.approx(0.125)  # the 9.0 row is older
    assert sample(after, after).cores[0].utilisation == 0.0  # nothing new: idle


def test_sampler_reports_each_period_once():
    sampler = Sampler()
    first = _snapshot(2.0, 1e9, 1.0, 1e9, {})
    assert sampler([first])[0].cores[0].utilisation == pytest.approx(1 / 2)  # since its start
    later = _snapshot(4.0, 1e9, 1.0, 1e9, {})
    assert sampler([later])[0].cores[0].executions == 0


def test_a_compiled_models_calls_are_counted(registry, monkeypatch):
    torch = pytest.importorskip("torch")
    import trnsim
    from trnsim.runtime.registry import process

    monkeypatch.setenv(store.DIR_ENV, str(registry))
    monkeypatch.setattr(process, "_current", None)
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 16)
    compiled = trnsim.trace(model, (torch.randn(4, 32),), instance="inf2.xlarge")
    for _ in range(3):
        compiled(torch.randn(4, 32))
    with pytest.raises(trnsim.errors.InvalidArgumentError):
        compiled(torch.randn(5, 32))
    record = process.current()
    snapshot = record.snapshot()
    record.close()
    monkeypatch.setattr(process, "_current", None)
    [loaded] = snapshot["models"]
    assert loaded["instance"] == "inf2.xlarge" and loaded["cores"] == [0]
    assert loaded["hbm"]["0"]["constants"] >= (32 * 16 + 16) * 2  # the weights, bf16 or wider
    [core] = snapshot["cores"]
    assert core["executions"] == 3 and core["errors"] == 1
    assert core["device_ns"] == pytest.approx(3 * compiled.timing().total_ns)
    assert core["engine_busy_ns"]["tensor"] > 0 and core["dma_bytes"] > 0 and core["flops"] > 0
    assert snapshot["execution_status"]["incorrect_input"] == 1


def test_training_graphs_and_serving_steps_are_counted(registry, monkeypatch):
    from types import SimpleNamespace

    from trnsim.runtime.registry import process, serving_model, serving_step, training_step
    from trnsim.runtime.xla.memory import HbmUse

    monkeypatch.setenv(store.DIR_ENV, str(registry))
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(process, "_current", None)
    executor = SimpleNamespace(instance=SimpleNamespace(name="trn1.2xlarge"))
    graph = SimpleNamespace(key="abcdef0123456789", why="mark_step", collective_ns=100.0,
                            hbm=HbmUse(weights=1000, gradients=1000, optimizer_state=2000,
                                       activations=500, capacity=1 << 30))
    for _ in range(2):
        with training_step(executor, graph):
            graph.compiled = SimpleNamespace(device_ns=900.0, flops=7,
                                             engine_utilisation={"tensor": 0.5})
    served = serving_model("tiny-llm", "inf2.xlarge", [0])
    with serving_step(served, device_ms=2.0):
        pass
    with pytest.raises(RuntimeError), serving_step(served, device_ms=2.0):
        raise RuntimeError("a failed batch")
    record = process.current()
    snapshot = record.snapshot()
    record.close()
    cores = {(c["instance"], c["core"]): c for c in snapshot["cores"]}
    trained = cores["trn1.2xlarge", 1]
    assert trained["executions"] == 2 and trained["device_ns"] == 2 * 1000.0
    assert trained["engine_busy_ns"]["tensor"] == 2 * 450.0 and trained["flops"] == 14
    [graph_model] = [m for m in snapshot["models"] if m["kind"] == "training"]
    assert graph_model["hbm"]["1"]["tensors"] == 3000
    assert graph_model["hbm"]["1"]["model_shared_scratchpad"] == 500
    serving = cores["inf2.xlarge", 0]
    assert (serving["executions"], serving["errors"], serving["device_ns"]) == (1, 1, 2e6)
    assert snapshot["execution_status"]["completed_with_err"] == 1
    assert snapshot["device_wall_s"] >= 0 and snapshot["timeline_ns"] == 2000.0 + 2e6


def test_tensor_parallel_copies_hold_their_ranks_cores(registry, monkeypatch):
    torch = pytest.importorskip("torch")
    import trnsim
    from trnsim.runtime.registry import process

    monkeypatch.setenv(store.DIR_ENV, str(registry))
    monkeypatch.setattr(process, "_current", None)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64))
    x = torch.randn(4, 64)
    compiled = trnsim.trace(model, (x,), instance="trn1.2xlarge", tensor_parallel=2)
    compiled(x)
    record = process.current()
    snapshot = record.snapshot()
    record.close()
    [loaded] = snapshot["models"]
    assert loaded["cores"] == [0, 1] and set(loaded["hbm"]) == {"0", "1"}
    cores = {c["core"]: c for c in snapshot["cores"]}
    expected = sum(max(compiled.rank_timings()[i].total_ns for i in stage)
                   for stage in compiled.plan.stages())
    for core in (0, 1):  # both ranks execute each call, for the copy's whole latency
        assert cores[core]["executions"] == 1
        assert cores[core]["device_ns"] == pytest.approx(expected)
        assert cores[core]["flops"] > 0
