"""Models without weights (parameters on the meta device) are timed exactly like the same model
with weights, and refuse to run or be saved with an error that says why."""

import pytest

from trnsim.compiler.empty_weights import empty_weights
from trnsim.compiler.errors import MetaWeightsError

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def no_cache(monkeypatch):
    monkeypatch.setenv("TRNSIM_CACHE_DIR", "off")


def _config():
    return transformers.LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=2, vocab_size=500)


INPUTS = {"input_ids": torch.randint(0, 500, (2, 32)),
          "attention_mask": torch.ones(2, 32, dtype=torch.int64)}


def test_parameters_go_to_meta_and_buffers_stay_real():
    with empty_weights():
        model = transformers.LlamaForCausalLM(_config())
    assert all(p.is_meta for p in model.parameters())
    assert not model.model.rotary_emb.inv_freq.is_meta  # computed at construction: kept
    assert not torch.nn.Linear(2, 2).weight.is_meta  # the patch ends with the block


def test_the_patch_is_undone_when_the_block_raises():
    with pytest.raises(RuntimeError), empty_weights():
        raise RuntimeError("boom")
    assert not torch.nn.Linear(2, 2).weight.is_meta


def test_timing_is_the_same_as_with_weights():
    import trnsim

    torch.manual_seed(0)
    real = transformers.LlamaForCausalLM(_config()).eval()
    with empty_weights():
        empty = transformers.LlamaForCausalLM(_config()).eval()
    reports = [trnsim.trace(m, (), kwargs=INPUTS, instance="trn1.2xlarge").report()
               for m in (real, empty)]
    assert reports[1].latency_ms == reports[0].latency_ms
    assert reports[1].hbm_read_bytes == reports[0].hbm_read_bytes
    assert any("meta device" in n for n in reports[1].notes)
    assert not any("meta device" in n for n in reports[0].notes)


def test_running_or_saving_says_the_weights_have_no_values(tmp_path):
    import trnsim

    with empty_weights():
        model = transformers.LlamaForCausalLM(_config()).eval()
    compiled = trnsim.trace(model, (), kwargs=INPUTS, instance="inf2.xlarge")
    with pytest.raises(MetaWeightsError, match=r"cannot run it: \d+ weight tensor\(s\).*lm_head"):
        compiled(**INPUTS)
    with pytest.raises(MetaWeightsError, match="cannot save it"):
        compiled.save(tmp_path / "m.trnsim")


def test_a_model_built_on_the_meta_device_is_timed_with_a_note_about_buffers():
    import trnsim

    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(_config()).eval()
    report = trnsim.trace(model, (), kwargs=INPUTS, instance="trn1.2xlarge").report()
    assert report.latency_ms > 0
    assert any("buffers on meta read as zeros" in n for n in report.notes)


HUGE_MODEL = """
import resource, torch, transformers, trnsim
from trnsim.compiler.errors import ModelTooLargeError
config = transformers.LlamaConfig(hidden_size=65536, intermediate_size=262144, num_hidden_layers=2,
                                  num_attention_heads=64, num_key_value_heads=8, vocab_size=2_000_000)
with trnsim.empty_weights():  # ~0.5 TB of fp32 weights: more than this host has
    model = transformers.LlamaForCausalLM(config).eval()
built_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    trnsim.trace(model, (torch.randint(0, 100, (1, 16)),), instance="inf2.xlarge")
except ModelTooLargeError as error:
    print("refused:", error)
print("peak_rss_mib", max(built_rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) // 1024)
"""


def test_a_model_far_beyond_hbm_is_refused_without_allocating_its_weights():
    import os
    import subprocess
    import sys

    env = {**os.environ, "TRNSIM_CACHE_DIR": "off"}
    done = subprocess.run([sys.executable, "-c", HUGE_MODEL], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused: model memory" in done.stdout and "exceeds limit 16.00 GiB" in done.stdout
    peak = int(done.stdout.split("peak_rss_mib")[1])
    assert peak < 2048, f"{peak} MiB resident: weights were allocated on the host"


def test_small_factory_tensors_stay_real_and_large_ones_are_meta():
    from trnsim.compiler.empty_weights import LARGE_TENSOR_BYTES

    with empty_weights():
        small = torch.arange(0, 64, 2).float()  # a rotary-style buffer computed at construction
        large = torch.empty(LARGE_TENSOR_BYTES // 4 + 1)
        cpu_zeros = torch.zeros(4, device="cpu")
    assert not small.is_meta and not cpu_zeros.is_meta and large.is_meta
    assert not torch.empty(LARGE_TENSOR_BYTES // 4 + 1).is_meta  # the mode ends with the block
