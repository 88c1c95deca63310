import json

import pytest

from trnsim import __version__, hardware
from trnsim.cli import main


def run(capsys, *argv):
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    out = capsys.readouterr()
    return info.value.code, out.out, out.err


def test_instances_json_has_every_instance_with_derived_totals(capsys):
    code, out, _ = run(capsys, "instances", "--json")
    assert code == 0
    rows = {r["instance"]: r for r in json.loads(out)}
    assert set(rows) == set(hardware.instance_names())
    trn2 = rows["trn2.48xlarge"]
    assert trn2["neuron_cores"] == 128 and trn2["logical_neuron_cores"] == 64
    assert trn2["peak_dense_tflops"]["fp8"] == pytest.approx(20784)
    assert trn2["price_per_hour"] is None and trn2["bf16_tflops_per_dollar_hour"] is None
    assert rows["inf2.xlarge"]["bf16_tflops_per_dollar_hour"] == pytest.approx(190 / 0.758)


def test_instances_sort(capsys):
    _, out, _ = run(capsys, "instances", "--json", "--sort", "-bf16_per_dollar")
    rows = json.loads(out)
    values = [r["bf16_tflops_per_dollar_hour"] for r in rows]
    known = [v for v in values if v is not None]
    assert known == sorted(known, reverse=True)
    assert values[-1] is None  # instances without a price sort last
    _, out, _ = run(capsys, "instances", "--json", "--sort", "chips")
    chips = [r["chips"] for r in json.loads(out)]
    assert chips == sorted(chips)


def test_instances_unknown_sort_field_exits_2(capsys):
    code, _, err = run(capsys, "instances", "--sort", "prise")
    assert code == 2 and "did you mean 'price'" in err


def test_instances_table_and_verbose(capsys):
    _, out, _ = run(capsys, "instances", "--verbose")
    assert "trn1.32xlarge" in out and "3,040" in out
    assert "3.4e+15" in out  # the launch post's figure, shown beside the docs' one
    assert "5200" in out


def test_version_and_help(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and __version__ in out
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "ls" in out and "instances" in out


@pytest.mark.parametrize("width", [80, 120])
def test_instances_table_fits_the_terminal_and_wide_shows_every_column(capsys, monkeypatch, width):
    monkeypatch.setenv("COLUMNS", str(width))
    _, out, _ = run(capsys, "instances")
    table = out.split("\n(")[0]
    assert max(len(line.rstrip()) for line in table.splitlines()) <= width
    assert "trn2.48xlarge" in table and "…" not in out and "--wide shows them" in out
    _, wide, _ = run(capsys, "instances", "--wide")
    headers = " ".join(wide.split())
    assert "NeuronLink GB/s/chip" in headers and "EFA Gbps" in headers and "hidden" not in wide
