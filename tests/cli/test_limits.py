"""Mistyped or oversized command lines: each ends, before any work, with one error line and
exit status 2 (never a traceback, a MemoryError, minutes of simulation or a silent default)."""

import time

import pytest

from trnsim.cli import main

KERNEL = '''
import trnsim.nki.language as nl
from trnsim import nki


@nki.jit
def copy(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out[0:128, 0:512], value=nl.load(a[0:128, 0:512]))
    return out
'''


@pytest.fixture
def kernel_file(tmp_path):
    path = tmp_path / "kernel.py"
    path.write_text(KERNEL)
    return f"{path}::copy"


def refused(capsys, argv, message):
    start = time.perf_counter()
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2, err
    assert "Traceback" not in err and message in err, err
    assert time.perf_counter() - start < 30  # checked before the work, not after


@pytest.mark.parametrize("argv,message", [
    (["-b", "1", "-e", "1G", "-f", "1.0000001"], "sizes in the sweep 207944165 exceeds limit"),
    (["-b", "1", "-e", "1G", "-i", "1"], "sizes in the sweep 1073741824 exceeds limit"),
    (["-N", "100000"], "nodes (-N) 100000 exceeds limit"),
    (["-b", "8", "-e", "64", "-f", "nan"], "step factor nan must be a finite number"),
    (["-b", "8", "-e", "64", "-i", "0"], "step in bytes (-i) 0 must be positive"),
    (["--instance", ""], "--instance is empty"),
    (["--report-to-json-file", "/nonexistent-dir/rows.json"], "directory /nonexistent-dir does"),
], ids=["factor", "step", "nodes", "nan", "step0", "instance", "json-path"])
def test_nccom_test_limits(capsys, argv, message):
    refused(capsys, ["nccom-test", "allr", "-r", "32", *argv], message)


@pytest.mark.parametrize("argv,message", [
    (["--shapes", "128x1000000000,128x1000000000", "--timing-only"],
     "--shapes 128x1000000000:float32 bytes 512000000000 exceeds limit"),
    (["--shapes", "128x-5", "--timing-only"], "dimensions must be positive"),
    (["--shapes", "128x512", "--seed", "-1"], "Invalid value for '--seed'"),
    (["--shapes", "128x512", "--trace", "/nonexistent-dir/trace.json"],
     "--trace /nonexistent-dir/trace.json: directory"),
], ids=["huge", "negative", "seed", "profile"])
def test_kernel_run_limits(capsys, kernel_file, argv, message):
    refused(capsys, ["kernel", "run", kernel_file, *argv], message)


def test_timing_only_allocates_no_host_memory_for_inputs(capsys, kernel_file, monkeypatch):
    import trnsim.nki.files as files

    monkeypatch.setattr(files, "random_inputs", lambda *a: pytest.fail("inputs were allocated"))
    with pytest.raises(SystemExit) as info:
        main(["kernel", "run", kernel_file, "--shapes", "128x512", "--timing-only"])
    assert info.value.code in (0, None) and " us" in capsys.readouterr().out


@pytest.mark.parametrize("argv,message", [
    (["bench", "--lnc", "3"], "--lnc 3: a logical NeuronCore is 1 or 2"),
    (["bench", "--seq", "0"], "Invalid value for '--seq'"),
    (["bench", "--instances", ","], "--instances ',': an empty name"),
    (["bench", "--plot", "/nonexistent-dir/plot.png"], "--plot /nonexistent-dir/plot.png"),
    (["validate", "--kinds", "bogus"], "--kinds: unknown 'bogus'"),
    (["validate", "/nonexistent-dir/rows.csv"], "no such file"),
    (["compile", "x:y", "--instance", ""], "--instance is empty"),
    (["ls", "--instance", " "], "--instance is empty"),
    (["compile", "x:y", "--input-shape", "-1x4"], "dimensions must be positive"),
    (["compile", "x:y", "--input-shape", "99999999999x99999999999"], "exceeds limit"),
    (["run", "model.trnsim", "--seed", "-1"], "Invalid value for '--seed'"),
], ids=["lnc", "seq", "instances", "plot", "kinds", "csv", "instance", "ls-instance", "negative",
        "overflow", "seed"])
def test_commands_refuse_bad_arguments(capsys, argv, message):
    refused(capsys, argv, message)


def test_compile_never_writes_onto_a_file_or_a_source_directory(capsys, tmp_path):
    source = tmp_path / "model.py"
    source.write_text("x = 1\n")
    refused(capsys, ["compile", "x:y", "-o", str(source)], "a file exists there")
    refused(capsys, ["compile", "x:y", "-o", str(tmp_path)], "not a trnsim model")
    assert source.read_text() == "x = 1\n"
