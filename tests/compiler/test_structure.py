"""Input/output structures: JSON round trip, rebuilding, and flattening calls against the trace."""

import json

import pytest

from trnsim.compiler.structure import Structure
from trnsim.errors import InvalidArgumentError

T = Structure("tensor")
NESTED = Structure("dict", (T, Structure("tuple", (T, Structure("const", value=3)))), ("a", "b"))


def test_json_round_trip_is_exact():
    text = json.dumps(NESTED.to_json())
    assert Structure.from_json(json.loads(text)) == NESTED


def test_rebuild_nests_flat_values_and_keeps_constants():
    assert NESTED.rebuild([1, 2]) == {"a": 1, "b": (2, 3)}
    assert NESTED.tensor_count() == 2
    with pytest.raises(InvalidArgumentError):
        NESTED.rebuild([1, 2, 3])


def test_flatten_checks_keys_lengths_and_fixed_constants():
    assert NESTED.flatten({"a": "x", "b": ("y", 3)}) == ["x", "y"]
    with pytest.raises(InvalidArgumentError, match="keys"):
        NESTED.flatten({"a": 1})
    with pytest.raises(InvalidArgumentError, match="was 3 at trace time"):
        NESTED.flatten({"a": 1, "b": (2, 4)})


def test_model_output_rebuilds_by_import_path():
    s = Structure("model_output", (T,), ("value",), "collections.OrderedDict")
    assert dict(s.rebuild([5])) == {"value": 5}
    assert s.describe() == "OrderedDict(value=*)"


def test_unknown_json_keys_are_rejected():
    with pytest.raises(InvalidArgumentError):
        Structure.from_json({"kind": "tensor", "shape": [1]})
