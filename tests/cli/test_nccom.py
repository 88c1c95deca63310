"""`trnsim nccom-test`: nccom-test's arguments, table arithmetic, JSON report and errors."""

import json

import pytest

from trnsim.cli import main
from trnsim.collectives import nccom

GIB = 2**30


def run(capsys, *argv):
    with pytest.raises(SystemExit) as info:
        main(["nccom-test", *argv])
    out = capsys.readouterr()
    return info.value.code, out.out, out.err


def run_ok(capsys, *argv):
    try:
        main(["nccom-test", *argv])
    except SystemExit as stop:
        assert stop.code in (0, None), capsys.readouterr().err
    return capsys.readouterr().out


def table(out):
    lines = out.strip().splitlines()
    header = lines[0].split()
    rows = [dict(zip(header, line.split(), strict=True)) for line in lines[1:]
            if not line.startswith(("Avg", "Correctness"))]
    avg = next(line for line in lines if line.startswith("Avg bus bandwidth"))
    return header, rows, float(avg.split()[-1].removesuffix("GB/s"))


@pytest.mark.parametrize(("op", "ranks", "factor"), [
    ("allr", 8, lambda r: 2 * (r - 1) / r),
    ("allg", 8, lambda r: (r - 1) / r),
    ("redsct", 5, lambda r: (r - 1) / r),
    ("alltoall", 4, lambda r: (r - 1) / r),
    ("permute", 4, lambda r: 1.0),
    ("sendrecv", 2, lambda r: 1.0),
])
def test_table_arithmetic(capsys, tmp_path, op, ranks, factor):
    report = tmp_path / "r.json"
    out = run_ok(capsys, "-r", str(ranks), op, "-b", "1M", "-e", "64M", "-f", "4", "-d", "fp32",
                 "--report-to-json-file", str(report))
    header, rows, avg = table(out)
    assert header == ["size(B)", "count(elems)", "type", "time:avg(us)", "algbw(GB/s)",
                      "busbw(GB/s)"]
    assert [int(r["size(B)"]) for r in rows] == [2**20, 2**22, 2**24, 2**26]
    results = json.loads(report.read_text())["results"]
    assert len(results) == len(rows)
    for row, entry in zip(rows, results, strict=True):
        assert set(entry) == {"size(B)", "count(elems)", "type", "algbw(GB/s)", "busbw(GB/s)",
                              "time:avg(us)"}
        size = int(row["size(B)"])
        assert int(row["count(elems)"]) == size // 4 == entry["count(elems)"]
        assert row["type"] == entry["type"] == "fp32"
        # algbw is GiB/s (the nccom-test doc's unit) from the unrounded time; busbw = algbw x factor
        assert entry["algbw(GB/s)"] == pytest.approx(size / (entry["time:avg(us)"] * 1e-6) / GIB,
                                                     rel=1e-3)
        assert entry["busbw(GB/s)"] == pytest.approx(entry["algbw(GB/s)"] * factor(ranks),
                                                     rel=1e-3)
        assert float(row["algbw(GB/s)"]) == pytest.approx(entry["algbw(GB/s)"], abs=0.006)
        assert int(row["time:avg(us)"]) == round(entry["time:avg(us)"])
    assert avg == pytest.approx(sum(e["busbw(GB/s)"] for e in results) / len(results), abs=1e-3)


def test_documented_example_shape(capsys):
    # nccom-test doc: "-r 2 --minbytes 1kb --maxbytes 1gb --stepfactor 4 --datatype fp32 allr"
    out = run_ok(capsys, "-r", "2", "--minbytes", "1kb", "--maxbytes", "1gb", "--stepfactor", "4",
                 "--datatype", "fp32", "allr")
    _, rows, _ = table(out)
    assert [int(r["size(B)"]) for r in rows] == [4**k * 1024 for k in range(11)]
    times = [int(r["time:avg(us)"]) for r in rows]
    assert times == sorted(times) and times[0] == 58  # the floor


