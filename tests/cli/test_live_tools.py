"""`trnsim top` and `trnsim monitor` as a person uses them, against a real trnsim process that
runs a compiled model and registers: top driven in tmux (keys sent, screen read), monitor's JSON
read from its stdout, its Prometheus endpoint scraped over HTTP. Every wait is bounded."""

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import uuid

import pytest

from tests.cli.live_tools import environment, start_worker, stop_worker, wait_for

TAG = "live-tools-test"
MONITOR_CONFIG = {"period": "500ms", "neuron_runtimes": [{"tag_filter": "^live-tools", "metrics": [
    {"type": "neuroncore_counters"}, {"type": "memory_used"}, {"type": "neuron_runtime_vcpu_usage"},
    {"type": "execution_stats"}]}], "system_metrics": [{"type": "vcpu_usage"},
    {"type": "memory_info"}, {"type": "neuron_hw_counters", "period": "1s"}]}
AWS_METRICS = {"neuroncore_utilization_ratio", "neuroncore_memory_usage_constants",
               "neuroncore_memory_usage_model_code", "neuroncore_memory_usage_tensors",
               "neuroncore_memory_usage_model_shared_scratchpad",
               "neuroncore_memory_usage_runtime_memory", "neuron_runtime_memory_used_bytes",
               "execution_latency_seconds", "execution_status", "execution_errors",
               "neuron_runtime_vcpu_usage_ratio", "system_memory_total_bytes",
               "system_memory_used_bytes", "system_swap_total_bytes", "system_swap_used_bytes",
               "system_vcpu_count", "system_vcpu_usage_ratio", "hardware_ecc_events",
               "instance_info", "neuron_hardware_info"}
WEIGHT_ELEMENTS = 128 * 256 + 256 + 256 * 16 + 16  # registry_worker.py's model


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    registry = tmp_path_factory.mktemp("registry")
    registry.chmod(0o700)
    process, pid = start_worker(registry, tag=TAG)
    yield registry, pid
    stop_worker(process)


def _trnsim(registry, *args, timeout=120):
    return subprocess.run([sys.executable, "-m", "trnsim", *args], capture_output=True, text=True,
                          env=environment(registry), timeout=timeout)


