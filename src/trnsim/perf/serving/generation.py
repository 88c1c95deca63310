"""`trnsim generate`'s timing: one batch of prompts through prefill and every decode step.

The first token comes out of the context-encoding graph at the prompt's bucket (TTFT). Each
further token is one token-generation step whose KV cache holds the prompt and the tokens so
far; Neuron pads the cache to the smallest compiled bucket, so a step costs the simulated time of
that bucket's graph and the time per output token grows in steps as the cache crosses buckets.
No step is "one step times N": each is looked up at its own bucket.

Metrics follow NxD Inference's benchmarking guide (llm-inference-benchmarking-guide.rst): TTFT
from prompt to first token, TPOT the mean gap between later tokens ((E2E - TTFT) / (output - 1)),
E2E = TTFT + the decode steps, output-token throughput over the batch. Dollars per million
output tokens price the whole instance (on-demand $/hour), running as many copies of the model
as its NeuronCores hold at this tensor-parallel degree.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from trnsim import hardware
from trnsim.errors import InvalidArgumentError
from trnsim.perf.serving.buckets import bucket_for
from trnsim.perf.serving.steps import StepCosts


@dataclass
class GenerationTiming:
    batch: int
    input_tokens: int
    output_tokens: int
    prefill_bucket: int
    ttft_ms: float
    step_ms: list[float]  # one per token after the first
    step_buckets: list[int]
    copies: int
    price_per_hour: float | None
    e2e_ms: float = 0.0
    tpot_ms: float = 0.0
    tokens_per_s: float = 0.0  # output tokens, one copy
    instance_tokens_per_s: float = 0.0  # every copy the instance holds
    usd_per_million_tokens: float | None = None
    by_bucket: dict = field(default_factory=dict)  # bucket -> {"steps", "ms"}

    def percentile_tpot_ms(self, q: float) -> float:
        """Percentile of the per-step times (llmperf's inter-token latencies)."""
        import numpy as np

        return float(np.percentile(self.step_ms, q)) if self.step_ms else 0.0

    def to_dict(self, *, steps: bool = False) -> dict:
        data = asdict(self)
        if not steps:
            data.pop("step_ms")
            data.pop("step_buckets")
        data["tpot_p50_ms"] = self.percentile_tpot_ms(50)
        data["tpot_p99_ms"] = self.percentile_tpot_ms(99)
        return data


def time_generation(costs: StepCosts, *, instance: str, tensor_parallel: int, lnc: int | None,
                    batch: int, input_tokens: int, output_tokens: int,
                    prefill_buckets: tuple[int, ...], decode_buckets: tuple[int, ...]
                    ) -> GenerationTiming:
    """Time `batch` prompts of `input_tokens` generating `output_tokens` each."""
    if batch < 1 or input_tokens < 1 or output_tokens < 1:
        raise InvalidArgumentError(f"batch, input and output tokens must be >= 1; got batch "
                                   f"{batch}, input {input_tokens}, output {output_tokens}")
    spec = hardware.instance(instance)
    copies = spec.logical_cores(lnc) // tensor_parallel
    if copies < 1:
        raise InvalidArgumentError(f"tensor parallel degree {tensor_parallel} exceeds "
                                   f"{spec.name}'s {spec.logical_cores(lnc)} NeuronCores")
    prefill_bucket = bucket_for(input_tokens, prefill_buckets, "prompt")
    ttft = costs.prefill_ms(batch, prefill_bucket)
    steps, buckets = [], []
    for produced in range(1, output_tokens):
        positions = input_tokens + produced  # cached tokens plus the one being written
        bucket = bucket_for(positions, decode_buckets, "prompt + generated")
        buckets.append(bucket)
        steps.append(costs.decode_ms(batch, bucket))
    timing = GenerationTiming(batch, input_tokens, output_tokens, prefill_bucket, ttft, steps,
                              buckets, copies, spec.price_per_hour)
    timing.e2e_ms = ttft + sum(steps)
    timing.tpot_ms = sum(steps) / len(steps) if steps else 0.0
    timing.tokens_per_s = batch * output_tokens / (timing.e2e_ms / 1e3)
    timing.instance_tokens_per_s = timing.tokens_per_s * copies
    if spec.price_per_hour is not None:
        timing.usd_per_million_tokens = spec.price_per_hour / 3600 / timing.instance_tokens_per_s * 1e6
    for bucket, ms in zip(buckets, steps, strict=True):
        entry = timing.by_bucket.setdefault(bucket, {"steps": 0, "ms": ms})
        entry["steps"] += 1
    return timing
