"""Programs round-trip through the JSON encoding used by artifacts and the compile cache."""

import json

import numpy as np
import pytest

from tests.nki.kernels import attention, matmul
from trnsim.errors import InvalidArgumentError
from trnsim.isa.serialize import program_from_data, program_to_data
from trnsim.sim import simulate


def _program(kernel, *arrays, **kwargs):
    kernel(*arrays, **kwargs)
    return kernel.last_run.profile.program


@pytest.mark.parametrize("case", ["matmul", "attention"])
def test_roundtrip_gives_the_same_instructions_and_results(case):
    rng = np.random.default_rng(0)
    if case == "matmul":
        args = (rng.standard_normal((256, 128)).astype(np.float32),
                rng.standard_normal((256, 512)).astype(np.float32))
        program = _program(matmul.matmul_hoisted, *args)
        inputs = {"lhsT": args[0], "rhs": args[1]}
    else:
        q = rng.standard_normal((64, 256)).astype(np.float32)
        args = (q, q.copy(), rng.standard_normal((256, 64)).astype(np.float32))
        program = _program(attention.attention_fwd, *args, causal=True)
        inputs = {"qT": args[0], "kT": args[1], "v": args[2]}
    data = json.loads(json.dumps(program_to_data(program)))
    constants = {t.name: t.data for t in program.tensors.values() if t.kind == "constant"}
    again = program_from_data(data, constants)
    assert again.instructions == program.instructions
    first, second = simulate(program, inputs), simulate(again, inputs)
    for name in first.outputs:
        np.testing.assert_array_equal(first.outputs[name], second.outputs[name])
    assert first.profile.total_ns == second.profile.total_ns


def test_wrong_format_and_unknown_opcode_are_errors():
    rng = np.random.default_rng(0)
    program = _program(matmul.matmul_nl, rng.standard_normal((64, 128)).astype(np.float32),
                       rng.standard_normal((128, 64)).astype(np.float32))
    data = program_to_data(program)
    with pytest.raises(InvalidArgumentError, match="format"):
        program_from_data({**data, "format": 99})
    bad = {**data, "instructions": [{**data["instructions"][0], "opcode": "Teleport"}]}
    with pytest.raises(InvalidArgumentError, match="unknown opcode 'Teleport'"):
        program_from_data(bad)
