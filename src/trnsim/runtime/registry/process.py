"""This process's record: what it holds and runs on simulated NeuronCores, as counters.

Counters are cumulative (readers such as `trnsim top` and `trnsim monitor` take differences
between two reads). Updating them is a few dictionary additions under a lock; a daemon thread
writes the record at most every FLUSH_INTERVAL_S and only when something changed, so executing a
model never waits on a file. The record is removed when the process exits; if it is killed, the
next reader removes it (`store.read_records`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import time
import uuid
from collections import deque
from pathlib import Path

from trnsim.runtime.registry import store

ENABLE_ENV = "TRNSIM_REGISTRY"  # "0": this process does not register
TAG_ENV = "NEURON_PROCESS_TAG"  # neuron-monitor's tag for a process (default: its pid)
FLUSH_INTERVAL_S = 0.5  # how stale a record may be; top refreshes every second
LATENCY_WINDOW = 512  # the most recent executions kept for latency percentiles
FIRST_MODEL_ID = 10001  # the Neuron runtime numbers loaded models from 10001
COMMAND_CHARS = 200

# neuron-monitor's names (execution_stats and memory_used groups)
STATUS_KINDS = ("completed", "completed_with_err", "completed_with_num_err", "timed_out",
                "incorrect_input", "failed_to_queue")
ERROR_KINDS = ("generic", "numerical", "transient", "model", "runtime", "hardware")
HBM_KINDS = ("constants", "model_code", "model_shared_scratchpad", "runtime_memory", "tensors")


class ProcessRecord:
    """The counters of one process; `current()` gives the process's own."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()  # one flush at a time: a stale snapshot never lands last
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._closed = False
        self._next_model_id = FIRST_MODEL_ID
        self._models: dict[int, dict] = {}
        self._cores: dict[str, dict] = {}  # "instance:core" -> counters
        self._status = dict.fromkeys(STATUS_KINDS, 0)
        self._errors = dict.fromkeys(ERROR_KINDS, 0)
        self._latency: deque = deque(maxlen=LATENCY_WINDOW)  # (end time, total s, device s)
        self._timeline_ns = 0.0  # simulated device time of every execution, one after another
        self._device_wall_s = 0.0  # wall time with an execution in flight (simulating it)
        self._busy_since: float | None = None
        self._in_flight = 0
        self._static = {"format": store.FORMAT, "pid": self.pid,
                        "proc_start": store.process_start(self.pid),
                        "tag": os.environ.get(TAG_ENV) or str(self.pid),
                        "command": " ".join(sys.argv)[:COMMAND_CHARS] or sys.executable,
                        "started_at": time.time()}
        self._thread = threading.Thread(target=self._flush_loop, name="trnsim-registry",
                                        daemon=True)
        self._thread.start()

    # --- what the process holds -----------------------------------------------------------
    def load_model(self, *, name: str, kind: str, instance: str, cores: list[int],
                   hbm_by_core: dict[int, dict[str, int]]) -> int:
        """A model (or training graph, or served model) placed on `cores` of `instance`;
        ``hbm_by_core``: its device memory on each core by neuron-monitor's kinds."""
        with self._lock:
            model_id = self._next_model_id
            self._next_model_id += 1
            self._models[model_id] = {
                "model_id": model_id, "uuid": uuid.uuid4().hex, "name": name, "kind": kind,
                "instance": instance, "cores": list(cores),
                "hbm": {str(core): {k: int(hbm_by_core.get(core, {}).get(k, 0)) for k in HBM_KINDS}
                        for core in cores},
                "loaded_at": time.time(), "executions": 0, "last_execution_at": None}
            for core in cores:
                self._core(instance, core)
        self._dirty.set()
        return model_id

    def unload_model(self, model_id: int) -> None:
        with self._lock:
            self._models.pop(model_id, None)
        self._dirty.set()

    def _core(self, instance: str, core: int) -> dict:
        key = f"{instance}:{core}"
        if key not in self._cores:
            self._cores[key] = {"instance": instance, "core": core, "executions": 0, "errors": 0,
                                "device_ns": 0.0, "engine_busy_ns": {}, "dma_bytes": 0,
                                "flops": 0}
        return self._cores[key]

    # --- what it runs ---------------------------------------------------------------------
    def begin(self) -> float:
        """An execution starts (returns its start, for `executed` or `failed`). Wall time from the
        first of the executions in flight to the last one's end is device time, not host time."""
        now = time.time()
        with self._lock:
            if self._in_flight == 0:
                self._busy_since = now
            self._in_flight += 1
        return now

    def _end(self, now: float) -> None:
        self._in_flight = max(self._in_flight - 1, 0)
        if self._in_flight == 0 and self._busy_since is not None:
            self._device_wall_s += now - self._busy_since
            self._busy_since = None

    def executed(self, model_id: int, started: float, *, device_ns: float,
                 per_core: dict[int, dict] | None = None) -> None:
        """One execution of a model, begun at `started`, that took `device_ns` of simulated
        device time. ``per_core``: core -> {"engine_busy_ns": {...}, "dma_bytes", "flops"}."""
        end = time.time()
        with self._lock:
            self._end(end)
            model = self._models.get(model_id)
            if model is None:
                return
            model["executions"] += 1
            model["last_execution_at"] = end
            self._status["completed"] += 1
            self._timeline_ns += device_ns
            self._latency.append((end, end - started, device_ns * 1e-9))
            for core in model["cores"]:
                counters = self._core(model["instance"], core)
                counters["executions"] += 1
                counters["device_ns"] += device_ns
                cost = (per_core or {}).get(core)
                if cost:
                    busy = counters["engine_busy_ns"]
                    for engine, ns in cost.get("engine_busy_ns", {}).items():
                        busy[engine] = busy.get(engine, 0.0) + ns
                    counters["dma_bytes"] += int(cost.get("dma_bytes", 0))
                    counters["flops"] += int(cost.get("flops", 0))
        self._dirty.set()

    def failed(self, model_id: int, started: float, *, status: str, error: str) -> None:
        """An execution that did not complete: `status` and `error` are neuron-monitor's kinds."""
        del started  # a failed execution has no latency in neuron-monitor's statistics
        with self._lock:
            self._end(time.time())
            self._status[status] += 1
            self._errors[error] += 1
            model = self._models.get(model_id)
            for core in model["cores"] if model else ():
                self._core(model["instance"], core)["errors"] += 1
        self._dirty.set()

    # --- the record -----------------------------------------------------------------------
    def snapshot(self) -> dict:
        times = os.times()
        with self._lock:
            now = time.time()
            busy = now - self._busy_since if self._busy_since is not None else 0.0
            return {**self._static, "written_at": now,
                    "cpu_s": {"user": times.user, "system": times.system},
                    "host_memory_bytes": _resident_bytes(),
                    "timeline_ns": self._timeline_ns, "device_wall_s": self._device_wall_s + busy,
                    "execution_status": dict(self._status), "errors": dict(self._errors),
                    "latency": [list(row) for row in self._latency],
                    "models": [dict(m, cores=list(m["cores"]), hbm={c: dict(h) for c, h in m["hbm"].items()})
                               for m in self._models.values()],
                    "cores": [dict(c, engine_busy_ns=dict(c["engine_busy_ns"]))
                              for c in self._cores.values()]}

    def flush(self) -> None:
        # snapshot and write under one lock: two flushes (the thread's and a caller's) must not
        # interleave, or the older snapshot's file could replace the newer one
        with self._write_lock:
            if self._closed:
                return
            self._dirty.clear()
            with contextlib.suppress(OSError):  # a full or vanished directory must not break the program
                store.write_record(self.directory, self.snapshot())

    def _flush_loop(self) -> None:
        self.flush()  # appear at once
        while not self._stop.wait(FLUSH_INTERVAL_S):
            if self._dirty.is_set():
                self.flush()

    def close(self) -> None:
        """At exit: stop writing and remove the record (only the process that made it: a
        forked child inherits the parent's exit handlers)."""
        if os.getpid() != self.pid:
            return
        self._stop.set()
        with self._write_lock:  # after a flush in progress, and no flush after it
            self._closed = True
            store.remove_record(self.directory, self.pid)


def _resident_bytes() -> int:
    """This process's resident memory (Linux /proc; elsewhere its peak, from getrusage)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


_current: ProcessRecord | None = None
_disabled = False
_guard = threading.Lock()


def current() -> ProcessRecord | None:
    """This process's record, made on first use; None when registration is off
    (TRNSIM_REGISTRY=0) or the registry directory cannot be used (said once on stderr)."""
    global _current, _disabled
    if _current is not None and _current.pid == os.getpid():
        return _current
    if _disabled or os.environ.get(ENABLE_ENV, "1") == "0":
        return None
    with _guard:
        if _current is None or _current.pid != os.getpid():
            try:
                directory = store.ensure_dir(store.registry_dir())
            except (OSError, store.RegistryDirError) as error:
                _disabled = True
                print(f"trnsim: not registering with trnsim top/monitor: {error}", file=sys.stderr)
                return None
            _current = ProcessRecord(directory)
            atexit.register(_current.close)
    return _current


def _forget_in_child() -> None:
    """A forked child is another process: it makes its own record when it runs something."""
    global _current
    _current = None


with contextlib.suppress(AttributeError):  # os.register_at_fork is POSIX-only
    os.register_at_fork(after_in_child=_forget_in_child)
