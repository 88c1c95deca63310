"""`trnsim compile MODULE:FACTORY ...` and `trnsim run MODEL.trnsim`: the model path from a shell."""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import numpy as np
import typer

from trnsim.cli.app import app, console, report_width
from trnsim.cli.format import size
from trnsim.errors import InvalidArgumentError, LimitExceededError


def parse_input_shape(text: str) -> tuple[tuple[int, ...], str]:
    """'1x128:int64' -> ((1, 128), 'int64'); the dtype defaults to float32."""
    shape_text, _, dtype = text.partition(":")
    try:
        shape = tuple(int(s) for s in shape_text.lower().split("x") if s)
    except ValueError:
        raise InvalidArgumentError(f"bad --input-shape {text!r}; write e.g. 1x128:int64") from None
    from trnsim.cli.checks import MAX_KERNEL_INPUT_BYTES

    elements = 1
    for d in shape:
        if d <= 0:
            raise InvalidArgumentError(f"--input-shape {text!r}: dimensions must be positive")
        elements *= d
    if elements * 8 > MAX_KERNEL_INPUT_BYTES:  # 8: the widest input dtype (int64)
        raise LimitExceededError(f"--input-shape {text!r} elements", elements,
                                 MAX_KERNEL_INPUT_BYTES // 8,
                                 context="the HBM of the largest chip trnsim models")
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


def parse_input_shapes(texts: list[str]) -> list[tuple[tuple[int, ...], str]]:
    """Every --input-shape, checked before the model (and torch) is imported."""
    parsed = [parse_input_shape(text) for text in texts]
    for text, (shape, _) in zip(texts, parsed, strict=True):
        if not shape:
            raise InvalidArgumentError(f"bad --input-shape {text!r}; write e.g. 1x128:int64")
    return parsed


def artifact_files(path: str) -> list[tuple[str, int]]:
    """(relative path, bytes) of every file an artifact directory holds."""
    root = Path(path)
    return sorted((str(f.relative_to(root)), f.stat().st_size) for f in root.rglob("*") if f.is_file())


def describe_artifact(path: str) -> str:
    """What `compile -o` wrote: a directory, its files and their sizes."""
    files = artifact_files(path)
    total = sum(n for _, n in files)
    listing = ", ".join(f"{name} {size(n)}" for name, n in files)
    return (f"wrote {path}{os.sep} (a directory of {len(files)} files, {size(total)}: {listing}); "
            f"`trnsim run {path}` or trnsim.load() runs it; move or copy the whole directory")


@app.command("compile")
def compile_command(
    target: str = typer.Argument(..., help="MODULE:FACTORY returning a model or (model, inputs)"),
    input_shape: list[str] = typer.Option(None, "--input-shape",
                                          help="e.g. 1x128:int64 (repeat per input)"),
    instance: str = typer.Option("inf2.xlarge", "--instance"),
    output: str = typer.Option("model.trnsim", "--output", "-o",
                               help="The artifact: a directory (manifest, program, weights)."),
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
    as_json: bool = typer.Option(False, "--json", help="The report and the files written, as JSON."),
    trace_path: str = typer.Option(None, "--trace", help="Also write the Perfetto trace of one "
                                   "inference here (view it: trnsim profile view FILE)."),
    model_type: str = typer.Option(
        None, "--model-type", help="neuronx-cc --model-type: transformer (torch-neuronx's "
        "default: attention fused) | generic (attention as separate kernels) | unet-inference"),
) -> None:
    """Trace and compile a PyTorch model; save it (a directory of JSON + safetensors) and print
    its report and what was written."""
    import trnsim
    from trnsim.cli import checks

    checks.new_artifact(output)
    checks.output_file(trace_path, "--trace")
    checks.instance_given(instance, "inf2.xlarge")
    input_shape = input_shape or []
    parse_input_shapes(input_shape)  # a typo costs nothing: checked before torch is imported
    made = load_factory(target)()
    model, inputs = made if isinstance(made, tuple) else (made, None)
    if inputs is None:
        if not input_shape:
            raise InvalidArgumentError("the factory returned only a model: give --input-shape")
        inputs = example_inputs(input_shape)
    compiled = trnsim.trace(model, inputs, instance=instance, auto_cast=auto_cast,
                            auto_cast_type=auto_cast_type, cores=cores,
                            tensor_parallel=tensor_parallel, pipeline_cores=pipeline_cores,
                            lnc=lnc, model_type=model_type)
    path = compiled.save(output)
    trace = compiled.profile(trace_path) if trace_path else None
    if as_json:
        files = artifact_files(path)
        typer.echo(json.dumps({"report": compiled.report().to_dict(kernels=False),
                               "artifact": {"path": path, "directory": True,
                                            "files": dict(files),
                                            "bytes": sum(n for _, n in files)},
                               "trace": trace}, indent=2, default=str))
        return
    out = console()
    out.print(compiled.report().table(width=report_width(out)), highlight=False, markup=False)
    out.print(describe_artifact(path), highlight=False, markup=False)
    trace_written(out, trace)