def test_monitor_prints_neuron_monitors_report(worker, tmp_path):
    registry, pid = worker
    config = tmp_path / "monitor.conf"
    config.write_text(json.dumps(MONITOR_CONFIG))
    result = _trnsim(registry, "monitor", "-c", str(config), "--count", "3")
    assert result.returncode == 0, result.stderr
    reports = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(reports) == 3
    last = reports[-1]
    assert last["neuron_hardware_info"]["neuron_device_type"] == "inferentia2"
    assert last["instance_info"]["instance_type"] == "inf2.xlarge"
    [runtime] = last["neuron_runtime_data"]
    assert (runtime["pid"], runtime["neuron_runtime_tag"], runtime["error"]) == (pid, TAG, "")
    groups = runtime["report"]
    assert set(groups) == {"neuroncore_counters", "memory_used", "neuron_runtime_vcpu_usage",
                           "execution_stats"}
    assert all(g["period"] > 0 and g["error"] == "" for g in groups.values())
    core = groups["neuroncore_counters"]["neuroncores_in_use"]["0"]
    assert 0 < core["neuroncore_utilization"] <= 100 and core["flops"] > 0
    completed = [r["neuron_runtime_data"][0]["report"]["execution_stats"]["execution_summary"]
                 ["completed"] for r in reports]
    # per period: a loaded machine may run no call in one period, never a negative count
    assert all(n >= 0 for n in completed) and sum(completed) > 0
    latency = groups["execution_stats"]["latency_stats"]
    assert set(latency["device_latency"]) == {"p0", "p1", "p25", "p50", "p75", "p99", "p100"}
    assert 0 < latency["device_latency"]["p50"] < latency["total_latency"]["p50"]
    memory = groups["memory_used"]
    [model] = memory["loaded_models"]
    assert model["name"] == "Sequential" and model["subgraphs"]["sg_00"]["neuroncore_index"] == 0
    constants = memory["neuron_runtime_used_bytes"]["usage_breakdown"]["neuroncore_memory_usage"][
        "0"]["constants"]
    assert constants >= 2 * WEIGHT_ELEMENTS  # the weights (bf16 at least)
    assert last["system_data"]["memory_info"]["memory_total_bytes"] > 0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_prometheus_endpoint_uses_aws_exporter_names(worker, tmp_path):
    httpx = pytest.importorskip("httpx")
    psutil = pytest.importorskip("psutil")
    from prometheus_client.parser import text_string_to_metric_families

    registry, _ = worker
    config = tmp_path / "monitor.conf"
    config.write_text(json.dumps(MONITOR_CONFIG))
    port = _free_port()
    monitor = subprocess.Popen([sys.executable, "-m", "trnsim", "monitor", "-c", str(config),
                                "--prometheus-port", str(port)], env=environment(registry),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def scrape():
            try:
                text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            except httpx.TransportError:
                return None
            return text if f'runtime_tag="{TAG}",status_type="completed"' in text else None

        text = wait_for(scrape, timeout_s=90)
        families = {f.name: f for f in text_string_to_metric_families(text)}
        assert set(families) >= AWS_METRICS
        [util] = families["neuroncore_utilization_ratio"].samples
        assert util.labels["instance_type"] == "inf2.xlarge" and util.labels["neuroncore"] == "0"
        assert 0 < util.value <= 1
        assert {s.labels["percentile"] for s in families["execution_latency_seconds"].samples} == {
            "p0", "p1", "p25", "p50", "p75", "p99", "p100"}
        completed = [s for s in families["execution_status"].samples
                     if s.name == "execution_status_total" and s.labels["status_type"] == "completed"]
        assert completed[0].value > 0
        listening = {c.laddr for c in psutil.Process(monitor.pid).net_connections()
                     if c.status == psutil.CONN_LISTEN}
        assert {(a.ip, a.port) for a in listening} == {("127.0.0.1", port)}
    finally:
        monitor.terminate()
        monitor.wait(timeout=30)


class ScreenMiss(str):
    """A screen without what was looked for (falsy, so `wait_for` keeps waiting and shows it)."""

    def __bool__(self) -> bool:
        return False


@pytest.fixture
def tmux():
    if shutil.which("tmux") is None:
        if os.environ.get("CI"):
            pytest.fail("tmux is missing: .ci/run installs it")
        pytest.skip("tmux is not installed")
    socket_name = f"trnsim-test-{uuid.uuid4().hex[:8]}"

    def run(*args, check=True):
        return subprocess.run(["tmux", "-L", socket_name, "-f", os.devnull, *args],
                              capture_output=True, text=True, check=check, timeout=30)

    yield run
    run("kill-server", check=False)


def test_top_in_a_terminal(worker, tmux):
    registry, pid = worker
    env = environment(registry)
    # the pane's size, not a size the test process may carry in LINES/COLUMNS
    command = shlex.join(["env", "-u", "LINES", "-u", "COLUMNS",
                          *(f"{k}={env[k]}" for k in ("TRNSIM_RUNTIME_DIR", "PYTHONPATH")),
                          sys.executable, "-m", "trnsim", "top", "--interval", "0.5"])
    tmux("new-session", "-d", "-s", "top", "-x", "170", "-y", "60", command)
    tmux("resize-window", "-t", "top", "-x", "170", "-y", "60")  # a detached session's size

    def screen(*needles):
        def check():
            text = tmux("capture-pane", "-p", "-t", "top", check=False).stdout
            return text if all(n in text for n in needles) else ScreenMiss(text)
        return check

    text = wait_for(screen("NeuronCore v2 Utilization", "Sequential", str(pid)), timeout_s=90)
    assert "inf2.xlarge (simulated)" in text and "vCPU Utilization" in text
    assert "Memory Usage Summary" in text
    tmux("send-keys", "-t", "top", "1")
    wait_for(screen(f"process 1 (pid {pid})"), timeout_s=30)
    tmux("send-keys", "-t", "top", "f")
    wait_for(screen("TFLOP/s (simulated)"), timeout_s=30)
    tmux("send-keys", "-t", "top", "a")
    wait_for(screen("all processes"), timeout_s=30)
    tmux("send-keys", "-t", "top", "q")
    wait_for(lambda: tmux("has-session", "-t", "top", check=False).returncode != 0, timeout_s=30)
