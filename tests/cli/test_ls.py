import json

import pytest

from trnsim import hardware
from trnsim.cli import main


def run(capsys, *argv):
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    out = capsys.readouterr()
    return info.value.code, out.out, out.err


def test_ls_json_agrees_with_catalog(capsys):
    code, out, _ = run(capsys, "ls", "--instance", "trn2.48xlarge", "--json")
    assert code == 0
    rows = json.loads(out)
    spec = hardware.instance("trn2.48xlarge")
    assert len(rows) == spec.chips
    assert sum(r["nc_count"] for r in rows) == spec.logical_cores()
    assert rows[0]["connected_to"] == [12, 3, 4, 1]
    assert rows[1]["neuroncore_ids"] == [4, 5, 6, 7]
    assert all(r["memory_size"] == spec.chip.memory_bytes for r in rows)
    assert all(r["logical_neuroncore_config"] == 2 for r in rows)


def test_ls_lnc1_doubles_cores(capsys):
    _, out, _ = run(capsys, "ls", "-i", "trn2.48xlarge", "--lnc", "1", "-j")
    assert json.loads(out)[0]["nc_count"] == 8


def test_ls_table_and_topology(capsys):
    code, out, _ = run(capsys, "ls", "-i", "trn2.48xlarge", "--topology")
    assert code == 0
    assert "instance-type: trn2.48xlarge" in out
    assert "logical-neuroncore-config: 2" in out
    assert "12, 3, 4, 1" in out and "96 GB" in out
    assert "[15]" in out and "◄––*" in out


def test_ls_default_instance_from_environment(capsys, monkeypatch):
    monkeypatch.setenv("TRNSIM_INSTANCE", "inf2.xlarge")
    _, out, _ = run(capsys, "ls")
    assert "instance-type: inf2.xlarge" in out
    assert "logical-neuroncore-config" not in out
    monkeypatch.delenv("TRNSIM_INSTANCE")
    _, out, _ = run(capsys, "ls")
    assert "instance-type: trn1.2xlarge" in out


def test_ls_typo_exits_2_with_suggestion(capsys):
    code, out, err = run(capsys, "ls", "--instance", "trn2.48xlarg")
    assert code == 2
    assert "did you mean 'trn2.48xlarge'" in err
    assert "Traceback" not in err and out == ""


def test_ls_lnc_unsupported_exits_2(capsys):
    code, _, err = run(capsys, "ls", "-i", "inf2.xlarge", "--lnc", "2")
    assert code == 2 and "logical NeuronCore config 2" in err


def test_debug_flag_shows_the_exception():
    from trnsim.errors import UnknownNameError
    with pytest.raises(UnknownNameError):
        main(["--debug", "ls", "-i", "nope"])
