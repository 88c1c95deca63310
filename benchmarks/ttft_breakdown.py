"""Where a simulated time to first token goes: host, fixed device work, and each layer's
compute and collective segments. Prints JSON.

TTFT is composed as `trnsim validate` composes it (`StepTimer(compose_layers=True)`): one
prefill of the prompt's bucket with one layer and with two, t(L) = t(1) + (L - 1) (t(2) - t(1)),
plus the host's share of the call as transformers-neuronx makes it (`serving.host_io`:
dispatch, the host-embedded hidden state and position ids to every rank, each rank's logits
shard back). The second layer of the two-layer run is split at its collectives, in the order
the slowest rank ran them: the compute before each collective (e.g. norm, Q/K/V, RoPE,
attention, output projection), the collective, and so on. The fixed part (embedding, final
norm, LM head, logits gather) is t(1) - one layer.

Run (the two calibration rows of issue 23):
  PYTHONPATH=src python benchmarks/ttft_breakdown.py llama-3-8b trn1.32xlarge --tp 32 \
      --quantize int8
  PYTHONPATH=src python benchmarks/ttft_breakdown.py llama-2-7b inf2.48xlarge --tp 24
"""

from __future__ import annotations

import argparse
import json


def prefill_report(source, deployment, layers: int, prompt: int):
    """The report of the prefill of `prompt` tokens with the model's first `layers`."""
    from trnsim.perf.serving.steps import _with_layers, compile_step

    compiled = compile_step(_with_layers(source.config, layers), source.config, deployment,
                            "prefill", 1, prompt)
    return compiled.report()


def layer_segments(report, layer_ms: float) -> list[dict]:
    """The last layer of `report` (lasting `layer_ms`) split at its collectives (us)."""
    kernels = sorted(report.kernels, key=lambda k: k.end_ns)
    collectives = [k for k in kernels if k.op == "k.collective" and "reduce" in k.label]
    end = collectives[-1].end_ns
    clock = end - layer_ms * 1e6
    segments = []
    for k in collectives:
        if k.end_ns <= clock + 1.0:  # the previous layer's (1 ns for rounding)
            continue
        segments.append({"part": "compute", "us": (k.start_ns - clock) / 1e3})
        segments.append({"part": k.label, "us": (k.end_ns - k.start_ns) / 1e3})
        clock = k.end_ns
    return segments


def main() -> None:
    from trnsim import hardware
    from trnsim.perf.serving.host_io import step_host_time
    from trnsim.perf.serving.models import resolve_model
    from trnsim.perf.serving.steps import Deployment, _layer_count, host_ms

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("instance")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--quantize", default=None)
    parser.add_argument("--prompt", type=int, default=128, help="the prompt's bucket")
    args = parser.parse_args()
    source = resolve_model(args.model)
    deployment = Deployment(hardware.instance(args.instance).name, args.tp, dtype=args.dtype,
                            quantize=args.quantize)
    one = prefill_report(source, deployment, 1, args.prompt)
    two = prefill_report(source, deployment, 2, args.prompt)
    host = step_host_time(source.config, deployment, "prefill", 1, args.prompt)  # its parts
    layer_ms = two.latency_ms - one.latency_ms
    layers = _layer_count(source.config)
    segments = layer_segments(two, layer_ms)
    print(json.dumps({
        "model": source.name, "instance": deployment.instance, "tp": args.tp,
        "prompt_bucket": args.prompt, "layers": layers,
        "ttft_ms": host_ms(source.config, deployment, "prefill", 1, args.prompt)
        + one.latency_ms + (layers - 1) * layer_ms,
        "host": None if host is None else host.to_dict(),
        "fixed_device_us": (one.latency_ms - layer_ms) * 1e3,
        "layer_us": layer_ms * 1e3, "layer_segments_us": segments,
    }, indent=1))


if __name__ == "__main__":
    main()
