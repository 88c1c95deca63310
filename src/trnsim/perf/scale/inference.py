"""An inference plan: TTFT, TPOT and tokens/s of a deployment from the serving path's simulated
steps (`trnsim.perf.serving`: context encoding and token generation per bucket, composed from
simulated one- and two-layer models), with the KV cache's HBM and the replicas a system holds."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from trnsim.errors import InvalidArgumentError
from trnsim.perf.scale.memory import inference_memory
from trnsim.perf.scale.model import ModelSpec
from trnsim.perf.scale.provenance import inference_sources
from trnsim.perf.scale.system import System


@dataclass
class InferencePlan:
    model: str
    system: str
    tp: int
    batch: int
    prompt: int
    output: int
    ttft_ms: float
    tpot_ms: float
    e2e_ms: float
    tokens_per_s: float  # whole system: every replica generating
    replicas: int
    memory: dict
    fits: bool
    usd_per_million_tokens: float | None
    sources: dict[str, str] = field(default_factory=dict)  # figure -> where it came from

    def to_dict(self) -> dict:
        return asdict(self)


def plan_inference(model: ModelSpec, system: System, tp: int, prompt: int, output: int,
                   batch: int = 1, costs=None, model_name: str | None = None,
                   progress=None) -> InferencePlan:
    """`costs`: a `StepCosts` (prefill_ms, decode_ms); default the serving path's simulated
    steps of `model_name` (a zoo causal LM or config.json) at TP `tp` on the system's instance."""
    from trnsim.perf.serving.buckets import power_of_two_buckets
    from trnsim.perf.serving.generation import time_generation

    if system.cores_per_node % tp:
        raise InvalidArgumentError(f"TP{tp} does not divide {system.cores_per_node} "
                                   f"NeuronCores per {system.instance}")
    if model.heads % tp:
        raise InvalidArgumentError(f"TP{tp} does not divide {model.name}'s {model.heads} heads")
    positions = prompt + output
    memory = inference_memory(model, tp, batch, positions, system.hbm_bytes_per_core)
    costs_simulated = costs is None
    if costs is None:
        from trnsim.perf.serving.models import resolve_model as serving_model
        from trnsim.perf.serving.steps import Deployment, StepTimer

        source = serving_model(model_name or model.name)
        costs = StepTimer(source.name, source.build, source.config,
                          Deployment(system.instance, tp, system.lnc), compose_layers=True,
                          progress=progress)
    largest = max(128, 1 << (positions - 1).bit_length())
    timing = time_generation(costs, instance=system.instance, tensor_parallel=tp,
                             lnc=system.lnc, batch=batch, input_tokens=prompt,
                             output_tokens=output, prefill_buckets=power_of_two_buckets(largest),
                             decode_buckets=power_of_two_buckets(largest))
    replicas = system.cores // tp
    per_replica = timing.tokens_per_s
    price = system.price_per_hour
    usd = None if price is None else price / 3600 / (per_replica * replicas) * 1e6
    return InferencePlan(model.name, system.label(), tp, batch, prompt, output, timing.ttft_ms,
                         timing.tpot_ms, timing.e2e_ms, per_replica * replicas, replicas,
                         memory.to_dict(), memory.fits, usd,
                         inference_sources(tp, system) if costs_simulated else {})
