"""`trnsim generate MODEL`: time (and, with real weights, run) token generation end to end."""

from __future__ import annotations

import json

import typer
from rich import box
from rich.table import Table

from trnsim.cli.app import app, console, err_console
from trnsim.errors import InvalidArgumentError


def step_timer(model: str, instance: str, tp: int, lnc: int | None, auto_cast: str | None,
               quiet: bool, quantize: str | None = None):
    """The model's source and a StepTimer for it on the deployment (shared with `serve`)."""
    from trnsim import hardware
    from trnsim.perf.serving.models import resolve_model
    from trnsim.perf.serving.steps import Deployment, StepTimer

    source = resolve_model(model)
    spec = hardware.instance(instance)
    deployment = Deployment(spec.name, tp, lnc, auto_cast, quantize=quantize)
    progress = None if quiet else (lambda text: err_console().print(text, highlight=False))
    return source, StepTimer(source.name, source.build, source.config, deployment,
                             progress=progress)


def _prompt_ids(text: str | None, batch: int, length: int, vocab: int, seed: int):
    import torch

    if text:
        try:
            row = [int(t) for t in text.split(",") if t.strip()]
        except ValueError:
            raise InvalidArgumentError(f"--prompt-ids: expected comma-separated token ids, got "
                                       f"{text!r}") from None
        bad = [t for t in row if not 0 <= t < vocab]
        if bad:
            raise InvalidArgumentError(f"--prompt-ids: token {bad[0]} is outside the model's "
                                       f"vocabulary (0..{vocab - 1})")
        return torch.tensor([row] * batch)
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


def _real_model(source, weights: str | None):
    import torch

    model = source.build()
    if weights:
        from safetensors.torch import load_file

        try:
            state = load_file(weights)
        except (OSError, ValueError, RuntimeError) as error:
            raise InvalidArgumentError(f"--weights {weights}: {error}") from None
        missing, unexpected = model.load_state_dict(state, strict=False)
        if unexpected:
            raise InvalidArgumentError(f"--weights {weights}: tensors the model does not have: "
                                       f"{', '.join(unexpected[:5])}")
        del missing  # tied or buffer weights keep their initial values
    return model.to(torch.float32).eval()


