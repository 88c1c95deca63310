"""Tables that fit the terminal: bench and validate at 80 and 120 columns, --wide, units in the
headers, plain numbers, the validate headline, progress lines, and --plot's early check."""

import io
import re
import sys
from pathlib import Path

import pytest
from rich.console import Console

from trnsim.cli import main
from trnsim.cli import validate as validate_cli
from trnsim.cli.tables import Column, print_table
from trnsim.perf import bench
from trnsim.perf.validate import RowResult

README = Path(__file__).resolve().parents[2] / "README.md"
EXPONENT = re.compile(r"\d[eE][+-]?\d")


def _result(model, batch, seq, instance, latency, published=None, cost=7.2e-6):
    error = None if published is None else 100 * (latency - published) / published
    return bench.BenchResult(model=model, batch=batch, seq=seq, instance=instance,
                             auto_cast="matmult", latency_ms=latency, loaded_latency_ms=latency,
                             throughput_per_s=1000 * batch / latency,
                             cost_per_inference_usd=cost, copies=2, bound={},
                             published_ms=published, error_pct=error)


RESULTS = [
    _result("bert-large-uncased", 1, 128, "inf1.xlarge", 18.23, 28.2, 1.9e-5),
    _result("bert-large-uncased", 1, 128, "inf2.xlarge", 3.004, 3.1, 7.2e-6),
    _result("electra-large-discriminator", 10, 256, "inf1.xlarge", 276.2, 343.7, 2.9e-5),
    _result("electra-large-discriminator", 10, 256, "inf2.xlarge", 38.1, 72.9, 1.1e-5),
]


@pytest.fixture
def fake_bench(monkeypatch):
    """bench's matrix replaced by the results above (announcing each case as the real one)."""
    calls = []

    def run_matrix(models, instances, batches, seq, *, progress=None, **kwargs):
        calls.append(models)
        for r in RESULTS:
            if progress:
                progress(f"{r.model} batch {r.batch} seq {r.seq} on {r.instance}")
        return RESULTS

    monkeypatch.setattr(bench, "run_matrix", run_matrix)
    return calls


def _cli(capsys, *argv):
    try:
        main(list(argv))
    except SystemExit as stop:
        if stop.code not in (0, None):
            return stop.code, capsys.readouterr()
    return 0, capsys.readouterr()


def _bench(capsys, monkeypatch, width, *extra):
    monkeypatch.setenv("COLUMNS", str(width))
    code, out = _cli(capsys, "bench", *extra)
    assert code == 0, out.err
    return out


@pytest.mark.parametrize("width", [80, 120])
def test_bench_table_fits_the_terminal_with_whole_names_and_plain_numbers(
        fake_bench, capsys, monkeypatch, width):
    out = _bench(capsys, monkeypatch, width).out
    lines = out.splitlines()
    assert max(len(line.rstrip()) for line in lines if "hidden to fit" not in line) <= width
    # every case is one line holding its full model name and its latencies, units in headers
    for r in RESULTS:
        row = [line for line in lines if line.startswith(r.model)]
        assert len(row) == 1 and f"{r.latency_ms:.4g}" in row[0].replace(",", "")
    assert "latency ms" in out and "…" not in out
    assert not EXPONENT.search(out)


def _table_part(text):
    return text.split("\n(")[0]


def test_bench_narrow_hides_columns_and_says_so_wide_shows_them(fake_bench, capsys, monkeypatch):
    narrow = _bench(capsys, monkeypatch, 80).out
    middle = _bench(capsys, monkeypatch, 120).out
    wide = _bench(capsys, monkeypatch, 80, "--wide").out
    def table(text):
        return " ".join(_table_part(text).split())

    assert "--wide shows them" in narrow and "error %" in table(middle)
    assert "$ per 1M inf" not in table(narrow) and "$ per 1M inf" in table(wide)
    assert "hidden" not in wide
    # cost per inference in $ per million inferences, published latency and error as numbers
    row = next(line for line in wide.splitlines() if line.startswith("bert-large-uncased"))
    assert row.split()[3:] == ["18.23", "3.004", "6.07", "-35.4", "-3.1", "28.20", "3.100",
                               "55", "333", "19.0", "7.20"]


def test_without_published_figures_there_are_no_error_columns():
    from trnsim.cli.bench import bench_columns

    bare = [_result("gpt2", 1, 128, "inf2.xlarge", 1.5), _result("gpt2", 1, 128, "trn1.2xlarge", 1.4)]
    columns, rows = bench_columns(bare, ("inf2.xlarge", "trn1.2xlarge"))
    assert not any("error" in c.header or "published" in c.header for c in columns)
    assert all(len(row) == len(columns) for row in rows)


def test_plain_table_cells_never_wrap_headers_wrap_at_spaces():
    console = Console(file=io.StringIO(), width=38)
    columns = [Column("name", "left"), Column("a rather long header ms"), Column("x", drop=1)]
    hidden = print_table(console, columns, [["electra-large-discriminator", "1,234.5", "9"]])
    text = console.file.getvalue()
    assert hidden == ["x"] and "electra-large-discriminator" in text and "1,234.5" in text
    assert all(len(line.rstrip()) <= 38 for line in text.splitlines() if "hidden" not in line)
    assert any(line.strip() == "a rather" or line.strip() == "rather long" or
               line.strip() == "long header" for line in text.splitlines())  # header wrapped


