from trnsim.errors import LimitExceededError, TrnsimError, UnknownNameError


def test_limit_error_names_what_value_limit_and_source():
    error = LimitExceededError("partition count", 129, 128, context="NeuronCore-v2",
                               source="kernel.py:42")
    assert str(error) == "partition count 129 exceeds limit 128 (NeuronCore-v2) at kernel.py:42"
    assert isinstance(error, TrnsimError) and isinstance(error, ValueError)


def test_at_attaches_source_once():
    error = TrnsimError("bad").at("a.py:1").at("b.py:2")
    assert str(error) == "bad at a.py:1"


def test_unknown_name_error_is_a_lookup_error():
    error = UnknownNameError("dtype", "bfloat61", ["bfloat16", "float16"])
    assert isinstance(error, LookupError)
    assert error.suggestions[0] == "bfloat16"
