"""--model-type generic: attention runs as separate kernels and still computes what PyTorch does."""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import trnsim  # noqa: E402
from trnsim.compiler.options import CompileOptions  # noqa: E402
from trnsim.errors import InvalidArgumentError  # noqa: E402


def _tiny_bert():
    cfg = transformers.BertConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=128, vocab_size=1000)
    return transformers.BertModel(cfg).eval()


def test_generic_leaves_attention_unfused_with_the_same_numbers():
    torch.manual_seed(0)
    model = _tiny_bert()
    ids = torch.randint(0, 1000, (2, 32))
    mask = torch.ones(2, 32, dtype=torch.long)
    mask[1, 20:] = 0
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask).last_hidden_state
    results = {}
    for model_type in ("transformer", "generic"):
        compiled = trnsim.trace(model, (), kwargs={"input_ids": ids, "attention_mask": mask},
                                instance="inf2.xlarge", auto_cast="none", model_type=model_type)
        out = compiled(input_ids=ids, attention_mask=mask)
        out = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        assert float((out - ref).abs().max()) < 1e-4 * float(ref.abs().max()) + 1e-5
        results[model_type] = compiled
    assert results["generic"].options["model_type"] == "generic"
    # the scores are a tensor between kernels: generic takes longer than one fused kernel
    assert results["generic"].report().latency_ms > results["transformer"].report().latency_ms


def test_generic_causal_attention_matches_pytorch():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_embd=64, n_layer=1, n_head=2, vocab_size=500, n_positions=64,
                                  use_cache=False)
    model = transformers.GPT2Model(cfg).eval()
    ids = torch.randint(0, 500, (1, 24))
    with torch.no_grad():
        ref = model(input_ids=ids).last_hidden_state
    compiled = trnsim.trace(model, (ids,), instance="inf2.xlarge", auto_cast="none",
                            model_type="generic")
    out = compiled(ids)
    out = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
    assert float((out - ref).abs().max()) < 1e-4 * float(ref.abs().max()) + 1e-5


def test_a_boolean_mask_is_one_additive_bias_the_softmax_reads():
    """As PyTorch's reference (masked_fill of a zero bias, then +=): the select runs once on the
    mask for every layer, and the add is the softmax kernel's mask operand, so no kernel reads
    and writes the [b, heads, s, s] scores besides the matmuls and the softmax."""
    from trnsim.compiler.capture import capture
    from trnsim.compiler.passes import run_pipeline

    cfg = transformers.BertConfig(hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                                  intermediate_size=128, vocab_size=1000)
    model = transformers.BertModel(cfg).eval()
    ids = torch.zeros((2, 32), dtype=torch.long)
    graph = capture(model, (), {"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    kernels = run_pipeline(graph, CompileOptions(model_type="generic"))
    softmaxes = [n for n in kernels.nodes if n.op == "k.softmax"]
    assert len(softmaxes) == 3 and all(n.attrs["mask_kind"] == "bias" for n in softmaxes)
    assert len({id(n.inputs[1]) for n in softmaxes}) == 1  # one bias for every layer
    # the padding mask and its bias keep the [b, 1, 1, sk] values transformers widens to
    # [b, 1, sq, sk] (and-ed with a true [sq, 1]): the softmax reads them through a broadcast
    bias = softmaxes[0].inputs[1]
    assert bias.shape == (2, 1, 32, 32) and bias.op == "expand"
    assert bias.inputs[0].op == "k.elementwise" and bias.inputs[0].shape == (2, 1, 1, 32)
    scores = (2, 4, 32, 32)
    readers = [n for n in kernels.nodes if n.op.startswith("k.")
               and any(i.shape == scores for i in n.inputs)]
    assert sorted(n.op for n in readers) == ["k.matmul"] * 3 + ["k.softmax"] * 3


def test_model_type_is_checked():
    with pytest.raises(InvalidArgumentError, match="model_type='bert'"):
        CompileOptions(model_type="bert")
    assert CompileOptions().model_type == "transformer"
