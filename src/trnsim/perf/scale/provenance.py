"""Where each figure of a plan comes from, for `trnsim plan --json` (`sources`).

Every figure is one of three kinds: `simulated` (the instruction-level simulator ran one core's
share of a layer or the head through the training path, or a serving step), `fabric model`
(the collective simulator, `trnsim.collectives`, ran the collective with every group that
shares the links), or `derived` (arithmetic on simulated and fabric figures: the pipeline
schedule's formula, memory accounting from the model's shapes, ratios such as MFU). None is a
fitted or free-floating constant.
"""

from __future__ import annotations

from trnsim.perf.scale.comms import MAX_SIMULATED_NODES
from trnsim.perf.scale.layout import Layout, Training
from trnsim.perf.scale.model import ModelSpec
from trnsim.perf.scale.system import System

_MEASURE = ("one training step (forward, backward, {opt}) of one NeuronCore's share of {what} "
            "on the lazy torch-xla device, compiled by trnsim and timed instruction by "
            "instruction on {instance}'s NeuronCore (trnsim.perf.scale.measure, cached per shape)")


def _simulated(what: str, shape, timing, system: System, work: Training) -> str:
    text = "simulated: " + _MEASURE.format(opt=work.optimizer, what=what,
                                           instance=system.instance)
    text += f"; shape {shape.key()}"
    if timing.chunks > 1:
        text += f"; timed in {timing.chunks} equal parts, summed (the compiler refused it whole)"
    if timing.seq_split:
        text += "; composed from simulated half- and quarter-length sequences (linear + " \
                "quadratic in tokens)"
    if system.lnc_size > 1:
        text += f"; / LNC {system.lnc_size} (ideal split of one physical core's time)"
    return text


def training_sources(model: ModelSpec, system: System, layout: Layout, work: Training,
                     layer_shape, head_shape, layer, head) -> dict[str, str]:
    """One line per figure of a `TrainingPlan`."""
    fabric = "fabric model (trnsim.collectives, every group sharing the links at once)"
    tp_op = "all-gather + reduce-scatter (sequence parallel)" if layout.sp else "all-reduce"
    dp_op = "reduce-scatter of gradients + all-gather of weights (ZeRO-1)" if layout.zero1 \
        else "all-reduce of gradients"
    dp_nodes = -(-layout.tp * layout.dp // system.cores_per_node)
    dp_note = (f"; simulated on {MAX_SIMULATED_NODES} nodes' groups and the ring's remaining "
               f"steps added at the simulated per-step time ({dp_nodes} nodes)"
               if dp_nodes > MAX_SIMULATED_NODES else "")
    out = {
        "per_layer_ms.forward": _simulated("one layer", layer_shape, layer, system, work),
        "per_layer_ms.backward": _simulated("one layer", layer_shape, layer, system, work)
        + ("; + the forward again (recomputation)" if layout.recompute else ""),
        "per_layer_ms.optimizer": _simulated("one layer", layer_shape, layer, system, work),
        "per_layer_ms.tp_forward": f"{fabric}: 2 x {tp_op} of the micro-batch's activations "
                                   "per layer on NeuronLink",
        "per_layer_ms.tp_backward": f"{fabric}: 2 x {tp_op} per layer (+ the forward's with "
                                    "recomputation)",
        "breakdown_ms.forward_compute": "derived: micro-batches x layers per stage x "
                                        "per_layer_ms.forward",
        "breakdown_ms.backward_compute": "derived: micro-batches x layers per stage x "
                                         "per_layer_ms.backward",
        "breakdown_ms.head_compute": (_simulated("the patch embedding, final norm, classifier "
                                                 "and cross-entropy" if head_shape.patch else
                                                 "the embedding, final norm, LM head and "
                                                 "cross-entropy over its vocabulary shard",
                                                 head_shape, head, system, work)
                                      if head_shape is not None else "not timed"),
        "breakdown_ms.tp_collectives": "derived: micro-batches x per-layer TP collectives "
                                       f"(+ the head's two, one each way: {tp_op}), each "
                                       f"from the {fabric}",
        "breakdown_ms.ep_all_to_all": f"{fabric}: token dispatch and combine (all-to-all) over "
                                      "expert-parallel ranks",
        "breakdown_ms.pipeline_bubble": "derived: (PP - 1) / V slots of the simulated stage "
                                        "time (1F1B, GPipe; V chunks when interleaved)",
        "breakdown_ms.pp_sendrecv": f"{fabric}: send/recv of activations and gradients between "
                                    "neighbouring stages, (M + bubble slots) x 2",
        "breakdown_ms.dp_reduction_exposed": f"{fabric}: {dp_op} over the data-parallel "
                                             f"ranks on EFA{dp_note}; the part not hidden",
        "breakdown_ms.dp_reduction_overlapped": "derived: the part of the DP reduction hidden "
                                                "under the backward (layout's overlap x "
                                                "backward time)",
        "breakdown_ms.optimizer": "derived: layers per stage x per_layer_ms.optimizer + the "
                                  "head's (simulated)" + ("; / DP (ZeRO-1 shards the state)"
                                                          if layout.zero1 else ""),
        "step_ms": "derived: the sum of breakdown_ms less the overlapped DP reduction",
        "sequences_per_s": "derived: global batch / step_ms",
        "mfu": f"derived: {model.name}'s FLOPs per token x tokens/s / (cores x the catalog's "
               "dense bf16 peak per core)",
        "memory": "derived: weights, gradients, optimizer state and activations counted from "
                  "the model's shapes and the layout (trnsim.perf.scale.memory)",
    }
    return out


def inference_sources(tp: int, system: System) -> dict[str, str]:
    """One line per figure of an `InferencePlan`."""
    step = (f"simulated: the serving path's steps (trnsim.perf.serving.StepTimer) of the "
            f"model compiled at TP{tp} on {system.instance}, whole models of 1 and 2 layers "
            "run on the instruction-level simulator with their collectives, composed to the "
            "model's layers as t(1) + (L - 1)(t(2) - t(1)), cached per (phase, batch, bucket)")
    return {
        "ttft_ms": step + "; the prompt's context-encoding bucket",
        "tpot_ms": step + "; the mean of the token-generation steps at each step's KV bucket",
        "e2e_ms": "derived: ttft_ms + every generation step",
        "tokens_per_s": "derived: batch x output tokens / e2e x replicas",
        "memory": "derived: weights and KV cache counted from the model's shapes "
                  "(trnsim.perf.scale.memory)",
    }