def _rows():
    return [
        RowResult("seed-1", "model", "bert-large-uncased", "inf1.xlarge", 28.2, "ms", 18.2,
                  100 * (18.2 - 28.2) / 28.2),
        RowResult("seed-2", "model", "bert-large-uncased", "inf2.xlarge", 3.1, "ms", 3.0,
                  100 * (3.0 - 3.1) / 3.1),
        RowResult("nki-matmul", "kernel", "tiled matmul", "trn1.32xlarge", 6.97, "ms", 6.91,
                  100 * (6.91 - 6.97) / 6.97),
        RowResult("nccom-1MiB", "collective", "all-reduce", "trn1.32xlarge", 68.0, "us", 76.4,
                  100 * (76.4 - 68) / 68),
        RowResult("nccom-1GiB", "collective", "all-reduce", "trn1.32xlarge", 18930.0, "us",
                  20100.0, 100 * (20100 - 18930) / 18930),
        RowResult("odd", "model", "x", "inf2.xlarge", None, "ms", status="skipped",
                  reason="value 'n/a' is not a number"),
    ]


@pytest.mark.parametrize("width", [80, 120])
def test_validate_times_share_one_unit_and_the_summary_gives_the_headline(
        capsys, monkeypatch, width):
    monkeypatch.setattr("trnsim.perf.validate.validate", lambda *a, **k: _rows())
    monkeypatch.setenv("COLUMNS", str(width))
    code, out = _cli(capsys, "validate")
    assert code == 0, out.err
    text = out.out
    assert "measured ms" in " ".join(text.split()) and "predicted ms" in " ".join(text.split())
    assert not EXPONENT.search(text) and " us" not in text
    row = next(line for line in text.splitlines() if line.startswith("nccom-1GiB"))
    assert "18.93" in row and "20.10" in row  # 18930 us and 20100 us, both in ms
    row = next(line for line in text.splitlines() if line.startswith("nccom-1MiB"))
    assert "0.06800" in row and "0.07640" in row
    assert "odd: not predicted (skipped): value 'n/a' is not a number" in text
    headline = (abs(18.2 - 28.2) / 28.2 + abs(3.0 - 3.1) / 3.1 + abs(6.91 - 6.97) / 6.97) / 3
    assert (f"Headline (README): mean absolute error over the model and kernel rows: "
            f"{100 * headline:.1f}% (3 rows)") in " ".join(text.split())
    assert max(len(line.rstrip()) for line in text.splitlines() if not line.startswith("odd")) <= width


def test_validate_json_has_the_headline():
    data = validate_cli.summary(_rows())
    assert data["headline"]["kinds"] == ["model", "kernel"] and data["headline"]["rows"] == 3
    assert data["collective"]["rows"] == 2 and data["overall"]["rows"] == 5


def test_readme_headline_is_the_commands_figure():
    """The README names the same rows as `trnsim validate`'s headline, and its figure is the
    mean of the errors its own table lists for those rows."""
    text = README.read_text()
    label = validate_cli.headline_label()
    match = re.search(label[0].upper() + label[1:] + r": (\d+\.\d)%", text)
    assert match, f"README must say '{label[0].upper() + label[1:]}: N%'"
    section = text[text.index("## How close the predictions are"):]
    errors = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 5 and cells[4].endswith("%") and not cells[0].startswith("nccom"):
            errors.append(abs(float(cells[4].rstrip("%"))))
    from trnsim.perf.validate import default_csv, read_rows

    listed = [r for r in read_rows(default_csv()) if r["kind"] in validate_cli.HEADLINE_KINDS]
    assert len(errors) == len(listed)  # every model and kernel row of the calibration set
    # the table's errors are rounded to whole percent: the mean is good to half a percent
    assert abs(sum(errors) / len(errors) - float(match.group(1))) <= 0.5


def test_progress_is_a_plain_line_per_item_when_not_a_terminal(fake_bench, capsys, monkeypatch):
    err = _bench(capsys, monkeypatch, 100).err
    lines = err.splitlines()
    assert lines == [f"trnsim bench [{i + 1}/8] {r.model} batch {r.batch} seq {r.seq} on "
                     f"{r.instance}" for i, r in enumerate(RESULTS)]
    assert "\x1b" not in err


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_on_a_terminal_is_one_line_as_wide_as_the_terminal(fake_bench, capsys,
                                                                     monkeypatch):
    """A progress line wider than the terminal wraps and every redraw then reprints it; the
    line is measured against the terminal (not a fixed 200 columns) and cut to fit."""
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setenv("COLUMNS", "60")
    monkeypatch.setenv("TERM", "xterm")
    _cli(capsys, "bench")
    drawn = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "\n", terminal.getvalue())
    frames = [f for f in re.split(r"[\r\n]", drawn) if f.strip()]
    assert frames, "nothing was drawn"
    assert max(len(f) for f in frames) <= 60


def test_plot_without_matplotlib_fails_before_any_work_with_the_readmes_hint(
        fake_bench, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    code, out = _cli(capsys, "bench", "--plot", "out.png")
    assert code == 2 and fake_bench == []
    from trnsim.perf.plot import INSTALL_HINT

    assert INSTALL_HINT in out.err and f"`--plot` needs `{INSTALL_HINT}`" in README.read_text()


def test_a_failing_plot_does_not_lose_the_table(fake_bench, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    from trnsim.errors import TrnsimError

    def fail(*args):
        raise TrnsimError("cannot write out.png")

    monkeypatch.setattr("trnsim.perf.plot.bench_plot", fail)
    code, out = _cli(capsys, "bench", "--plot", "out.png")
    assert code == 2 and "cannot write out.png" in out.err
    assert "bert-large-uncased" in out.out  # printed before the plot was attempted
