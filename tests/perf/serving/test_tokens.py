"""Generated tokens from trnsim's compiled model equal Hugging Face `generate` (fp32)."""

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from trnsim.perf.serving.steps import Deployment, SequenceLogits  # noqa: E402
from trnsim.perf.serving.tokens import Sampling, generate_tokens  # noqa: E402


def _gpt2():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=96, n_positions=64,
                                  bos_token_id=0, eos_token_id=95)
    return transformers.GPT2LMHeadModel(cfg).eval()


def _llama():
    torch.manual_seed(1)
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=96,
                                   max_position_embeddings=64, bos_token_id=1, eos_token_id=2)
    return transformers.LlamaForCausalLM(cfg).eval()


FP32 = Deployment("inf2.xlarge", auto_cast="none")


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def model_and_logits(request):
    model = _gpt2() if request.param == "gpt2" else _llama()
    return model, SequenceLogits(model, FP32, (16,))


def _hf(model, ids, new, **kw):
    with torch.no_grad():
        return model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                              pad_token_id=model.config.eos_token_id, **kw)


def test_greedy_tokens_equal_hf_generate(model_and_logits):
    model, logits = model_and_logits
    ids = torch.randint(3, 90, (2, 5), generator=torch.Generator().manual_seed(3))
    ours = generate_tokens(logits, ids, 8, eos_token_id=model.config.eos_token_id)
    assert torch.equal(ours, _hf(model, ids, 8, do_sample=False))


def test_seeded_sampling_equals_hf_generate(model_and_logits):
    model, logits = model_and_logits
    ids = torch.randint(3, 90, (1, 6), generator=torch.Generator().manual_seed(4))
    sampling = Sampling(do_sample=True, temperature=0.7, top_k=20, top_p=0.9, seed=11)
    ours = generate_tokens(logits, ids, 8, sampling=sampling,
                           eos_token_id=model.config.eos_token_id)
    torch.manual_seed(11)
    theirs = _hf(model, ids, 8, do_sample=True, temperature=0.7, top_k=20, top_p=0.9)
    assert torch.equal(ours, theirs)
    other = generate_tokens(logits, ids, 8, sampling=Sampling(do_sample=True, seed=12,
                                                                temperature=0.7, top_k=20,
                                                                top_p=0.9),
                            eos_token_id=model.config.eos_token_id)
    assert not torch.equal(other, ours)  # the seed decides the draw
