import pytest

from trnsim import hardware
from trnsim.errors import TrnsimError, UnknownNameError


def test_lookup_forgives_case_and_space():
    assert hardware.instance(" TRN1.32XLARGE ") is hardware.instance("trn1.32xlarge")
    assert hardware.chip("trainium2") is hardware.chip("Trainium2")


def test_unknown_instance_suggests_close_names():
    with pytest.raises(UnknownNameError) as info:
        hardware.instance("trn1.32xlarg")
    assert "trn1.32xlarge" in info.value.suggestions
    assert isinstance(info.value, TrnsimError)
    assert "did you mean" in str(info.value)


def test_unknown_name_without_close_match_lists_known():
    with pytest.raises(UnknownNameError, match="known: "):
        hardware.chip("zzzzzz")
