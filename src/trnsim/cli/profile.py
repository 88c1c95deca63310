"""`trnsim profile view TRACE [-o report.html]`: a trace as an HTML report (neuron-profile view).

Traces come from `trnsim kernel run --trace`, `trnsim compile/run --trace`, `trnsim train
--trace`, `kernel.last_run`/`model.profile(path)`, or TRNSIM_XLA_PROFILE_DIR for scripts.
"""

from __future__ import annotations

from pathlib import Path

import typer

from trnsim.cli.app import app, console

profile_app = typer.Typer(help="Read profiles of simulated runs.", no_args_is_help=True)
app.add_typer(profile_app, name="profile",
              help="Profiles as a report to read in a browser (profile view TRACE).")


@profile_app.command("view")
def view_command(
    trace: str = typer.Argument(..., help="A trace JSON file trnsim wrote (Perfetto format)."),
    output: str = typer.Option(None, "--output", "-o",
                               help="The HTML file to write (default: TRACE with .html)."),
) -> None:
    """Write a single-file HTML report of TRACE: engine timeline, utilisation, waits, slowest
    instructions and source lines, DMA bandwidth, roofline, and the trace for Perfetto."""
    from trnsim.cli import checks
    from trnsim.perf.profile_report import write_report

    checks.existing_file(trace, "trace")
    target = output if output is not None else str(Path(trace).with_suffix(".html"))
    if Path(target).resolve() == Path(trace).resolve():
        from trnsim.errors import InvalidArgumentError

        raise InvalidArgumentError(f"--output {target}: is the trace itself (name an .html file)")
    checks.output_file(target, "--output")
    path = write_report(trace, target)
    console().print(f"profile report written to {path} ({path.stat().st_size / 1024:,.0f} KiB); "
                    f"open it in a browser (it needs no network)", highlight=False, markup=False)
