"""Weight-only int8 quantization (`trace(quantize="int8")`): the numbers are those of the
dequantized weights, and the weights cross HBM and DMA as one byte each."""

import importlib

import numpy as np
import pytest

from trnsim.errors import InvalidArgumentError

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def no_cache(monkeypatch):
    monkeypatch.setenv("TRNSIM_CACHE_DIR", "off")


def dequantized(weight):
    """What NxD Inference's per-channel symmetric int8 weight stands for: q * s."""
    amax = weight.abs().amax(dim=1)
    scale = torch.where(amax > 0, amax / 127, torch.ones_like(amax))
    return torch.clamp(torch.round(weight / scale[:, None]), -127, 127) * scale[:, None]


class TwoLinears(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(256, 384, bias=True)
        self.down = torch.nn.Linear(384, 128, bias=False)

    def forward(self, x):
        return self.down(torch.relu(self.up(x))) + x[..., :128]


def test_int8_matmuls_compute_with_the_dequantized_weights():
    """fp32 compute: equal to torch with q * s weights to fp32 rounding (the bias is added after
    the scale, the residual after both); bf16 compute: within bf16's precision."""
    import trnsim

    torch.manual_seed(0)
    model = TwoLinears().eval()
    x = torch.randn(4, 256)
    with torch.no_grad():
        hidden = torch.relu(torch.nn.functional.linear(x, dequantized(model.up.weight),
                                                       model.up.bias))
        want = torch.nn.functional.linear(hidden, dequantized(model.down.weight)) + x[..., :128]
    fp32 = trnsim.trace(model, (x,), instance="trn1.2xlarge", auto_cast="none", quantize="int8")
    assert float((fp32(x) - want).abs().max() / want.abs().max()) < 1e-6
    bf16 = trnsim.trace(model, (x,), instance="trn1.2xlarge", quantize="int8")
    assert float((bf16(x) - want).abs().max() / want.abs().max()) < 2e-2


def test_weights_are_stored_and_moved_as_int8():
    """The pass stores each linear weight as int8 with an fp32 scale per output column; a decode
    shaped product (one row) then reads half the weight bytes a bf16 weight costs."""
    import trnsim
    from trnsim.compiler import CompileOptions, run_pipeline
    from trnsim.compiler.capture import capture

    torch.manual_seed(0)
    model = torch.nn.Linear(1024, 2048, bias=False).to(torch.bfloat16).eval()
    x = torch.randn(1, 1024, dtype=torch.bfloat16)
    graph = run_pipeline(capture(model, (x,)), CompileOptions(instance="inf2.xlarge",
                                                              quantize="int8"),
                         stop_after="quantize_weights")
    weights = [graph.constant(n) for n in graph.nodes if n.op == "constant"]
    assert sorted((c.dtype.name, c.shape) for c in weights) == [
        ("float32", (2048,)), ("int8", (2048, 1024))]
    plain = trnsim.trace(model, (x,), instance="inf2.xlarge").report()
    int8 = trnsim.trace(model, (x,), instance="inf2.xlarge", quantize="int8").report()
    weight_bytes = 1024 * 2048
    assert plain.hbm_read_bytes >= 2 * weight_bytes
    assert int8.hbm_read_bytes - weight_bytes < 0.05 * weight_bytes  # int8 + scales + x
    # one row is bound by the weight's DMA: half the bytes, less time, conversions included
    assert int8.latency_ms < 0.9 * plain.latency_ms


def test_a_split_llama_with_int8_weights_matches_its_dequantized_twin(monkeypatch):
    """Tensor parallel over 4 ranks with padded heads and MLP width: each rank holds its int8
    chunk and scales; row-parallel sums are scaled after the all-reduce."""
    import trnsim

    transformers = pytest.importorskip("transformers")
    monkeypatch.setattr(importlib.import_module("trnsim.compiler.passes.tensor_parallel"),
                        "MIN_SHARD_BYTES", 0)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=96, intermediate_size=102, head_dim=16,
                                      num_hidden_layers=1, num_attention_heads=6,
                                      num_key_value_heads=6, vocab_size=250)
    model = transformers.LlamaForCausalLM(config).eval()
    twin = transformers.LlamaForCausalLM(config).eval()
    twin.load_state_dict(model.state_dict())
    with torch.no_grad():
        for module in twin.model.modules():  # the decoder's linears; the LM head keeps bf16
            if isinstance(module, torch.nn.Linear):
                module.weight.copy_(dequantized(module.weight))
        ids = torch.randint(0, 250, (2, 8))
        want = twin(ids).logits
    got = trnsim.trace(model, (ids,), instance="trn1.32xlarge", tensor_parallel=4,
                       auto_cast="none", quantize="int8")(ids)
    got = got.logits if hasattr(got, "logits") else got[0]
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=0,
                               atol=1e-5 * float(want.abs().max()))


@pytest.mark.parametrize("tied", [False, True])
def test_a_language_models_head_keeps_its_dtype(tied):
    """transformers-neuronx quantizes the decoder layers' linears and adds the LM head
    unquantized: the vocabulary projection (found by its embedding table's shape, tied or not)
    keeps its float weight; every decoder linear is int8."""
    from trnsim.compiler import CompileOptions, run_pipeline
    from trnsim.compiler.capture import capture

    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2,
                                      vocab_size=512, tie_word_embeddings=tied)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 512, (1, 8))
    graph = run_pipeline(capture(model, (ids,)), CompileOptions(instance="trn1.2xlarge",
                                                                quantize="int8"),
                         stop_after="quantize_weights")
    weights = [(n.inputs[1].shape, n.inputs[1].dtype.name) for n in graph.nodes
               if n.op == "k.matmul" and n.inputs[1].op == "constant"]
    heads = [dtype for shape, dtype in weights if shape == (512, 64)]
    layers = [dtype for shape, dtype in weights if shape != (512, 64)]
    assert heads and "int8" not in heads
    assert len(layers) == 7 and set(layers) == {"int8"}  # q, k, v, o, gate, up, down


def test_an_unknown_weight_dtype_is_refused():
    import trnsim

    with pytest.raises(InvalidArgumentError, match=r"quantize='int4'.*int8"):
        trnsim.trace(torch.nn.Linear(4, 4), (torch.zeros(1, 4),), quantize="int4")
