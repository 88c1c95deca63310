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


def test_model_type_is_checked():
    with pytest.raises(InvalidArgumentError, match="model_type='bert'"):
        CompileOptions(model_type="bert")
    assert CompileOptions().model_type == "transformer"
