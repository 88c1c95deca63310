"""The host's side of a served step: the tensors transformers-neuronx copies to and from every
rank, and their time over each chip's PCIe link."""

import pytest

from trnsim import hardware
from trnsim.errors import InvalidArgumentError
from trnsim.perf.serving.host_io import call_bytes, step_host_time
from trnsim.perf.serving.steps import Deployment, host_ms

LLAMA3_8B = {"hidden_size": 4096, "vocab_size": 128256}
LLAMA2_7B = {"hidden_size": 4096, "vocab_size": 32000}


def test_prefill_sends_every_rank_the_host_embedded_hidden_state_and_s32_positions():
    inputs, outputs = call_bytes(LLAMA3_8B, "bfloat16", 32, "prefill", 1, 128)
    # hidden [1, 128, 4096] bf16, cache_ids [128], start_ids [1], last_token_id (scalar), s32
    assert inputs == [128 * 4096 * 2, 128 * 4, 4, 4]
    # each rank returns its slice of the vocabulary's logits, in the model's dtype
    assert outputs == [128256 // 32 * 2]


def test_decode_sends_one_token_whatever_the_kv_length_and_shards_pad_up():
    short = call_bytes(LLAMA2_7B, "float16", 24, "decode", 4, 256)
    assert short == call_bytes(LLAMA2_7B, "float16", 24, "decode", 4, 4096)
    inputs, outputs = short
    assert inputs == [4 * 4096 * 2, 4, 4 * 4, 4]
    assert outputs == [1334 * 4 * 2]  # 32000 / 24 = 1333.3: padded to 1334 a rank
    fp32, _ = call_bytes(LLAMA2_7B, None, 1, "decode", 1, 256)  # a model as built: fp32
    assert fp32[0] == 4096 * 4


def test_ranks_of_a_chip_share_its_link_and_chips_copy_side_by_side():
    spec = hardware.instance("trn1.32xlarge")
    start, rate = spec.chip.core.dma.start_latency_ns, spec.host.link_bytes_per_s
    inputs, outputs = call_bytes(LLAMA3_8B, "bfloat16", 32, "prefill", 1, 128)
    host = step_host_time(LLAMA3_8B, Deployment(spec.name, 32, dtype="bfloat16"), "prefill", 1,
                          128)
    assert host.input_bytes == 32 * sum(inputs)
    assert host.output_bytes == 32 * sum(outputs)
    # two NeuronCores a Trainium chip: its link carries two ranks' copies, one after another
    assert host.input_copy_ns == pytest.approx(2 * sum(start + b / rate * 1e9 for b in inputs))
    assert host.output_copy_ns == pytest.approx(2 * (start + outputs[0] / rate * 1e9))
    assert host.total_ns == pytest.approx(spec.host.dispatch_ns + host.input_copy_ns
                                          + host.output_copy_ns)
    # eight ranks on four chips: the same hidden state per link, though a quarter of the bytes
    eight = step_host_time(LLAMA3_8B, Deployment(spec.name, 8, dtype="bfloat16"), "prefill", 1,
                           128)
    assert eight.input_copy_ns == pytest.approx(host.input_copy_ns)
    assert eight.input_bytes == host.input_bytes // 4
    one = step_host_time(LLAMA3_8B, Deployment(spec.name, 1, dtype="bfloat16"), "prefill", 1,
                         128)
    assert one.input_copy_ns == pytest.approx(host.input_copy_ns / 2)


def test_the_hidden_state_makes_prefill_dearer_than_decode_on_the_host():
    deployment = Deployment("inf2.48xlarge", 24, dtype="bfloat16")
    prefill = host_ms(LLAMA2_7B, deployment, "prefill", 1, 128)
    decode = host_ms(LLAMA2_7B, deployment, "decode", 1, 256)
    link = hardware.instance("inf2.48xlarge").host.link_bytes_per_s
    # the difference is two ranks' hidden states of 127 more tokens and their cache_ids
    assert prefill - decode == pytest.approx(2 * 127 * (4096 * 2 + 4) / link * 1e3)


def test_a_config_without_the_sizes_is_a_named_error():
    with pytest.raises(InvalidArgumentError, match="hidden_size"):
        call_bytes({"vocab_size": 10}, None, 1, "decode", 1, 128)
