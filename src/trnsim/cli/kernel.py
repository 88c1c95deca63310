"""`trnsim kernel run FILE.py::KERNEL --shapes ...`: run an NKI kernel on random inputs."""

from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np
import typer

from trnsim.cli.app import app, console
from trnsim.errors import InvalidArgumentError, TrnsimError

kernel_app = typer.Typer(help="Run NKI kernels on a simulated NeuronCore.", no_args_is_help=True)
app.add_typer(kernel_app, name="kernel", help="Run NKI kernels on a simulated NeuronCore (kernel run).")


def parse_shapes(text: str, default_dtype: str) -> list[tuple[tuple[int, ...], str]]:
    """'128x512,128x512:bfloat16' -> [((128, 512), 'float32'), ((128, 512), 'bfloat16')]."""
    specs = []
    for part in [p.strip() for p in text.split(",") if p.strip()]:
        shape_text, _, dtype = part.partition(":")
        try:
            shape = tuple(int(s) for s in shape_text.lower().split("x"))
        except ValueError:
            raise InvalidArgumentError(f"bad shape {part!r}; write shapes like 128x512 or "
                                       f"128x512:bfloat16") from None
        specs.append((shape, dtype or default_dtype))
    if not specs:
        raise InvalidArgumentError("--shapes needs at least one shape, e.g. --shapes 128x512,128x512")
    return specs


def load_kernel(target: str):
    from trnsim.nki import Kernel, compat, jit

    path, sep, name = target.partition("::")
    if not sep or not name:
        raise InvalidArgumentError(f"name the kernel as FILE.py::KERNEL; got {target!r}")
    if not os.path.exists(path):
        raise InvalidArgumentError(f"kernel file {path!r} does not exist")
    compat.install("neuronxcc")
    spec = importlib.util.spec_from_file_location(f"_trnsim_kernel_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    spec.loader.exec_module(module)
    fn = getattr(module, name, None)
    if fn is None:
        raise InvalidArgumentError(f"{path} has no kernel named {name!r}")
    return fn if isinstance(fn, Kernel) else jit(fn)


def random_inputs(specs, seed: int) -> list[np.ndarray]:
    from trnsim.numerics import cast
    from trnsim.numerics import dtype as as_dtype

    rng = np.random.default_rng(seed)
    arrays = []
    for shape, dtype in specs:
        dt = as_dtype(dtype)
        if dt.is_float:
            arrays.append(cast(rng.standard_normal(shape).astype(np.float32), dt))
        else:
            arrays.append(rng.integers(0, 16, shape).astype(dt.np_dtype))
    return arrays


@kernel_app.command("run")
def run_command(
    target: str = typer.Argument(..., help="FILE.py::KERNEL"),
    shapes: str = typer.Option(..., "--shapes",
                               help="Input shapes in argument order: 128x512,512x256:bfloat16"),
    dtype: str = typer.Option("float32", "--dtype", help="Default input dtype."),
    platform: str = typer.Option("trn1", "--target", help="trn1 | inf2 | trn2 | trn3 (or gen2/gen3/gen4)."),
    timing_only: bool = typer.Option(False, "--timing-only", help="Skip the numerics (faster)."),
    profile_path: str = typer.Option(None, "--profile", help="Write a Perfetto trace to this path."),
    seed: int = typer.Option(0, "--seed"),
) -> None:
    """Run KERNEL from FILE.py on random inputs; print latency and where the time went."""
    from trnsim import hardware
    from trnsim.sim import write_trace

    kernel = load_kernel(target)
    arrays = random_inputs(parse_shapes(shapes, dtype), seed)
    core = hardware.core(platform)
    try:
        kernel.run(arrays, {}, mode="timing" if timing_only else "functional", target=core)
    except TrnsimError:
        raise
    run = kernel.last_run
    out = console()
    out.print(f"{target} on {core.name}: {run.latency_ns / 1000:.3f} us", highlight=False)
    for result in run.results:
        out.print(result.profile.summary_table())
    if profile_path:
        path = write_trace([r.profile for r in run.results], profile_path)
        out.print(f"Perfetto trace written to {path}", highlight=False)
