"""The planner against the training path it is built on: one layer's plan against simulating
that layer on one core, and a data-parallel plan against the training path's DP result."""

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

pytest.importorskip("torch")

from trnsim.perf.scale.layout import Training, parse_layout
from trnsim.perf.scale.model import ModelSpec, from_config
from trnsim.perf.scale.plan import layer_shape, plan_training, resolve_layout
from trnsim.perf.scale.system import parse_system

SCRIPTS = Path(__file__).parent / "scripts"
SRC = Path(__file__).resolve().parents[3] / "src"


def run_script(tmp_path, script: str, **env: str) -> dict:
    environ = {**os.environ, "PYTHONPATH": str(SRC), "TRNSIM_CACHE_DIR": str(tmp_path / "cache"),
               **env}
    done = subprocess.run([sys.executable, "-m", "trnsim.run", str(SCRIPTS / script)],
                          capture_output=True, text=True, env=environ, timeout=900, cwd=tmp_path)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


def test_one_layer_plan_matches_simulating_the_layer(tmp_path, monkeypatch):
    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(tmp_path / "cache"))
    model = ModelSpec("one-layer", layers=1, hidden=64, heads=4, kv_heads=2, head_dim=16,
                      ffn=128, vocab=0)
    system = parse_system("trn1.32xlarge")
    work = Training(seq=32, global_batch=32, micro_batch=1, precision="bf16")
    plan = plan_training(model, system, parse_layout("TP1"), work)
    shape = layer_shape(model, resolve_layout(model, system, parse_layout("TP1"), work), work)
    direct = run_script(tmp_path, "layer_step.py", LAYER_SHAPE=json.dumps(asdict(shape)),
                        TRNSIM_INSTANCE="trn1.32xlarge", XLA_USE_BF16="1")
    layer = plan.per_layer_ms
    for phase in ("forward", "backward", "optimizer"):
        assert layer[phase] == pytest.approx(direct[phase], rel=0.05), phase
    # one layer, one micro-batch per rank: the step's compute is that layer's
    assert plan.breakdown_ms["forward_compute"] == pytest.approx(direct["forward"], rel=0.05)


TINY_LLAMA = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
              "max_position_embeddings": 64, "tie_word_embeddings": False,
              "model_type": "llama", "hidden_act": "silu"}


def test_data_parallel_plan_matches_the_training_paths_dp_step(tmp_path, monkeypatch):
    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(tmp_path / "cache"))
    micro, seq, world = 2, 32, 32
    config = {k: v for k, v in TINY_LLAMA.items() if k != "model_type"}
    measured = run_script(tmp_path, "dp_step.py", MODEL_CONFIG=json.dumps(config),
                          MICRO_BATCH=str(micro), SEQ=str(seq), TRNSIM_INSTANCE="trn1.32xlarge",
                          TRNSIM_XLA_SIMULATED_WORLD=str(world), XLA_USE_BF16="1")
    model = from_config(TINY_LLAMA, "tiny-llama")
    plan = plan_training(model, parse_system("trn1.32xlarge"), parse_layout(f"DP{world}"),
                         Training(seq, micro * world, micro, "bf16"))
    # the same job: throughput within 15% (9% today: the planner's layer and head modules are
    # not the Hugging Face model's graph); the gradient all-reduce is the training path's own
    # timing of it (its "collectives" phase also holds the 1/world scaling kernels)
    assert plan.sequences_per_s == pytest.approx(measured["throughput_per_s"], rel=0.15)
    from trnsim.runtime.xla.collective import all_reduce_ns

    grad_bytes = plan.memory["gradients_bytes"]
    assert plan.breakdown_ms["dp_reduction_exposed"] == pytest.approx(
        all_reduce_ns(grad_bytes, world, "trn1.32xlarge") / 1e6, rel=0.05)
    assert plan.breakdown_ms["dp_reduction_exposed"] <= measured["phase_ms"]["collectives"]
