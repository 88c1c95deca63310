"""`trnsim profile view` and the commands' --trace: a kernel run's trace becomes a report file;
mistakes are one-line errors naming the option and the value."""

import pytest

from trnsim.cli import main


def run(capsys, *argv):
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    out = capsys.readouterr()
    return info.value.code, out.out, out.err


def test_kernel_trace_then_profile_view(capsys, tmp_path):
    trace = tmp_path / "add.json"
    code, out, _ = run(capsys, "kernel", "run", "trnsim.kernels.tutorials::matmul_naive",
                       "--shapes", "128x128,128x512", "--timing-only", "--trace", str(trace))
    assert code == 0 and f"trnsim profile view {trace}" in out
    code, out, _ = run(capsys, "profile", "view", str(trace))
    assert code == 0
    report = tmp_path / "add.html"
    assert f"profile report written to {report}" in out
    assert "matmul_naive on NeuronCore-v2" in report.read_text()


@pytest.mark.parametrize("argv,message", [
    (["missing.json"], "trace missing.json: no such file"),
    (["{trace}", "-o", "{trace}"], "is the trace itself"),
    (["{trace}", "-o", "/nonexistent-dir/r.html"], "--output /nonexistent-dir/r.html: directory"),
    (["{bad}"], "not JSON"),
])
def test_profile_view_mistakes_are_named(capsys, tmp_path, argv, message):
    trace, bad = tmp_path / "t.json", tmp_path / "bad.json"
    trace.write_text('{"traceEvents": []}')
    bad.write_text("{")
    code, _, err = run(capsys, "profile", "view",
                       *[a.format(trace=trace, bad=bad) for a in argv])
    assert code == 2 and message in err, err
