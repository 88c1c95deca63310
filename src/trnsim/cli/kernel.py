"""`trnsim kernel run FILE.py::KERNEL --shapes ...`: run an NKI kernel on random inputs."""

from __future__ import annotations

import typer

from trnsim.cli.app import app, console
from trnsim.errors import TrnsimError
from trnsim.nki.files import load_kernel, parse_shapes, random_inputs

kernel_app = typer.Typer(help="Run NKI kernels on a simulated NeuronCore.", no_args_is_help=True)
app.add_typer(kernel_app, name="kernel", help="Run NKI kernels on a simulated NeuronCore (kernel run).")


@kernel_app.command("run")
def run_command(
    target: str = typer.Argument(..., help="FILE.py::KERNEL or package.module::KERNEL"),
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