@app.command("generate")
def generate_command(
    model: str = typer.Argument(..., help="A zoo causal LM (llama-3-8b, llama-2-7b, "
                                "llama-3.2-1b, ...) or a Hugging Face config.json."),
    instance: str = typer.Option("inf2.xlarge", "--instance"),
    tp: int = typer.Option(1, "--tp", min=1, help="Tensor-parallel degree (NeuronCores per "
                           "copy of the model)."),
    lnc: int = typer.Option(None, "--lnc", help="Logical NeuronCore size (Trainium2/3)."),
    auto_cast: str = typer.Option(None, "--auto-cast", help="none | matmult | all; default the "
                                  "instance compiler's (matmult: bf16 matmuls)."),
    quantize: str = typer.Option(None, "--quantize", help="Weight-only quantization: int8 "
                                 "stores linear weights as int8, dequantized on chip (NxD "
                                 "Inference's quantization_dtype)."),
    input_tokens: int = typer.Option(128, "--input-tokens", "--prompt-len", min=1),
    output_tokens: int = typer.Option(128, "--output-tokens", min=1),
    batch: int = typer.Option(1, "--batch", min=1),
    max_length: int = typer.Option(None, "--max-length", help="Longest sequence compiled "
                                   "(NxD Inference's seq_len); default input + output."),
    prefill_buckets: str = typer.Option(None, "--prefill-buckets", help="Comma list; default "
                                        "powers of 2 from 128 up to --max-length."),
    decode_buckets: str = typer.Option(None, "--decode-buckets", help="Comma list; default "
                                       "powers of 2 from 128 up to --max-length."),
    tokens: bool = typer.Option(False, "--tokens", help="Also generate real tokens: the model "
                                "built with seeded random weights (or --weights) run on trnsim."),
    weights: str = typer.Option(None, "--weights", help="A safetensors state dict for --tokens."),
    prompt_ids: str = typer.Option(None, "--prompt-ids", help="Comma-separated prompt token ids "
                                   "for --tokens (default: random ids of --input-tokens)."),
    sample: bool = typer.Option(False, "--sample", help="Sample instead of greedy decoding."),
    temperature: float = typer.Option(1.0, "--temperature"),
    top_k: int = typer.Option(50, "--top-k"),
    top_p: float = typer.Option(1.0, "--top-p"),
    seed: int = typer.Option(0, "--seed"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """TTFT, time per output token as the KV cache grows (one step per token, each at its
    sequence bucket), end-to-end latency, tokens/s and $ per million output tokens."""
    from trnsim.perf.serving.buckets import parse_buckets
    from trnsim.perf.serving.generation import time_generation

    source, timer = step_timer(model, instance, tp, lnc, auto_cast, as_json, quantize)
    length = max_length or input_tokens + output_tokens
    if source.max_positions and length > source.max_positions:
        raise InvalidArgumentError(f"--max-length {length} exceeds {source.name}'s "
                                   f"max_position_embeddings ({source.max_positions})")
    if input_tokens + output_tokens > length:
        raise InvalidArgumentError(f"input {input_tokens} + output {output_tokens} tokens exceed "
                                   f"--max-length {length}")
    pre = parse_buckets(prefill_buckets, length)
    dec = parse_buckets(decode_buckets, length)
    token_result = None
    if tokens:
        token_result = _tokens(source, timer.deployment, weights, prompt_ids, batch, input_tokens,
                               output_tokens, dec, sample, temperature, top_k, top_p, seed)
        input_tokens = len(token_result["prompt"][0])
    timing = time_generation(timer, instance=timer.deployment.instance, tensor_parallel=tp,
                             lnc=lnc, batch=batch, input_tokens=input_tokens,
                             output_tokens=output_tokens, prefill_buckets=pre,
                             decode_buckets=dec)
    data = {"model": source.name, "instance": timer.deployment.instance, "tp": tp, "lnc": lnc,
            "quantize": quantize,
            **timing.to_dict(), "compiles": timer.compiles}
    if token_result is not None:
        data["tokens"] = token_result
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    _print(data)


def _tokens(source, deployment, weights, prompt_text, batch, input_tokens, output_tokens,
            buckets, sample, temperature, top_k, top_p, seed) -> dict:
    from trnsim.perf.serving.steps import SequenceLogits
    from trnsim.perf.serving.tokens import Sampling, generate_tokens

    model = _real_model(source, weights)
    vocab = int(model.config.vocab_size)
    ids = _prompt_ids(prompt_text, batch, input_tokens, vocab, seed)
    sampling = Sampling(sample, temperature, top_k, top_p, seed)
    out = generate_tokens(SequenceLogits(model, deployment, buckets), ids, output_tokens,
                          sampling=sampling, eos_token_id=model.config.eos_token_id,
                          pad_token_id=model.config.pad_token_id)
    return {"prompt": ids.tolist(), "generated": out[:, ids.shape[1]:].tolist(),
            "sampling": {"do_sample": sample, "temperature": temperature, "top_k": top_k,
                         "top_p": top_p, "seed": seed}}


def _print(data: dict) -> None:
    out = console()
    table = Table(box=box.SIMPLE_HEAD, title=f"trnsim generate: {data['model']} on "
                  f"{data['instance']}, TP {data['tp']}, batch {data['batch']}, "
                  f"{data['input_tokens']} in / {data['output_tokens']} out")
    table.add_column("metric")
    table.add_column("value", justify="right")
    price = data["usd_per_million_tokens"]
    for name, value in (
            (f"TTFT (prefill, bucket {data['prefill_bucket']})", f"{data['ttft_ms']:.2f} ms"),
            ("TPOT mean", f"{data['tpot_ms']:.2f} ms"),
            ("TPOT p50 / p99", f"{data['tpot_p50_ms']:.2f} / {data['tpot_p99_ms']:.2f} ms"),
            ("end-to-end", f"{data['e2e_ms']:.1f} ms"),
            ("output tokens/s (one copy)", f"{data['tokens_per_s']:,.1f}"),
            (f"output tokens/s (instance, {data['copies']} copies)",
             f"{data['instance_tokens_per_s']:,.1f}"),
            ("$ per million output tokens", "-" if price is None else f"{price:,.3f}")):
        table.add_row(name, value)
    out.print(table)
    steps = Table(box=box.SIMPLE_HEAD, title="time per output token by KV-cache bucket")
    for col in ("bucket (positions)", "steps", "ms per step"):
        steps.add_column(col, justify="right")
    for bucket, entry in sorted(data["by_bucket"].items()):
        steps.add_row(str(bucket), str(entry["steps"]), f"{entry['ms']:.3f}")
    out.print(steps)
    if "tokens" in data:
        for row, generated in enumerate(data["tokens"]["generated"]):
            out.print(f"sequence {row}: {generated}", highlight=False)
