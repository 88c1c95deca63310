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


def test_model_output_rebuilds_from_the_fixed_table():
    s = Structure.from_json({"kind": "model_output", "children": [{"kind": "tensor"}],
                             "keys": ["last_hidden_state"],
                             "type": "transformers.modeling_outputs.BaseModelOutput"})
    out = s.rebuild([5])
    assert type(out).__name__ == "BaseModelOutput" and out.last_hidden_state == 5
    assert s.describe() == "BaseModelOutput(last_hidden_state=*)"


@pytest.mark.parametrize("path", ["collections.OrderedDict", "os.system", "builtins.open",
                                  "subprocess.getoutput", "shutil.rmtree",
                                  "transformers.modeling_outputs.os.system"])
def test_a_stored_type_outside_the_table_is_never_imported(path):
    record = {"kind": "model_output", "children": [{"kind": "const", "value": "echo hi"}],
              "keys": ["command"], "type": path}
    with pytest.raises(InvalidArgumentError, match="not one trnsim rebuilds"):
        Structure.from_json(record)
    with pytest.raises(InvalidArgumentError, match="not one trnsim rebuilds"):
        Structure("model_output", (T,), ("command",), path).rebuild(["echo hi"])


def test_unknown_json_keys_are_rejected():
    with pytest.raises(InvalidArgumentError):
        Structure.from_json({"kind": "tensor", "shape": [1]})
