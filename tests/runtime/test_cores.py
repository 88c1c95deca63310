import pytest

from trnsim import hardware
from trnsim.errors import InvalidArgumentError, TrnsimError
from trnsim.runtime import CoresUnavailableError, parse_core_list, place, visible_cores


def test_parse_index_range_and_list():
    assert parse_core_list("3") == [3]
    assert parse_core_list("0-3") == [0, 1, 2, 3]
    assert parse_core_list("4,1, 2-3") == [1, 2, 3, 4]
    for bad in ("a", "3-1", "1,1", "-1"):
        with pytest.raises(InvalidArgumentError):
            parse_core_list(bad)


def test_visible_cores_precedence_and_defaults():
    assert visible_cores(2, "inf2.xlarge", {}) == [0, 1]
    assert visible_cores(32, "trn1.32xlarge", {"NEURON_RT_NUM_CORES": "4"}) == [0, 1, 2, 3]
    env = {"NEURON_RT_NUM_CORES": "4", "NEURON_RT_VISIBLE_CORES": "8-9"}
    assert visible_cores(32, "trn1.32xlarge", env) == [8, 9]


def test_requesting_more_cores_than_exist_fails_like_neuron():
    with pytest.raises(CoresUnavailableError) as info:
        visible_cores(2, "inf2.xlarge", {"NEURON_RT_VISIBLE_CORES": "0-7"})
    assert "Requested:8" in str(info.value) and "Available:2" in str(info.value)
    with pytest.raises(CoresUnavailableError, match="Requested:3 Available:2"):
        visible_cores(2, "inf2.xlarge", {"NEURON_RT_NUM_CORES": "3"})
    assert issubclass(CoresUnavailableError, TrnsimError)


def test_round_robin_placement(monkeypatch):
    spec = hardware.instance("trn1.32xlarge")
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "4-6")
    assert place(spec, 3, None) == [4, 5, 6]
    with pytest.raises(CoresUnavailableError, match="Requested:5 Available:3"):
        place(spec, 5, None)
    monkeypatch.delenv("NEURON_RT_VISIBLE_CORES")
    assert place(hardware.instance("trn2.48xlarge"), 2, None) == [0, 1]
    assert hardware.instance("trn2.48xlarge").logical_cores(None) == 64
