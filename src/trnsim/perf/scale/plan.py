"""A training plan: one core's simulated layer timings composed into a cluster's step.

Per micro-batch, the busiest pipeline stage runs its layers' forward and backward (simulated,
`timing`), each layer's tensor-parallel collectives (two in the forward, two in the backward:
after the row-parallel attention output and MLP down projections, and their conjugates;
all-gather + reduce-scatter with sequence parallelism), the embedding and LM head with their
collectives, and sends activations and gradients to its neighbours. A step of M micro-batches
on P stages (1F1B or GPipe) takes (M + P - 1) slots (interleaving V chunks: (P-1)/V bubble
slots); then the gradients are reduced over data parallelism (all-reduce, or ZeRO-1's
reduce-scatter + all-gather of the updated weights), exposed after the backward unless the
layout allows overlap, then the optimizer updates the stage's (ZeRO-1: its shard of the)
parameters. Every figure is either simulated or derived from a simulated one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

from trnsim.errors import InvalidArgumentError
from trnsim.perf.scale import comms
from trnsim.perf.scale.layer import HeadShape, LayerShape
from trnsim.perf.scale.layout import PRECISIONS, Layout, Training
from trnsim.perf.scale.memory import Memory, layers_per_stage, stage_params, training_memory
from trnsim.perf.scale.model import ModelSpec
from trnsim.perf.scale.provenance import training_sources
from trnsim.perf.scale.system import System
from trnsim.perf.scale.timing import Timer, Timing

GRAD_DTYPES = {2: "bfloat16", 4: "float32"}


@dataclass
class TrainingPlan:
    model: str
    system: str
    layout: str
    seq: int
    global_batch: int
    micro_batch: int
    microbatches: int  # per step per data-parallel rank
    precision: str
    optimizer: str
    schedule: str  # pipeline schedule ("1f1b", "gpipe", "interleaved")
    per_layer_ms: dict[str, float]  # one layer, one micro-batch, one core
    breakdown_ms: dict[str, float]  # one step
    step_ms: float
    sequences_per_s: float
    tokens_per_s: float
    mfu: float
    memory: dict
    fits: bool
    cores: int
    price_per_hour: float | None
    notes: list[str] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)  # figure -> where it came from

    def time_to_train(self, tokens: float) -> dict:
        seconds = tokens / self.tokens_per_s
        cost = None if self.price_per_hour is None else seconds / 3600 * self.price_per_hour
        return {"tokens": tokens, "days": seconds / 86400, "cost_usd": cost}

    @property
    def tokens_per_dollar(self) -> float | None:
        if not self.price_per_hour:
            return None
        return self.tokens_per_s * 3600 / self.price_per_hour

    def to_dict(self) -> dict:
        return dict(asdict(self), tokens_per_dollar=self.tokens_per_dollar)


def resolve_layout(model: ModelSpec, system: System, layout: Layout, work: Training) -> Layout:
    """Fill in DP and check that the layout divides the model, the cores and the batch."""
    used = layout.tp * layout.pp
    if system.cores % used:
        raise InvalidArgumentError(f"{layout.label()}: TP x PP = {used} does not divide the "
                                   f"{system.cores} NeuronCores of {system.label()}")
    dp = layout.dp or system.cores // used
    if used * dp != system.cores:
        raise InvalidArgumentError(f"{layout.label()}: TP x PP x DP = {used * dp}, but "
                                   f"{system.label()} has {system.cores} NeuronCores")
    if model.heads % layout.tp:
        raise InvalidArgumentError(f"TP{layout.tp} does not divide {model.name}'s "
                                   f"{model.heads} attention heads")
    if layout.pp > model.layers:
        raise InvalidArgumentError(f"PP{layout.pp} exceeds {model.name}'s {model.layers} layers")
    if layout.ep > 1 and (model.experts % layout.ep or dp % layout.ep):
        raise InvalidArgumentError(f"EP{layout.ep} must divide the experts ({model.experts}) "
                                   f"and DP ({dp})")
    if layout.sp and layout.tp == 1:
        layout = replace(layout, sp=False)
    if layout.sp and work.seq % layout.tp:
        raise InvalidArgumentError(f"{layout.label()}: sequence parallelism splits the "
                                   f"{work.seq} tokens over TP{layout.tp}, which does not "
                                   f"divide them")
    return replace(layout, dp=dp, lnc=system.lnc)


def microbatches_of(layout: Layout, work: Training) -> int:
    per_rank = work.global_batch / (layout.dp * work.micro_batch)
    if per_rank != int(per_rank) or per_rank < 1:
        raise InvalidArgumentError(f"global batch {work.global_batch} is not a whole number of "
                                   f"micro-batches of {work.micro_batch} over DP{layout.dp}")
    if layout.microbatches and layout.microbatches != per_rank:
        raise InvalidArgumentError(f"M{layout.microbatches} disagrees with global batch "
                                   f"{work.global_batch} / (DP{layout.dp} x micro-batch "
                                   f"{work.micro_batch}) = {int(per_rank)}")
    return int(per_rank)


def layer_shape(model: ModelSpec, layout: Layout, work: Training) -> LayerShape:
    tp = layout.tp
    kv = model.kv_heads // tp if model.kv_heads % tp == 0 and model.kv_heads >= tp else 1
    # a token visits `experts_per_token` experts; with EP the experts' tokens are balanced
    ffn = -(-model.ffn * model.experts_per_token // tp)
    return LayerShape(model.hidden, model.heads // tp, kv, model.head_dim, ffn, model.gated,
                      model.norm, model.causal, model.rotary, work.micro_batch, work.seq,
                      sp=tp if layout.sp else 1)


def head_shape(model: ModelSpec, layout: Layout, work: Training) -> HeadShape | None:
    if model.patch:  # vision: patch embedding and classifier, replicated (both are small)
        return HeadShape(model.hidden, model.labels, model.norm, work.micro_batch, work.seq,
                         patch=model.patch, channels=model.channels)
    if not model.vocab:
        return None
    return HeadShape(model.hidden, -(-model.vocab // layout.tp), model.norm, work.micro_batch,
                     work.seq, sp=layout.tp if layout.sp else 1)


def shapes_for(model: ModelSpec, layout: Layout, work: Training) -> list[tuple[str, object]]:
    items: list[tuple[str, object]] = [("layer", layer_shape(model, layout, work))]
    head = head_shape(model, layout, work)
    if head is not None:
        items.append(("head", head))
    return items


def plan_training(model: ModelSpec, system: System, layout: Layout, work: Training,
                  timer: Timer | None = None,
                  progress: Callable[[str], None] | None = None) -> TrainingPlan:
    layout = resolve_layout(model, system, layout, work)
    m = microbatches_of(layout, work)
    memory = training_memory(model, layout, work, m, system.hbm_bytes_per_core)
    timer = timer or Timer(system.instance, work.precision, work.optimizer, progress)
    timer.ensure(shapes_for(model, layout, work))
    layer = timer.timing("layer", layer_shape(model, layout, work))
    head_s = head_shape(model, layout, work)
    head = timer.timing("head", head_s) if head_s is not None else Timing(0.0, 0.0, 0.0)
    return compose(model, system, layout, work, m, memory, layer, head)


def _lnc_split(system: System) -> float:
    """A logical core of LNC physical cores runs one program over all of them: the simulated
    one-physical-core time is divided evenly (an ideal split, stated in the plan's notes)."""
    return float(system.lnc_size)


def compose(model: ModelSpec, system: System, layout: Layout, work: Training, m: int,
            memory: Memory, layer: Timing, head: Timing) -> TrainingPlan:
    ms = 1e-6
    split = _lnc_split(system)
    place = comms.Placement(system.instance, system.cores_per_node, system.lnc_size,
                            layout.tp, layout.dp, layout.pp)
    act_bytes = work.micro_batch * work.seq * model.hidden * 2
    if layout.sp:
        tp_one = comms.tp_collective_ns(place, "all_gather", act_bytes) + \
            comms.tp_collective_ns(place, "reduce_scatter", act_bytes)
    else:
        tp_one = comms.tp_collective_ns(place, "all_reduce", act_bytes)
    tp_layer_fwd = tp_one * 2
    tp_layer_bwd = tp_one * 2 + (tp_layer_fwd if layout.recompute else 0.0)
    moe = 0.0
    if model.experts > 1 and layout.ep > 1:  # token dispatch and combine, forward and backward
        ep_place = comms.Placement(system.instance, system.cores_per_node, system.lnc_size,
                                   layout.tp, layout.ep, 1)
        moe = 2 * comms.dp_collective_ns(ep_place, "all_to_all",
                                         act_bytes * model.experts_per_token, "bfloat16")
    lps = layers_per_stage(model, layout)
    fwd_layer = layer.forward_ns / split
    bwd_layer = (layer.backward_ns + (layer.forward_ns if layout.recompute else 0.0)) / split
    # a vocabulary-parallel head's collectives, one the layer's way in each direction (the
    # embedding's partial rows reduced, the LM head's input gradient reduced; with SP reduce-
    # scattered, and the norm's output and the embedding's gradient all-gathered); a vision
    # head is replicated (no collective)
    head_tp = 2 * tp_one if head.step_ns and not model.patch else 0.0
    t_f = lps * (fwd_layer + tp_layer_fwd + moe) + head.forward_ns / split + head_tp / 2
    t_b = lps * (bwd_layer + tp_layer_bwd + moe) + head.backward_ns / split + head_tp / 2
    p2p = comms.pp_sendrecv_ns(place, act_bytes // (layout.tp if layout.sp else 1))
    bubble_slots = (layout.pp - 1) / (layout.virtual_stages if layout.schedule == "interleaved"
                                      else 1)
    compute = m * (t_f + t_b)
    bubble = bubble_slots * (t_f + t_b)
    sendrecv = (m + bubble_slots) * 2 * p2p if layout.pp > 1 else 0.0
    w_bytes, g_bytes, _ = PRECISIONS[work.precision]
    grads = stage_params(model, layout) * g_bytes
    grad_dtype = GRAD_DTYPES[g_bytes]
    if layout.zero1:
        dp_ns = comms.dp_collective_ns(place, "reduce_scatter", grads, grad_dtype) + \
            comms.dp_collective_ns(place, "all_gather", stage_params(model, layout) * w_bytes,
                                   GRAD_DTYPES[w_bytes])
    else:
        dp_ns = comms.dp_collective_ns(place, "all_reduce", grads, grad_dtype)
    hidden = min(dp_ns, layout.dp_overlap * t_b)
    optimizer = (lps * layer.optimizer_ns + head.optimizer_ns) / split / \
        (layout.dp if layout.zero1 else 1)
    breakdown = {
        "forward_compute": m * lps * fwd_layer * ms,
        "backward_compute": m * lps * bwd_layer * ms,
        "head_compute": m * (head.forward_ns + head.backward_ns) / split * ms,
        "tp_collectives": m * (lps * (tp_layer_fwd + tp_layer_bwd) + head_tp) * ms,
        "ep_all_to_all": m * lps * 2 * moe * ms,
        "pipeline_bubble": bubble * ms,
        "pp_sendrecv": sendrecv * ms,
        "dp_reduction_exposed": (dp_ns - hidden) * ms,
        "dp_reduction_overlapped": hidden * ms,
        "optimizer": optimizer * ms,
    }
    step_ns = compute + bubble + sendrecv + dp_ns - hidden + optimizer
    seqs = work.global_batch / (step_ns * 1e-9)
    tokens = seqs * work.seq
    mfu = model.flops_per_token(work.seq) * tokens / (system.cores *
                                                      system.peak_flops_per_core("bf16"))
    notes = []
    if layer.chunks > 1:
        notes.append(f"the layer's micro-batch was simulated in {layer.chunks} chunks (the "
                     "compiler could not lower it at once): an upper bound")
    if layer.seq_split or head.seq_split:
        notes.append(f"seq {work.seq} was too long for the simulated compiler at once: the "
                     "layer is composed from simulated halves and quarters of the sequence "
                     "(linear + quadratic in tokens)")
    if system.lnc_size > 1:
        notes.append(f"LNC={system.lnc_size}: one physical core's simulated time / "
                     f"{system.lnc_size} (ideal split)")
    if work.optimizer == "lamb":
        notes.append("LAMB timed as AdamW (its per-tensor trust ratio is not simulated)")
    per_layer = {"forward": fwd_layer * ms, "backward": bwd_layer * ms,
                 "optimizer": layer.optimizer_ns / split * ms,
                 "tp_forward": tp_layer_fwd * ms, "tp_backward": tp_layer_bwd * ms}
    sources = training_sources(model, system, layout, work, layer_shape(model, layout, work),
                               head_shape(model, layout, work), layer, head)
    return TrainingPlan(
        model.name, system.label(), layout.label(), work.seq, work.global_batch,
        work.micro_batch, m, work.precision, work.optimizer,
        layout.schedule if layout.pp > 1 else "-", per_layer, breakdown,
        step_ns * ms, seqs, tokens, mfu, memory.to_dict(), memory.fits, system.cores,
        system.price_per_hour, notes, sources)
