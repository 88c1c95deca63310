"""Composition of a step: the pipeline bubble, ZeRO-1 sharding, errors for bad layouts."""

import pytest

from trnsim.errors import InvalidArgumentError
from trnsim.perf.scale.layout import Layout, Training, parse_layout
from trnsim.perf.scale.memory import stage_params, training_memory
from trnsim.perf.scale.model import ModelSpec
from trnsim.perf.scale.plan import compose, plan_training, resolve_layout
from trnsim.perf.scale.system import parse_system
from trnsim.perf.scale.timing import Timing

MODEL = ModelSpec("tiny", layers=8, hidden=64, heads=4, kv_heads=4, head_dim=16, ffn=128,
                  vocab=0)
SYSTEM = parse_system("trn1.32xlarge")
LAYER = Timing(forward_ns=1e6, backward_ns=2e6, optimizer_ns=4e5)
NO_HEAD = Timing(0.0, 0.0, 0.0)


def _plan(text: str, global_batch: int = 64, micro_batch: int = 1):
    work = Training(32, global_batch, micro_batch, "bf16")
    layout = resolve_layout(MODEL, SYSTEM, parse_layout(text), work)
    m = global_batch // (layout.dp * micro_batch)
    memory = training_memory(MODEL, layout, work, m, SYSTEM.hbm_bytes_per_core)
    return compose(MODEL, SYSTEM, layout, work, m, memory, LAYER, NO_HEAD), m


def test_pipeline_bubble_is_p_minus_1_slots_and_interleaving_divides_it():
    plan, m = _plan("TP1 PP4")  # DP8, 2 layers per stage, 8 micro-batches per DP rank
    slot_ms = 2 * (1.0 + 2.0)  # layers per stage x (forward + backward), no TP
    assert m == 8
    assert plan.breakdown_ms["forward_compute"] + plan.breakdown_ms["backward_compute"] == \
        pytest.approx(m * slot_ms)
    assert plan.breakdown_ms["pipeline_bubble"] == pytest.approx(3 * slot_ms)
    interleaved, _ = _plan("TP1 PP4 V2")
    assert interleaved.breakdown_ms["pipeline_bubble"] == pytest.approx(3 * slot_ms / 2)
    assert plan.breakdown_ms["pp_sendrecv"] > 0
    flat, _ = _plan("TP1 PP1")
    assert flat.breakdown_ms["pipeline_bubble"] == 0 and flat.breakdown_ms["pp_sendrecv"] == 0


def test_zero1_shards_the_optimizer_and_reduce_scatters():
    plain, _ = _plan("TP1 PP1")
    zero, _ = _plan("TP1 PP1 ZeRO-1")
    assert zero.breakdown_ms["optimizer"] == pytest.approx(plain.breakdown_ms["optimizer"] / 32)
    assert zero.memory["optimizer_bytes"] == plain.memory["optimizer_bytes"] // 32
    assert zero.breakdown_ms["dp_reduction_exposed"] > 0
    assert zero.breakdown_ms["dp_reduction_exposed"] != plain.breakdown_ms["dp_reduction_exposed"]
    params = stage_params(MODEL, Layout(dp=32))
    assert plain.memory["weights_bytes"] == 2 * params


def test_recompute_adds_a_forward_and_overlap_hides_the_reduction():
    plain, _ = _plan("TP2 PP1")
    rc, _ = _plan("TP2 PP1 RC")
    assert rc.per_layer_ms["backward"] == pytest.approx(plain.per_layer_ms["backward"] + 1.0)
    assert rc.per_layer_ms["tp_backward"] > plain.per_layer_ms["tp_backward"]
    hidden, _ = _plan("TP2 PP1 OVERLAP")
    assert hidden.breakdown_ms["dp_reduction_overlapped"] > 0
    assert hidden.step_ms < plain.step_ms


def test_throughput_and_mfu_follow_the_step():
    plan, _ = _plan("TP1 PP1", global_batch=64)
    assert plan.sequences_per_s == pytest.approx(64 / (plan.step_ms * 1e-3))
    assert plan.tokens_per_s == pytest.approx(32 * plan.sequences_per_s)
    expected = MODEL.flops_per_token(32) * plan.tokens_per_s / (32 * 95e12)
    assert plan.mfu == pytest.approx(expected)
    assert plan.time_to_train(1e9)["cost_usd"] == pytest.approx(
        1e9 / plan.tokens_per_s / 3600 * 21.50)


