"""`trnsim kernel run FILE.py::KERNEL --shapes ...`: run an NKI kernel on random inputs."""

from __future__ import annotations

import json

import typer

from trnsim.cli.app import app, console, report_width

kernel_app = typer.Typer(help="Run NKI kernels on a simulated NeuronCore.", no_args_is_help=True)
app.add_typer(kernel_app, name="kernel", help="Run NKI kernels on a simulated NeuronCore (kernel run).")


def _shape(shape: tuple[int, ...]) -> str:
    return "x".join(str(d) for d in shape)


@kernel_app.command("run")
def run_command(
    target: str = typer.Argument(..., help="FILE.py::KERNEL or package.module::KERNEL, e.g. "
                                 "trnsim.kernels.tutorials::matmul_optimized"),
    shapes: str = typer.Option(..., "--shapes",
                               help="Input shapes in argument order. A dtype after the last "
                                    "shape only applies to all (128x512,128x512:bfloat16); "
                                    "else name one per shape (128x512:float32,512x256:bfloat16) "
                                    "or none (--dtype)."),
    dtype: str = typer.Option("float32", "--dtype", help="Input dtype when no shape names one."),
    platform: str = typer.Option("trn1", "--target", help="trn1 | inf2 | trn2 | trn3 (or gen2/gen3/gen4)."),
    timing_only: bool = typer.Option(False, "--timing-only", help="Skip the numerics (faster)."),
    profile_path: str = typer.Option(None, "--trace", "--profile",
                                     help="Write a Perfetto trace to this path (a report: "
                                          "trnsim profile view FILE)."),
    seed: int = typer.Option(0, "--seed", min=0),
    as_json: bool = typer.Option(False, "--json", help="Inputs, latency and each core's profile "
                                 "summary as JSON."),
) -> None:
    """Run KERNEL on random inputs; print its inputs, latency and where the time went."""
    from trnsim import hardware
    from trnsim.cli import checks
    from trnsim.nki.files import load_kernel, parse_shapes, random_inputs  # not for other commands
    from trnsim.nki.typing import TensorSpec
    from trnsim.sim import write_trace

    specs = parse_shapes(shapes, dtype)
    checks.kernel_inputs(specs)
    checks.output_file(profile_path, "--trace")
    core = hardware.core(platform)
    kernel = load_kernel(target)
    if timing_only:  # shapes and dtypes only: no host memory for the inputs
        kernel.run([TensorSpec(shape, dt) for shape, dt in specs], {}, mode="timing",
                   target=core)
    else:
        kernel.run(random_inputs(specs, seed), {}, mode="functional", target=core)
    run = kernel.last_run
    trace = write_trace([r.profile for r in run.results], profile_path) if profile_path else None
    if as_json:
        typer.echo(json.dumps({
            "kernel": target, "core": core.name,
            "inputs": [{"shape": list(shape), "dtype": dt} for shape, dt in specs],
            "latency_us": run.latency_ns / 1000,
            "profiles": [r.profile.to_dict() for r in run.results],
            "trace": str(trace) if trace else None}, indent=2, default=str))
        return
    out = console()
    inputs = ", ".join(f"{_shape(shape)} {dt}" for shape, dt in specs)
    out.print(f"{target} on {core.name}: {run.latency_ns / 1000:.3f} us (inputs: {inputs})",
              highlight=False, markup=False)
    for result in run.results:
        out.print(result.profile.summary_table(report_width(out)), highlight=False, markup=False)
    if trace:
        out.print(f"Perfetto trace written to {trace} (a report: trnsim profile view {trace})",
                  highlight=False, markup=False)
