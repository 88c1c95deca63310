"""A serving deployment put together: model, instance layout, scheduler settings, step costs.

`plan_deployment` turns the user's choices into a `SchedulerConfig` (buckets up to the longest
request, KV blocks from HBM) and the replica count; `search` tries instance layouts for the
cheapest that meets TTFT/TPOT targets at a request rate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from trnsim import hardware
from trnsim.errors import InvalidArgumentError
from trnsim.perf.serving.buckets import parse_buckets, power_of_two_buckets
from trnsim.perf.serving.models import ModelSource
from trnsim.perf.serving.scheduler import SchedulerConfig
from trnsim.perf.serving.simulate import SLO, ServingReport, kv_blocks, simulate
from trnsim.perf.serving.steps import StepCosts
from trnsim.perf.serving.workload import Request


@dataclass(frozen=True)
class Layout:
    instance: str
    tensor_parallel: int
    lnc: int | None = None
    instances: int = 1  # how many instances of this type serve

    def replicas(self) -> int:
        spec = hardware.instance(self.instance)
        per_instance = spec.logical_cores(self.lnc) // self.tensor_parallel
        if per_instance < 1:
            raise InvalidArgumentError(f"TP {self.tensor_parallel} exceeds {spec.name}'s "
                                       f"{spec.logical_cores(self.lnc)} NeuronCores")
        return per_instance * self.instances

    def price_per_hour(self) -> float | None:
        price = hardware.instance(self.instance).price_per_hour
        return None if price is None else price * self.instances


@dataclass(frozen=True)
class SchedulerChoices:
    max_num_seqs: int = 8
    max_model_len: int | None = None  # default: the longest request's bucket
    block_size: int = 32
    batch_buckets: bool = False  # powers of two up to max_num_seqs (vllm-neuron's num_seqs)
    chunked_prefill: bool = False
    max_num_batched_tokens: int = 512
    prefill_buckets: str | None = None
    decode_buckets: str | None = None
    speculation: int = 0  # draft tokens per iteration (needs the draft model's costs)
    acceptance_rate: float = 1.0
    seed: int = 0


def scheduler_config(model: ModelSource, layout: Layout, choices: SchedulerChoices,
                     requests: list[Request], weight_bytes: int) -> SchedulerConfig:
    longest = max(r.input_tokens + r.output_tokens for r in requests)
    length = choices.max_model_len or _round_up_power_of_two(longest)
    if model.max_positions and not choices.max_model_len:
        length = min(length, max(model.max_positions, longest))
    if model.max_positions and length > model.max_positions:
        raise InvalidArgumentError(f"max_model_len {length} exceeds {model.name}'s "
                                   f"max_position_embeddings ({model.max_positions})")
    blocks = kv_blocks(layout.instance, layout.tensor_parallel, layout.lnc, weight_bytes,
                       model.kv_bytes_per_token, choices.block_size)
    batch = None
    if choices.batch_buckets:
        batch = tuple(b for b in (2 ** i for i in range(16)) if b < choices.max_num_seqs)
        batch += (choices.max_num_seqs,)
    return SchedulerConfig(
        max_num_seqs=choices.max_num_seqs, prefill_buckets=parse_buckets(
            choices.prefill_buckets, length), decode_buckets=parse_buckets(
            choices.decode_buckets, length), kv_blocks=blocks, block_size=choices.block_size,
        batch_buckets=batch, chunked_prefill=choices.chunked_prefill,
        max_num_batched_tokens=choices.max_num_batched_tokens, speculation=choices.speculation,
        acceptance_rate=choices.acceptance_rate, seed=choices.seed)


def _round_up_power_of_two(tokens: int) -> int:
    """The smallest power-of-two bucket (from 128) holding `tokens`."""
    return power_of_two_buckets(1 << max(tokens - 1, 1).bit_length())[-1]


def run(model: ModelSource, layout: Layout, choices: SchedulerChoices, requests: list[Request],
        costs: StepCosts, weight_bytes: int, slo: SLO, replicas: int | None = None,
        draft: StepCosts | None = None) -> ServingReport:
    """`draft`: the draft model's step costs (with ``choices.speculation``); `weight_bytes`
    counts every model the replica holds."""
    config = scheduler_config(model, layout, choices, requests, weight_bytes)
    report = simulate(requests, config, costs, replicas=replicas or layout.replicas(), slo=slo,
                      draft=draft)
    report.extra.update(instance=layout.instance, tp=layout.tensor_parallel, lnc=layout.lnc,
                        instances=layout.instances, price_per_hour=layout.price_per_hour(),
                        max_num_seqs=config.max_num_seqs, max_model_len=config.max_model_len,
                        chunked_prefill=config.chunked_prefill,
                        speculation=config.speculation,
                        acceptance_rate=config.acceptance_rate if config.speculation else None)
    return report


def search(model: ModelSource, candidates: list[Layout], choices: SchedulerChoices,
           requests: list[Request], costs_for: Callable[[Layout], tuple[StepCosts, int]],
           slo: SLO, max_instances: int = 8) -> list[dict]:
    """For each candidate layout, the fewest instances whose p99 TTFT and p99 TPOT meet `slo`
    at the workload's rate; rows sorted by $/hour (unmet candidates last)."""
    if slo.ttft_ms is None and slo.tpot_ms is None:
        raise InvalidArgumentError("--search needs a target: --slo-ttft-ms and/or --slo-tpot-ms")
    rows = []
    for layout in candidates:
        row = {"instance": layout.instance, "tp": layout.tensor_parallel, "lnc": layout.lnc}
        try:
            costs, weight_bytes = costs_for(layout)
            for count in range(1, max_instances + 1):
                sized = replace(layout, instances=count)
                report = run(model, sized, choices, requests, costs, weight_bytes, slo)
                row.update(instances=count, replicas=sized.replicas(),
                           price_per_hour=sized.price_per_hour(),
                           ttft_p99_ms=report.ttft_ms["p99"], tpot_p99_ms=report.tpot_ms["p99"],
                           throughput_tokens_per_s=report.throughput_tokens_per_s)
                if slo.met(report.ttft_ms["p99"], report.tpot_ms["p99"] or 0.0):
                    row["meets"] = True
                    break
            else:
                row["meets"] = False
        except InvalidArgumentError as error:
            row.update(meets=False, reason=str(error))
        rows.append(row)
    rows.sort(key=lambda r: (not r["meets"], r.get("price_per_hour") or float("inf")))
    return rows