def test_bad_layouts_are_named_errors():
    work = Training(32, 64, 1)
    with pytest.raises(InvalidArgumentError, match="does not divide"):
        resolve_layout(MODEL, SYSTEM, parse_layout("TP3"), work)
    with pytest.raises(InvalidArgumentError, match="attention heads"):
        resolve_layout(MODEL, SYSTEM, parse_layout("TP8"), work)
    with pytest.raises(InvalidArgumentError, match="NeuronCores"):
        resolve_layout(MODEL, SYSTEM, parse_layout("TP2 DP4"), work)
    with pytest.raises(InvalidArgumentError, match="micro-batches"):
        plan_training(MODEL, SYSTEM, parse_layout("TP1"), Training(32, 48, 1))


class _Steps:
    """Step costs standing in for the serving path's simulated ones."""

    def prefill_ms(self, batch: int, length: int) -> float:
        return 0.01 * batch * length

    def decode_ms(self, batch: int, positions: int) -> float:
        return 1.0 + 0.001 * batch * positions


def test_inference_plan_composes_ttft_tpot_and_replicas():
    from trnsim.perf.scale.inference import plan_inference
    from trnsim.perf.scale.memory import kv_cache_bytes

    model = ModelSpec("tiny-lm", layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn=128,
                      vocab=256)
    plan = plan_inference(model, SYSTEM, tp=2, prompt=100, output=4, batch=2, costs=_Steps())
    assert plan.ttft_ms == pytest.approx(0.01 * 2 * 128)  # the prompt's 128 bucket
    assert plan.tpot_ms == pytest.approx(1.0 + 0.001 * 2 * 128)
    assert plan.replicas == 16
    per_replica = 2 * 4 / ((plan.ttft_ms + 3 * plan.tpot_ms) / 1e3)
    assert plan.tokens_per_s == pytest.approx(16 * per_replica)
    # K and V of 2 layers, one KV head per TP rank, 104 positions, 2 sequences, bf16
    assert plan.memory["kv_cache_bytes"] == kv_cache_bytes(model, 2, 2, 104) == \
        2 * 2 * 1 * 16 * 104 * 2 * 2


def test_every_figure_says_where_it_came_from():
    """--json's `sources`: each per-layer and step figure is simulated, from the fabric model,
    or derived from those (never a constant), and names the shape it simulated."""
    plan, _ = _plan("TP2 PP2 ZeRO-1 RC")
    sources = plan.to_dict()["sources"]
    figures = [f"per_layer_ms.{k}" for k in plan.per_layer_ms] + \
        [f"breakdown_ms.{k}" for k in plan.breakdown_ms] + ["step_ms", "mfu", "memory"]
    for figure in figures:
        assert sources[figure].split(":")[0] in ("simulated", "fabric model (trnsim.collectives,"
                                                 " every group sharing the links at once)",
                                                 "derived", "not timed"), figure
    assert "h64-q2-kv2-d16-f64" in sources["per_layer_ms.forward"]
    assert "recomputation" in sources["per_layer_ms.backward"]
    assert "ZeRO-1" in sources["breakdown_ms.dp_reduction_exposed"]


def test_sequence_parallelism_shards_the_layers_tokens_over_tp():
    from trnsim.perf.scale.plan import layer_shape

    model = ModelSpec("m", layers=2, hidden=64, heads=8, kv_heads=8, head_dim=8, ffn=128,
                      vocab=0)
    system = parse_system("trn1.32xlarge")
    work = Training(seq=64, global_batch=4, micro_batch=1)
    layout = resolve_layout(model, system, parse_layout("TP8 SP"), work)
    assert layer_shape(model, layout, work).sp == 8
    assert layer_shape(model, resolve_layout(model, system, parse_layout("TP8"), work),
                       work).sp == 1
    with pytest.raises(InvalidArgumentError, match="does not divide"):
        resolve_layout(model, system, parse_layout("TP8 SP"), Training(seq=60, global_batch=4))