def test_stats_algorithm_column_defaults_and_check(capsys, tmp_path):
    report = tmp_path / "r.json"
    out = run_ok(capsys, "-r", "4", "-t", "avg", "p50", "p99", "--show-algorithm", "-c", "allr",
                 "-b", "4K", "-e", "4K", "-d", "bf16", "--report-to-json-file", str(report))
    header, rows, _ = table(out)
    assert header[3:6] == ["time:avg(us)", "time:p50(us)", "time:p99(us)"]
    assert header[-1] == "algorithm" and rows[0]["algorithm"] == "mesh"
    assert rows[0]["time:avg(us)"] == rows[0]["time:p50(us)"] == rows[0]["time:p99(us)"]
    assert rows[0]["type"] == "bf16"
    assert "Correctness check passed" in out
    entry = json.loads(report.read_text())["results"][0]
    assert entry["algorithm"] == "mesh" and "time:p99(us)" in entry
    # defaults: 32M of uint8, one row
    _, rows, _ = table(run_ok(capsys, "-r", "2", "allr", "-n", "50", "-w", "5"))
    assert [(r["size(B)"], r["count(elems)"], r["type"]) for r in rows] == [
        ("33554432", "33554432", "uint8")]


def test_forced_algorithm_multi_node_and_instance(capsys):
    out = run_ok(capsys, "-r", "32", "-N", "2", "--instance", "trn1.32xlarge", "allr", "-b", "1G",
                 "-e", "1G", "-d", "fp32", "--show-algorithm", "--hosts", "a", "b")
    _, rows, _ = table(out)
    assert rows[0]["algorithm"] == "hier"
    forced = run_ok(capsys, "-r", "32", "allr", "--algorithm", "torus2d", "--show-algorithm")
    assert table(forced)[1][0]["algorithm"] == "torus2d"
    trn2 = run_ok(capsys, "-r", "64", "allg", "--instance", "trn2.48xlarge", "-b", "8M", "-e", "8M")
    assert table(trn2)[1][0]["size(B)"] == "8388608"


def test_step_bytes_and_sizes():
    assert nccom.sweep(8, 16, step=4) == [8, 12, 16]
    assert nccom.sweep(8, 32, factor=2) == [8, 16, 32]
    assert nccom.sweep(0, 100) == list(range(0, 101, 10))
    assert nccom.sweep(64, 64) == [64]
    assert nccom.parse_size("1kb") == 1024 and nccom.parse_size("32M") == 32 * 2**20
    assert nccom.parse_size("1GB") == GIB and nccom.parse_size("4096") == 4096


@pytest.mark.parametrize(("argv", "message"), [
    (["-r", "64", "allr"], "ranks 64 exceeds limit 32"),
    (["-r", "4", "allx"], "unknown collective operation 'allx'"),
    (["-r", "4", "allr", "-d", "fp33"], "unknown dtype 'fp33'"),
    (["-r", "4", "allr", "-b", "2M", "-e", "1M"], "minimum size 2097152 B is larger than maximum"),
    (["-r", "4", "allr", "-b", "1Q"], "not a byte count"),
    (["-r", "4", "allr", "-f", "2", "-i", "4"], "not allowed with argument"),
    (["allr"], "required: -r/--nworkers"),
    (["-r", "4", "allr", "-d", "fp32", "-b", "6", "-e", "6"], "not a whole number of float32"),
    (["-r", "4", "allr", "--algorithm", "rnig"], "did you mean 'ring'"),
    (["-r", "2", "-N", "2", "allr", "--instance", "inf2.48xlarge"], "need EFA"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    # one message (the CLI's console may wrap a long one at 200 columns), no traceback
    assert err.startswith("trnsim: error:") and err.count("trnsim: error:") == 1
    assert message in " ".join(err.split()) and "Traceback" not in err


def test_help_lists_nccom_options(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "--show-algorithm" in out and "--report-to-json-file" in out


def test_table_fits_80_columns_and_json_prints_the_rows(capsys, monkeypatch):
    """nccom-test's fixed widths (84 columns) would wrap every line at 80: there the columns
    shrink to their contents; --json prints the same rows for scripts."""
    wide = run_ok(capsys, "-r", "2", "allr", "-b", "1K", "-e", "1M", "-f", "32")
    monkeypatch.setenv("COLUMNS", "80")
    narrow = run_ok(capsys, "-r", "2", "allr", "-b", "1K", "-e", "1M", "-f", "32")
    assert max(len(line) for line in wide.splitlines()) > 80
    assert max(len(line.expandtabs()) for line in narrow.splitlines()) <= 80
    assert table(narrow) == table(wide)
    data = json.loads(run_ok(capsys, "-r", "2", "allr", "-b", "1K", "-e", "1M", "-f", "32",
                             "--json"))
    _, rows, avg = table(wide)
    assert [r["size(B)"] for r in data["results"]] == [int(r["size(B)"]) for r in rows]
    assert data["avg_busbw(GB/s)"] == pytest.approx(avg, abs=1e-4)
