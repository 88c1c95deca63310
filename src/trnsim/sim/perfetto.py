"""Chrome trace-event JSON for the Perfetto UI: one process per core, one track per stream.

Each instruction is a complete ("X") event on its stream's track (TensorE's load and multiply
pipelines, VectorE, ScalarE, GpSimd, Sync, and one track per DMA queue), lasting its issue
interval; its args carry the operands, bytes, FLOPs, HBM bytes, when its result was visible, what
it waited on and the user's source line; a DMA's also how its data moved (``moved``: [start,
end, share of its bytes] at a constant rate, the DMA engines it held). Timestamps are
microseconds, as the format requires.

The document's ``metadata.trnsim`` holds, per process, what a report needs beyond the events:
the program, core and chip, the simulator's own summary (`ProfileSummary`) and the core's
roofline ceilings. Perfetto and Chrome ignore it; `trnsim profile view` reads it. Written only
when asked.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from trnsim.sim.engines import stream_name

TRACE_FORMAT = 1  # version of metadata.trnsim (readers refuse a newer one)


def roofline_ceilings(core, chip) -> dict:
    """A core's compute peak per matmul precision and the HBM bandwidth it can reach alone:
    its DMA engines' total, or the chip's HBM when that is lower (`trnsim.sim.dma`)."""
    dma = core.dma.engines * core.dma.bytes_per_s_per_engine
    peaks = {p: core.peak_flops(p) for p, _ in core.tensor.rate_by_precision}
    return {"peak_flops": {p: v for p, v in peaks.items() if v},
            "memory_bytes_per_s": min(dma, chip.memory_bytes_per_s)}


def core_metadata(profile, pid: int, title: str, offset_ns: float = 0.0) -> dict:
    return {"pid": pid, "title": title, "program": profile.program.name,
            "core": profile.core.name, "core_index": profile.core_index,
            "chip": profile.chip.name, "mode": profile.mode, "offset_ns": offset_ns,
            "summary": asdict(profile.summary), **roofline_ceilings(profile.core, profile.chip)}


def trace_events(profiles, *, pids=None, titles=None, offsets_ns=None) -> list[dict]:
    """Events of `profiles`; by default process = core index, starting at time 0."""
    events: list[dict] = []
    for n, profile in enumerate(profiles):
        pid = pids[n] if pids else profile.core_index
        offset_us = (offsets_ns[n] if offsets_ns else 0.0) / 1e3
        title = (titles[n] if titles else
                 f"core {profile.core_index}: {profile.core.name} ({profile.program.name})")
        events.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"name": title}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                       "args": {"sort_index": pid}})
        for code in sorted(int(c) for c in set(profile.stream.tolist())):
            events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": code,
                           "args": {"name": stream_name(code)}})
            events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": code,
                           "args": {"sort_index": code}})
        hbm = profile.hbm_read + profile.hbm_write
        moved: dict[int, list] = {}
        for record, (s, e, share) in zip(profile.moved_record.tolist(),
                                         profile.moved_pieces.tolist(), strict=True):
            moved.setdefault(record, []).append([offset_us + s / 1e3, offset_us + e / 1e3, share])
        for index in range(len(profile)):
            record = profile.record(index)
            code = int(profile.stream[index])
            args = {"index": record.index, "pc": record.pc, "opcode": record.opcode,
                    "operands": list(record.operands), "bytes": record.bytes,
                    "done_us": offset_us + record.done_ns / 1e3, "waited_on": record.waited_on}
            if record.flops:
                args["flops"] = record.flops
            if hbm[index]:
                args["hbm_bytes"] = int(hbm[index])
            if index in moved:
                args["moved"] = moved[index]
            if record.source:
                args["source"] = record.source
            events.append({"name": record.label or record.opcode, "cat": record.engine, "ph": "X",
                           "pid": pid, "tid": code, "ts": offset_us + record.start_ns / 1e3,
                           "dur": record.busy_ns / 1e3, "args": args})
    return events


def trace_document(profiles, *, titles=None, sequential: bool = False) -> dict:
    """The trace of one run (one profile per core, all from time 0) or, with `sequential`, of
    runs one after another (a training step's graphs: each its own process, starting when the
    previous one's last result was visible)."""
    profiles = list(profiles)
    pids = list(range(len(profiles))) if sequential else [p.core_index for p in profiles]
    offsets, clock = [], 0.0
    for profile in profiles:
        offsets.append(clock if sequential else 0.0)
        clock += profile.total_ns
    titles = titles or [f"core {p.core_index}: {p.core.name} ({p.program.name})" for p in profiles]
    events = trace_events(profiles, pids=pids, titles=titles, offsets_ns=offsets)
    cores = [core_metadata(p, pid, title, offset)
             for p, pid, title, offset in zip(profiles, pids, titles, offsets, strict=True)]
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "metadata": {"trnsim": {"format": TRACE_FORMAT, "cores": cores}}}


def write_trace(profiles, path, *, titles=None, sequential: bool = False) -> Path:
    """Write the profiles of one run (one per core) as a trace file; returns its path."""
    path = Path(path)
    path.write_text(json.dumps(trace_document(profiles, titles=titles, sequential=sequential)))
    return path


def concatenate(documents: list[dict], titles: list[str]) -> dict:
    """Traces trnsim wrote, one after another on one time line (a training step's graphs, in
    the order they ran): each process renumbered and titled, each trace shifted to start when
    the previous one's last result was visible."""
    events, cores, clock_ns, next_pid = [], [], 0.0, 0
    for document, title in zip(documents, titles, strict=True):
        metadata = document["metadata"]["trnsim"]["cores"]
        pids = {m["pid"]: next_pid + i for i, m in enumerate(metadata)}
        next_pid += len(metadata)
        shift_us = clock_ns / 1e3
        for event in document["traceEvents"]:
            event = dict(event, pid=pids.get(event.get("pid"), event.get("pid")))
            if event.get("ph") == "X":
                event["ts"] += shift_us
                event["args"] = args = dict(event["args"])
                if "done_us" in args:
                    args["done_us"] += shift_us
                if "moved" in args:
                    args["moved"] = [[s + shift_us, e + shift_us, share]
                                     for s, e, share in args["moved"]]
            elif event.get("name") == "process_name":
                event["args"] = {"name": f"{title}: {event['args']['name']}"}
            elif event.get("name") == "process_sort_index":
                event["args"] = {"sort_index": event["pid"]}
            events.append(event)
        for m in metadata:
            cores.append(dict(m, pid=pids[m["pid"]], title=f"{title}: {m['title']}",
                              offset_ns=m["offset_ns"] + clock_ns))
        clock_ns += max(m["offset_ns"] + m["summary"]["total_ns"] for m in metadata)
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "metadata": {"trnsim": {"format": TRACE_FORMAT, "cores": cores}}}