def trace_written(out, trace: str | None) -> None:
    if trace:
        out.print(f"Perfetto trace written to {trace} (a report: trnsim profile view {trace})",
                  highlight=False, markup=False)


def random_model_inputs(model, seed: int = 0) -> tuple[list[np.ndarray], list[str]]:
    """Random inputs for a loaded model, and a line describing each. Integer inputs used as
    gather indices (token ids) span the table they index (the vocabulary); other integer
    inputs (masks, flags) are 0 or 1; floating-point inputs are standard normal."""
    from trnsim.runtime.inputs import index_limits

    limits = index_limits(model.program, [spec.name for spec in model.inputs])
    rng = np.random.default_rng(seed)
    arrays, lines = [], []
    for spec in model.inputs:
        shape = "x".join(str(d) for d in spec.shape)
        if spec.dtype.startswith(("int", "uint", "bool")):
            high = limits.get(spec.name)
            arrays.append(rng.integers(0, high or 2, spec.shape).astype(spec.dtype.replace("_", "")))
            where = (f"random in [0, {high}) (rows of the table it indexes)" if high else
                     "random 0 or 1 (it indexes no table)")
        else:
            arrays.append(rng.standard_normal(spec.shape).astype(np.float32))
            where = "standard normal"
        lines.append(f"{spec.name} {spec.dtype}[{shape}]: {where}")
    return arrays, lines


def _leaf_names(structure, prefix: str = "") -> list[str]:
    if structure is None:
        return []
    if structure.kind == "tensor":
        return [prefix or "output"]
    if structure.kind == "const":
        return []
    names = []
    for i, child in enumerate(structure.children):
        key = structure.keys[i] if structure.keys else f"[{i}]"
        joined = f"{prefix}.{key}" if prefix and structure.keys else f"{prefix}{key}"
        names += _leaf_names(child, joined)
    return names


def output_summaries(model, values: list, count: int = 4) -> list[dict]:
    """Per output: name, shape, dtype, its first values, min, max and mean."""
    names = _leaf_names(model.output_structure) or [spec.name for spec in model.outputs]
    summaries = []
    for name, spec, value in zip(names, model.outputs, values, strict=True):
        array = np.asarray(value).astype(np.float64)
        flat = array.reshape(-1)
        summaries.append({"name": name, "shape": list(spec.shape), "dtype": spec.dtype,
                          "first": [float(v) for v in flat[:count]],
                          "min": float(flat.min()) if flat.size else None,
                          "max": float(flat.max()) if flat.size else None,
                          "mean": float(flat.mean()) if flat.size else None})
    return summaries


def _summary_line(s: dict) -> str:
    shape = "x".join(str(d) for d in s["shape"])
    first = ", ".join(f"{v:.4g}" for v in s["first"])
    more = ", ..." if np.prod(s["shape"]) > len(s["first"]) else ""
    stats = (f"; min {s['min']:.4g}, max {s['max']:.4g}, mean {s['mean']:.4g}"
             if s["min"] is not None else "")
    return f"{s['name']} {s['dtype']}[{shape}]: [{first}{more}]{stats}"


@app.command("run")
def run_command(
    path: str = typer.Argument(..., help="A model saved by trnsim compile / CompiledModel.save"),
    as_json: bool = typer.Option(False, "--json", help="Inputs, outputs and the report as JSON."),
    seed: int = typer.Option(0, "--seed", min=0),
    trace_path: str = typer.Option(None, "--trace", help="Also write the Perfetto trace of one "
                                   "inference here (view it: trnsim profile view FILE)."),
) -> None:
    """Load a compiled model, run it once on random inputs, print its outputs and report."""
    import trnsim
    from trnsim.cli import checks

    checks.output_file(trace_path, "--trace")
    model = trnsim.load(path)
    arrays, input_lines = random_model_inputs(model, seed)
    result = model(*arrays)
    values = model.output_structure.flatten(result) if model.output_structure is not None else \
        (list(result) if isinstance(result, tuple) else [result])
    outputs = output_summaries(model, values)
    report = model.report()
    trace = model.profile(trace_path) if trace_path else None
    if as_json:
        data = report.to_dict(kernels=False)
        data.update({"inputs": input_lines, "outputs": outputs, "trace": trace})
        typer.echo(json.dumps(data, indent=2, default=str))
        return
    out = console()
    out.print("inputs:", highlight=False)
    for line in input_lines:
        out.print(f"  {line}", highlight=False, markup=False)
    out.print("outputs:", highlight=False)
    for summary in outputs:
        out.print(f"  {_summary_line(summary)}", highlight=False, markup=False)
    out.print(report.table(width=report_width(out)), highlight=False, markup=False)
    trace_written(out, trace)
