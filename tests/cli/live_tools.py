"""Helpers shared by the live tools' tests: a registered worker process and bounded waits."""

import os
import selectors
import subprocess
import sys
import time
from pathlib import Path

WORKER = Path(__file__).with_name("registry_worker.py")
SRC = Path(__file__).resolve().parents[2] / "src"
START_TIMEOUT_S = 120.0  # importing torch and tracing on a loaded 2-core machine


def environment(registry: Path) -> dict:
    env = dict(os.environ, TRNSIM_RUNTIME_DIR=str(registry), TRNSIM_REGISTRY="1")
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])
    env.pop("TRNSIM_INSTANCE", None)
    return env


def start_worker(registry: Path, tag: str | None = None) -> tuple[subprocess.Popen, int]:
    """Start the worker; returns it and its pid once its model has executed."""
    env = environment(registry)
    if tag:
        env["NEURON_PROCESS_TAG"] = tag
    worker = subprocess.Popen([sys.executable, str(WORKER)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env)
    ready = selectors.DefaultSelector()
    ready.register(worker.stdout, selectors.EVENT_READ)
    line = worker.stdout.readline() if ready.select(START_TIMEOUT_S) else "(no answer)"
    if not line.startswith("ready"):
        worker.kill()
        raise AssertionError(f"worker did not start: {line!r}")
    return worker, int(line.split()[1])


def stop_worker(worker: subprocess.Popen) -> None:
    worker.stdin.close()
    try:
        worker.wait(timeout=30)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait(timeout=30)


def wait_for(predicate, timeout_s: float, interval_s: float = 0.25):
    """Poll `predicate` until it returns something truthy (returned), or fail after timeout."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s; last: {last!r}")
