"""Chrome trace-event JSON for the Perfetto UI: one process per core, one track per stream.

Each instruction is a complete ("X") event on its stream's track (TensorE's load and multiply
pipelines, VectorE, ScalarE, GpSimd, Sync, and one track per DMA queue), lasting its issue
interval; its args carry the operands, bytes, FLOPs, when its result was visible and the user's
source line. Timestamps are microseconds, as the format requires. Written only when asked.
"""

from __future__ import annotations

import json
from pathlib import Path

from trnsim.sim.engines import stream_name


def trace_events(profiles) -> list[dict]:
    events: list[dict] = []
    for profile in profiles:
        pid = profile.core_index
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"name": f"core {pid}: {profile.core.name} ({profile.program.name})"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"sort_index": pid}})
        for code in sorted(int(c) for c in set(profile.stream.tolist())):
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": code,
                           "args": {"name": stream_name(code)}})
            events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": code,
                           "args": {"sort_index": code}})
        for index in range(len(profile)):
            record = profile.record(index)
            code = int(profile.stream[index])
            args = {"index": record.index, "operands": list(record.operands), "bytes": record.bytes,
                    "done_us": record.done_ns / 1e3, "waited_on": record.waited_on}
            if record.flops:
                args["flops"] = record.flops
            if record.source:
                args["source"] = record.source
            events.append({"name": record.label or record.opcode, "cat": record.engine, "ph": "X",
                           "pid": pid, "tid": code, "ts": record.start_ns / 1e3,
                           "dur": record.busy_ns / 1e3, "args": args})
    return events


def write_trace(profiles, path) -> Path:
    """Write the profiles of one run (one per core) as a trace file; returns its path."""
    path = Path(path)
    document = {"traceEvents": trace_events(profiles), "displayTimeUnit": "ns"}
    path.write_text(json.dumps(document))
    return path
