"""What is checked before a run starts: the mode, the chip, and the inputs.

The program itself is verified by `trnsim.sim.plan.Planner` (Program.verify's checks, once per
distinct instruction) before any instruction runs.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from trnsim.errors import InvalidArgumentError, LimitExceededError, UnknownNameError
from trnsim.isa import Program, TensorDecl

MODES = ("functional", "timing")


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise InvalidArgumentError(f"simulation mode {mode!r} is not one of {', '.join(MODES)}")


def check_chip(programs: list[Program], chip) -> None:
    if not programs or chip is None:
        raise InvalidArgumentError("nothing to simulate: no programs given")
    if len(programs) > chip.cores:
        raise LimitExceededError("programs (one per NeuronCore)", len(programs), chip.cores,
                                 context=f"{chip.name} NeuronCores")
    for index, program in enumerate(programs):
        target = program.target
        if getattr(target, "name", None) != chip.core.name:
            raise InvalidArgumentError(
                f"program {program.name!r} (core {index}) targets {getattr(target, 'name', target)}, "
                f"but {chip.name} has {chip.core.name} cores")


def check_inputs(program: Program, inputs: Mapping[str, np.ndarray] | None, *, provided: set[str],
                 required: bool) -> None:
    """Inputs name declared input tensors and match their shapes and dtypes; with `required`,
    every input tensor not in `provided` (shared values) must be given."""
    inputs = inputs or {}
    declared = {t.name: t for t in program.tensors.values() if t.kind == "input"}
    for name in inputs:
        if name not in declared:
            raise UnknownNameError(f"input tensor of program {program.name!r}", name, declared)
    for name, decl in declared.items():
        if name in inputs:
            check_array(decl, inputs[name])
        elif required and name not in provided:
            raise InvalidArgumentError(f"program {program.name!r} needs input {name!r} "
                                       f"({decl.dtype.name}{list(decl.shape)}); none was given")


def check_array(decl: TensorDecl, array) -> None:
    array = np.asarray(array)
    if tuple(array.shape) != tuple(decl.shape):
        raise InvalidArgumentError(f"input {decl.name!r} has shape {list(array.shape)}, but the "
                                   f"program declares {list(decl.shape)}")
    if array.dtype != decl.dtype.np_dtype:
        raise InvalidArgumentError(
            f"input {decl.name!r} has dtype {array.dtype}, but the program declares "
            f"{decl.dtype.name} (stored as {decl.dtype.np_dtype}); convert it with "
            f"trnsim.numerics.cast(array, {decl.dtype.name!r})")
