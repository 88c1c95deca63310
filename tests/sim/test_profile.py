"""Profile records and summary agree with each other and with the program."""

import json

import numpy as np
import pytest

from tests.sim.synthetic import tiled_matmul
from trnsim import hardware
from trnsim.sim import simulate
from trnsim.sim.profile import union_length


@pytest.fixture(scope="module")
def profile():
    return simulate(tiled_matmul(256, 512, 1024), mode="timing").profile


def test_records_describe_each_instruction(profile):
    program = profile.program
    records = profile.records
    assert len(records) == len(program.instructions)
    for record, ins in zip(records, program.instructions, strict=True):
        assert record.opcode == ins.OPCODE
        assert record.start_ns <= record.end_ns <= record.done_ns + 1e-9
        assert record.flops == ins.flops()
        assert len(record.operands) == len(ins.reads()) + len(ins.writes())
    dma = [r for r in records if r.engine == "dma"]
    assert dma and all(r.queue is not None and r.stream == f"dma.q{r.queue}" for r in dma)
    assert {r.stream for r in records} >= {"tensor.load", "tensor", "vector"}


def test_summary_is_consistent_with_records(profile):
    s = profile.summary
    records = profile.records
    assert s.total_ns == pytest.approx(max(r.done_ns for r in records))
    assert s.instructions == len(records) == sum(st.instructions for st in s.streams.values())
    assert s.tensor_flops == 2 * 256 * 512 * 1024
    peak = hardware.core("v2").peak_flops("bf16")
    assert s.tensor_precision == "bf16"
    assert s.tensor_flops_utilisation == pytest.approx(s.tensor_flops / (s.total_ns * 1e-9 * peak))
    dma = [r for r in records if r.engine == "dma"]
    assert s.dma_bytes == sum(r.bytes for r in dma)
    assert s.dma_active_ns == pytest.approx(union_length(np.array([r.start_ns for r in dma]),
                                                         np.array([r.end_ns for r in dma])))
    assert s.dma_active_bytes_per_s == pytest.approx(s.dma_bytes / (s.dma_active_ns * 1e-9))
    assert s.dma_bytes_per_s == pytest.approx(s.dma_bytes / (s.total_ns * 1e-9))
    assert s.hbm_read_bytes == (256 * 512 + 512 * 1024 * (256 // 128)) * 2  # A once, B per row block
    assert s.hbm_write_bytes == 256 * 1024 * 4
    for st in s.streams.values():
        mine = [r for r in records if r.stream == st.name]
        assert st.active_ns == pytest.approx(sum(r.busy_ns for r in mine))  # in-order: no overlap
        assert 0 <= st.utilisation <= 1
        busy_and_waiting = st.active_ns + sum(st.waiting_ns.values()) + st.idle_after_ns
        assert busy_and_waiting == pytest.approx(s.total_ns, rel=1e-9)
    assert s.engine_active_ns["tensor"] >= s.streams["tensor"].active_ns
    program = profile.program
    assert s.sbuf_peak_bytes_per_partition == program.sbuf_peak_bytes_per_partition > 0
    assert s.psum_peak_bytes_per_partition == 2 * 2048


def test_union_length():
    starts, ends = np.array([0.0, 1.0, 5.0, 5.5]), np.array([2.0, 3.0, 6.0, 5.7])
    assert union_length(starts, ends) == pytest.approx(4.0)
    assert union_length(np.array([]), np.array([])) == 0.0


def test_to_dict_is_json_and_the_table_is_text(profile):
    document = json.loads(json.dumps(profile.to_dict(records=True)))
    assert document["summary"]["total_ns"] == pytest.approx(profile.total_ns)
    assert len(document["records"]) == len(profile)
    table = profile.summary_table()
    assert "total latency" in table and "TensorE FLOP utilisation" in table and "tensor.load" in table


def test_perfetto_trace_has_a_track_per_stream(profile, tmp_path):
    path = tmp_path / "trace.json"
    profile.to_perfetto(path)
    events = json.loads(path.read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert tracks == {r.stream for r in profile.records}
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == len(profile)
    tid_names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    for event, record in zip(slices, profile.records, strict=True):
        assert tid_names[event["tid"]] == record.stream
        assert event["ts"] == pytest.approx(record.start_ns / 1e3)
        assert event["dur"] == pytest.approx(record.busy_ns / 1e3) and event["dur"] >= 0
        assert event["args"]["operands"] == list(record.operands)


def test_nothing_is_written_by_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    simulate(tiled_matmul(128, 128, 512), mode="timing")
    assert list(tmp_path.iterdir()) == []


def test_dma_pieces_cover_each_transfer_after_its_start_latency(profile):
    dma = np.flatnonzero(profile.stream >= 6)  # DMA queues' stream codes (engines.DMA_BASE)
    assert set(profile.moved_record.tolist()) == set(dma.tolist())  # no on-chip hand-off here
    latency = profile.core.dma.start_latency_ns
    for record in dma.tolist():
        pieces = profile.moved_pieces[profile.moved_record == record]
        assert pieces[:, 2].sum() == pytest.approx(1.0, rel=1e-9)  # every byte, once
        assert pieces[0, 0] >= profile.start_ns[record] + latency - 1e-6
        assert pieces[-1, 1] == pytest.approx(profile.end_ns[record], rel=1e-12)
        assert np.all(pieces[1:, 0] >= pieces[:-1, 1] - 1e-9)  # in time order, disjoint


def test_totals_and_masked_columns_equal_the_gathered_columns():
    """Per-record figures are gathered from the plans only when read; totals and masked
    columns come from the plans directly and equal the gathered columns' exactly."""
    from trnsim.sim.engines import DMA_BASE

    fresh = simulate(tiled_matmul(128, 256, 512), mode="timing").profile
    names = ("flops", "nbytes", "hbm_read", "hbm_write")
    totals = {name: fresh.total(name) for name in names}
    dma = fresh.stream >= DMA_BASE
    masked = {name: fresh.column(name, dma) for name in names}
    assert not set(names) & set(vars(fresh))  # nothing gathered yet
    for name in names:
        column = getattr(fresh, name)
        assert len(column) == len(fresh) and totals[name] == int(column.sum()) > 0
        assert np.array_equal(masked[name], column[dma])
        assert fresh.total(name, dma) == int(column[dma].sum())
