"""Step times: measured by the simulator, cached, and composed from one- and two-layer models."""

import pytest

from trnsim import hardware

pytest.importorskip("torch")
pytest.importorskip("transformers")

from trnsim.perf.serving.buckets import bucket_for, parse_buckets, power_of_two_buckets
from trnsim.perf.serving.generation import time_generation
from trnsim.perf.serving.steps import Deployment, StepTimer
from trnsim.perf.zoo import causal_lm_builder

CONFIG = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
          "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
          "vocab_size": 128, "max_position_embeddings": 512}


def timer(tmp_path, monkeypatch, **kw):
    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(tmp_path))
    return StepTimer("tiny", causal_lm_builder(CONFIG), CONFIG, Deployment("inf2.xlarge"), **kw)


def test_buckets_are_neurons_powers_of_two():
    assert power_of_two_buckets(4096) == (128, 256, 512, 1024, 2048, 4096)
    assert power_of_two_buckets(1750) == (128, 256, 512, 1024, 1750)
    assert bucket_for(129, (128, 256)) == 256
    assert parse_buckets("256,128", 200) == (128, 256)


def test_step_times_are_cached_on_disk_and_composition_tracks_the_whole_model(tmp_path,
                                                                              monkeypatch):
    whole = timer(tmp_path, monkeypatch)
    full = whole.decode_ms(1, 128)
    assert whole.compiles == 1
    again = timer(tmp_path, monkeypatch)
    assert again.decode_ms(1, 128) == full and again.compiles == 0  # read from the cache
    composed = timer(tmp_path, monkeypatch, compose_layers=True)
    estimate = composed.decode_ms(1, 128)
    assert composed.compiles == 2  # one- and two-layer models
    assert estimate == pytest.approx(full, rel=0.05)


def test_a_step_is_one_framework_call_whose_kv_cache_stays_on_the_device(tmp_path, monkeypatch):
    from trnsim.compiler.decode_step import decode_step
    from trnsim.perf.serving.steps import host_ms
    from trnsim.runtime import trace

    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(tmp_path))
    model = causal_lm_builder(CONFIG)()
    module, kwargs = decode_step(model, batch=1, context=255)
    compiled = trace(module, (), kwargs=kwargs, instance="inf2.xlarge")
    report = compiled.report()
    deployment = Deployment("inf2.xlarge")
    served = host_ms(CONFIG, deployment, "decode", 1, 256)
    # a decode call moves the same bytes at any KV length: the cache stays on the device
    assert host_ms(CONFIG, deployment, "decode", 1, 512) == served
    # a framework call of the same graph that copied every input, the cache too, takes longer
    spec = hardware.instance("inf2.xlarge")
    cache_bytes = sum(t.numel() * t.element_size() for t in kwargs["past_keys"]) * 2
    assert report.end_to_end_ms - report.latency_ms > served + cache_bytes / \
        spec.host.link_bytes_per_s * 1e3 * 0.9
    step = StepTimer("tiny", causal_lm_builder(CONFIG), CONFIG, deployment)
    assert step.decode_ms(1, 256) == pytest.approx(report.latency_ms + served)


class Steps:
    """Decode time grows with the KV bucket, as a real step table does."""

    def prefill_ms(self, batch, length):
        return 10.0 * batch

    def decode_ms(self, batch, positions):
        return positions / 128


def test_generation_times_each_step_at_its_own_bucket():
    t = time_generation(Steps(), instance="inf2.xlarge", tensor_parallel=1, lnc=None, batch=1,
                        input_tokens=120, output_tokens=20, prefill_buckets=(128, 256),
                        decode_buckets=(128, 256))
    # token 1 from prefill; tokens 2..20 are 19 steps at 121..139 positions: 8 at bucket 128
    # (1 ms), 11 at bucket 256 (2 ms)
    assert t.ttft_ms == 10.0
    assert t.step_ms == [1.0] * 8 + [2.0] * 11
    assert t.e2e_ms == 10.0 + 8 + 22
    assert t.tpot_ms == pytest.approx(30 / 19)
    assert t.tokens_per_s == pytest.approx(20 / 0.040)
    assert t.copies == 2  # inf2.xlarge: two NeuronCores, one copy each
    price = hardware.instance("inf2.xlarge").price_per_hour
    assert t.usd_per_million_tokens == pytest.approx(price / 3600 / (2 * 500) * 1e6)


def test_int8_weight_storage_counts_one_byte_a_linear_weight(tmp_path, monkeypatch):
    """The HBM a replica's weights take (KV-cache capacity is what is left): linear weights one
    byte each plus an fp32 scale per output column; embeddings, norms and the LM head stay
    bf16."""
    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(tmp_path))
    bf16 = StepTimer("tiny", causal_lm_builder(CONFIG), CONFIG, Deployment("inf2.xlarge"))
    int8 = StepTimer("tiny", causal_lm_builder(CONFIG), CONFIG,
                     Deployment("inf2.xlarge", quantize="int8"))
    h, i, kv, layers = 64, 128, 2 * 16, 4
    linear = layers * (2 * h * h + 2 * h * kv + 3 * h * i)
    columns = layers * (2 * h + 2 * kv + 2 * i + h)
    assert bf16.weight_bytes() - int8.weight_bytes() == linear - 4 * columns
