"""`trnsim compile MODULE:FACTORY ...` and `trnsim run MODEL.trnsim`: the model path from a shell."""

from __future__ import annotations

import importlib
import json
import os
import sys

import numpy as np
import typer

from trnsim.cli.app import app, console
from trnsim.errors import InvalidArgumentError


def parse_input_shape(text: str) -> tuple[tuple[int, ...], str]:
    """'1x128:int64' -> ((1, 128), 'int64'); the dtype defaults to float32."""
    shape_text, _, dtype = text.partition(":")
    try:
        shape = tuple(int(s) for s in shape_text.lower().split("x") if s)
    except ValueError:
        raise InvalidArgumentError(f"bad --input-shape {text!r}; write e.g. 1x128:int64") from None
    return shape, dtype or "float32"


def load_factory(target: str):
    module_name, sep, attr = target.partition(":")
    if not sep:
        raise InvalidArgumentError(f"name the model factory as MODULE:FUNCTION; got {target!r}")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise InvalidArgumentError(f"cannot import {module_name!r}: {error}") from None
    factory = getattr(module, attr, None)
    if factory is None:
        raise InvalidArgumentError(f"{module_name} has no attribute {attr!r}")
    return factory


def example_inputs(shapes: list[str], seed: int = 0):
    import torch

    generator = torch.Generator().manual_seed(seed)
    inputs = []
    for text in shapes:
        shape, dtype = parse_input_shape(text)
        torch_dtype = getattr(torch, dtype, None)
        if torch_dtype is None:
            raise InvalidArgumentError(f"unknown input dtype {dtype!r}")
        if torch_dtype.is_floating_point:
            inputs.append(torch.randn(shape, generator=generator).to(torch_dtype))
        else:
            inputs.append(torch.randint(0, 2, shape, generator=generator, dtype=torch_dtype))
    return tuple(inputs)


@app.command("compile")
def compile_command(
    target: str = typer.Argument(..., help="MODULE:FACTORY returning a model or (model, inputs)"),
    input_shape: list[str] = typer.Option(None, "--input-shape",
                                          help="e.g. 1x128:int64 (repeat per input)"),
    instance: str = typer.Option("inf2.xlarge", "--instance"),
    output: str = typer.Option("model.trnsim", "--output", "-o"),
    auto_cast: str = typer.Option(None, "--auto-cast", help="none | matmult | all"),
    auto_cast_type: str = typer.Option(None, "--auto-cast-type", help="bf16 | fp16 | tf32 | fp8_e4m3"),
    cores: int = typer.Option(1, "--cores", help="NeuronCores to use: copies x tensor-parallel "
                              "ranks (a model too large for one core is split automatically)"),
    tensor_parallel: int = typer.Option(None, "--tensor-parallel", "--tp",
                                        help="cores each copy's weights are split over"),
    pipeline_cores: int = typer.Option(None, "--neuroncore-pipeline-cores",
                                       help="inf1: stages of neuron-cc's NeuronCore Pipeline"),
    lnc: int = typer.Option(None, "--lnc", "--logical-nc-config",
                            help="trn2/trn3: physical cores per logical NeuronCore (1 or 2)"),
) -> None:
    """Trace and compile a PyTorch model; save it (JSON + safetensors) and print its report."""
    import trnsim

    input_shape = input_shape or []
    made = load_factory(target)()
    model, inputs = made if isinstance(made, tuple) else (made, None)
    if inputs is None:
        if not input_shape:
            raise InvalidArgumentError("the factory returned only a model: give --input-shape")
        inputs = example_inputs(input_shape)
    compiled = trnsim.trace(model, inputs, instance=instance, auto_cast=auto_cast,
                            auto_cast_type=auto_cast_type, cores=cores,
                            tensor_parallel=tensor_parallel, pipeline_cores=pipeline_cores,
                            lnc=lnc)
    path = compiled.save(output)
    out = console()
    out.print(compiled.report().table(), highlight=False, markup=False)
    out.print(f"saved {path}", highlight=False)


@app.command("run")
def run_command(
    path: str = typer.Argument(..., help="A model saved by trnsim compile / CompiledModel.save"),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    seed: int = typer.Option(0, "--seed"),
) -> None:
    """Load a compiled model, run it once on random inputs, print the performance report."""
    import trnsim

    model = trnsim.load(path)
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in model.inputs:
        if spec.dtype.startswith(("int", "uint", "bool")):
            arrays.append(rng.integers(0, 2, spec.shape).astype(spec.dtype.replace("_", "")))
        else:
            arrays.append(rng.standard_normal(spec.shape).astype(np.float32))
    model(*arrays)
    report = model.report()
    if as_json:
        typer.echo(json.dumps(report.to_dict(kernels=False), indent=2, default=str))
    else:
        console().print(report.table(), highlight=False, markup=False)
