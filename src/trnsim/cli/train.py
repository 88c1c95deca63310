"""`trnsim train`: time a zoo model's training step (step report; --json)."""

from __future__ import annotations

import json

import typer

from trnsim.cli.app import app, console


@app.command("train")
def train(
    model: str = typer.Option("gpt2", "--model", help="bert-large-pretrain, gpt2, "
                              "llama-3.2-1b or vit-base-finetune."),
    instance: str = typer.Option("trn1.2xlarge", "--instance", help="Instance to simulate."),
    micro_batch: int = typer.Option(1, "--micro-batch", help="Samples per core per micro-step."),
    grad_accum: int = typer.Option(1, "--grad-accum", help="Micro-steps per optimizer step."),
    seq: int = typer.Option(128, "--seq", help="Sequence length (language models)."),
    dtype: str = typer.Option("fp32", "--dtype", help="fp32, or bf16 (XLA_USE_BF16=1)."),
    sr: bool | None = typer.Option(None, "--sr/--no-sr", help="Stochastic rounding (default: "
                                   "on with bf16, as the Neuron runtime sets it)."),
    dp: int = typer.Option(1, "--dp", help="Data-parallel degree (timing mode: one rank "
                           "simulated, all-reduces timed for DP ranks)."),
    optimizer: str = typer.Option("adamw", "--optimizer", help="adamw or sgd (momentum 0.9)."),
    steps: int = typer.Option(3, "--steps", help="Optimizer steps to run (the report is the "
                              "last one's)."),
    layers: int | None = typer.Option(None, "--layers", help="Override the layer count (a "
                                      "shallower copy for a quick look)."),
    shapes_only: bool = typer.Option(False, "--shapes-only", help="Time the step without "
                                     "values (TRNSIM_XLA_VALUES=shapes): the model on the meta "
                                     "device, host memory for its graphs only; no loss."),
    as_json: bool = typer.Option(False, "--json", help="Print the step report as JSON."),
    trace: str = typer.Option(None, "--trace", help="Write the Perfetto trace of the last step "
                              "here (a report: trnsim profile view FILE)."),
    tensorboard: str = typer.Option(None, "--tensorboard", help="Log loss, step time, "
                                    "throughput and MFU of each step to TensorBoard event files "
                                    "in this directory."),
) -> None:
    """Run a zoo model's training steps on the simulated device and print the step report."""
    from rich.progress import Progress

    from trnsim.cli import checks
    from trnsim.perf.training import run_training

    checks.output_file(trace, "--trace")
    checks.output_directory(tensorboard, "--tensorboard")

    with Progress(transient=True, console=console()) as bar:
        task = bar.add_task(f"training {model}", total=steps)
        report = run_training(model, instance=instance, micro_batch=micro_batch,
                              grad_accum=grad_accum, seq=seq, dtype=dtype,
                              stochastic_rounding=sr, dp=dp, optimizer=optimizer, steps=steps,
                              layers=layers, progress=lambda _: bar.advance(task), trace=trace,
                              tensorboard=tensorboard, shapes_only=shapes_only)
    if as_json:
        typer.echo(json.dumps({**report.to_dict(), "trace": trace, "tensorboard": tensorboard},
                              indent=2))
        return
    out = console()
    out.print(str(report), markup=False, highlight=False)
    if trace:
        out.print(f"Perfetto trace of the last step written to {trace} (a report: trnsim "
                  f"profile view {trace})", markup=False, highlight=False)
    if tensorboard:
        out.print(f"TensorBoard event files in {tensorboard} (tensorboard --logdir "
                  f"{tensorboard})", markup=False, highlight=False)
