"""Model shapes, layouts, systems and HBM accounting of the planner, against hand-computed sizes."""

import pytest

from trnsim.errors import InvalidArgumentError, LimitExceededError, UnknownNameError
from trnsim.perf.scale.layout import Layout, Training, parse_layout
from trnsim.perf.scale.memory import (
    activation_bytes_per_layer,
    stage_params,
    training_memory,
)
from trnsim.perf.scale.model import ModelSpec, from_param_count, resolve
from trnsim.perf.scale.system import parse_system

TINY = ModelSpec("tiny", layers=4, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn=128,
                 vocab=100)


def test_published_parameter_counts():
    assert resolve("llama-3-70b").params == pytest.approx(70.55e9, rel=1e-3)
    assert resolve("meta-llama/Llama-3.1-8B").params == pytest.approx(8.03e9, rel=1e-3)
    assert resolve("bert-large-uncased").params == pytest.approx(335e6, rel=0.01)
    assert resolve("google/vit-base-patch16-224").params == pytest.approx(86e6, rel=0.01)
    spec = from_param_count("300B")
    assert spec.params == pytest.approx(300e9, rel=0.05) and spec.head_dim == 128
    with pytest.raises(UnknownNameError):
        resolve("no-such-model-anywhere")
    with pytest.raises(InvalidArgumentError):
        from_param_count("12 parsecs")


def test_tiny_parameter_count_by_hand():
    attention = 64 * (4 + 2 * 2) * 16 + 4 * 16 * 64  # qkv + out
    mlp = 3 * 64 * 128
    assert TINY.layer_params == attention + mlp + 2 * 64
    assert TINY.params == 4 * TINY.layer_params + 2 * 100 * 64 + 64


def test_layout_and_system_parsing():
    layout = parse_layout("TP8 PP4 DP32 ZeRO-1 SP RC V2")
    assert (layout.tp, layout.pp, layout.dp, layout.zero1, layout.sp, layout.recompute,
            layout.virtual_stages, layout.schedule) == (8, 4, 32, True, True, True, 2,
                                                        "interleaved")
    assert parse_layout("TP32 DP32 ZeRO-1").label() == "TP32 DP32 ZeRO-1"
    with pytest.raises(InvalidArgumentError, match="unknown word"):
        parse_layout("TP8 FSDP")
    system = parse_system("trn1n.32xlarge x 16")
    assert (system.nodes, system.cores, system.hbm_bytes_per_core) == (16, 512, 16 * 2**30)
    assert parse_system("trn2u.48xlarge").chips == 64  # the UltraServer
    assert parse_system("trn2.48xlarge x 4").cores_per_node == 64  # LNC=2 by default
    assert parse_system("ultracluster trn2 x 1600").nodes == 100
    with pytest.raises(LimitExceededError, match="100000"):
        parse_system("ultracluster trn2 x 200000")


def test_memory_by_hand_with_and_without_zero1():
    work = Training(seq=32, global_batch=64, micro_batch=2, precision="mixed")
    layout = Layout(tp=2, pp=2, dp=4)
    # busiest stage: 2 layers sharded over TP2 (norms replicated) + one of embedding / LM head
    per_layer = (TINY.attention_params + TINY.norm_params * 2 + TINY.mlp_params) // 2
    params = 2 * per_layer + 100 * 64 // 2
    assert stage_params(TINY, layout) == params
    mem = training_memory(TINY, layout, work, microbatches=8, capacity_bytes=2**30)
    assert mem.weights_bytes == 2 * params and mem.gradients_bytes == 2 * params
    assert mem.optimizer_bytes == 12 * params  # fp32 master + two fp32 moments
    zero = training_memory(TINY, Layout(tp=2, pp=2, dp=4, zero1=True), work, 8, 2**30)
    assert zero.optimizer_bytes == 12 * params // 4  # sharded over DP
    # Korthikanti et al. without SP: sbh(10 + 24/t + 5as/(ht)), 16-bit
    s, b, h, a, t = 32, 2, 64, 4, 2
    per = s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
    assert activation_bytes_per_layer(TINY, layout, work) == pytest.approx(per)
    # 1F1B: stage 0 holds min(PP, M) = 2 micro-batches of its 2 layers
    assert mem.activations_bytes == int(per * 2 * 2)
    recompute = training_memory(TINY, Layout(tp=2, pp=2, dp=4, recompute=True), work, 8, 2**30)
    assert recompute.activations_bytes == 2 * s * b * h * 2 * 2
    sp = Layout(tp=2, pp=2, dp=4, sp=True)
    assert activation_bytes_per_layer(TINY, sp, work) == pytest.approx(
        s * b * h * (34 + 5 * a * s / h) / t)
    assert not training_memory(TINY, layout, work, 8, capacity_bytes=1000).fits
