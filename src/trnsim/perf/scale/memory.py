"""HBM per NeuronCore of a training layout: weights, gradients, optimizer state, activations.

The busiest core is counted: a pipeline stage holding the most layers plus the embedding and
LM head (first and last stages hold them; with one stage, the one core holds both).

Activations follow Korthikanti et al. ("Reducing Activation Recomputation in Large Transformer
Models", the formula NeuronX Distributed documents in activation_memory_reduction.rst), bytes
per layer for s tokens of b sequences, hidden h, a heads, TP degree t, 16-bit activations:
  no SP:      s*b*h*(10 + 24/t + 5*a*s/(h*t))
  SP:         s*b*h*(34 + 5*a*s/h) / t
  full recompute: 2*s*b*h (the layer's input; /t with SP)
scaled by bytes/2 for fp32. A 1F1B stage keeps min(PP, micro-batches) micro-batches in
flight (stage 0: PP of them); with interleaving, PP x (1 + (PP-1)/(PP*V)) (Narayanan et al.).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from trnsim.perf.scale.layout import ACTIVATION_BYTES, PRECISIONS, Layout, Training
from trnsim.perf.scale.model import ModelSpec


@dataclass(frozen=True)
class Memory:
    weights_bytes: int
    gradients_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    kv_cache_bytes: int
    capacity_bytes: int

    @property
    def total_bytes(self) -> int:
        return (self.weights_bytes + self.gradients_bytes + self.optimizer_bytes
                + self.activations_bytes + self.kv_cache_bytes)

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes

    def to_dict(self) -> dict:
        return dict(asdict(self), total_bytes=self.total_bytes, fits=self.fits)


def layers_per_stage(model: ModelSpec, layout: Layout) -> int:
    return -(-model.layers // layout.pp)


def stage_params(model: ModelSpec, layout: Layout) -> int:
    """Parameters one core of the busiest stage holds (TP- and EP-sharded)."""
    experts_here = max(1, model.experts // layout.ep)
    dense = model.attention_params + model.norm_params * layout.tp  # norms are replicated
    per_layer = (dense + experts_here * model.mlp_params) // layout.tp
    ends = model.embedding_params if layout.pp == 1 else model.vocab * model.hidden
    return layers_per_stage(model, layout) * per_layer + ends // layout.tp


def activation_bytes_per_layer(model: ModelSpec, layout: Layout, work: Training) -> float:
    s, b, h, a, t = work.seq, work.micro_batch, model.hidden, model.heads, layout.tp
    if layout.recompute:
        per = 2.0 * s * b * h / (t if layout.sp else 1)
    elif layout.sp:
        per = s * b * h * (34 + 5 * a * s / h) / t
    else:
        per = s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
    return per * ACTIVATION_BYTES[work.precision] / 2


def in_flight_microbatches(layout: Layout, microbatches: int) -> float:
    if layout.pp == 1:
        return 1.0
    if layout.schedule == "gpipe":
        return float(microbatches)
    depth = float(min(layout.pp, microbatches))
    if layout.schedule == "interleaved" and layout.virtual_stages > 1:
        depth *= 1 + (layout.pp - 1) / (layout.pp * layout.virtual_stages)
    return depth


def training_memory(model: ModelSpec, layout: Layout, work: Training, microbatches: int,
                    capacity_bytes: int) -> Memory:
    w, g, o = PRECISIONS[work.precision]
    if work.optimizer == "sgd":
        o = o // 2  # one momentum buffer instead of Adam's two moments
    params = stage_params(model, layout)
    optimizer = params * o // (layout.dp if layout.zero1 and layout.dp else 1)
    acts = activation_bytes_per_layer(model, layout, work) * layers_per_stage(model, layout) \
        * in_flight_microbatches(layout, microbatches)
    return Memory(params * w, params * g, int(optimizer), int(acts), 0, capacity_bytes)


def kv_cache_bytes(model: ModelSpec, tp: int, batch: int, positions: int) -> int:
    """K and V of every layer for `batch` sequences of `positions` tokens, bf16, one TP rank
    (KV heads split over TP, replicated when TP exceeds them)."""
    kv_here = max(1, model.kv_heads // tp)
    return 2 * model.layers * kv_here * model.head_dim * positions * batch * 2


def inference_memory(model: ModelSpec, tp: int, batch: int, positions: int,
                     capacity_bytes: int) -> Memory:
    layout = Layout(tp=tp)
    return Memory(stage_params(model, layout) * 2, 0, 0, 0,
                  kv_cache_bytes(model, tp, batch, positions), capacity_bytes)
