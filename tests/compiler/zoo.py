"""Tiny models (random weights from configs; nothing downloaded), built and captured once."""

from __future__ import annotations

import numpy as np

LAYERS = 2
SEQ = 16
BATCH = 2


def _tiny_models():
    """name -> (builder, inputs builder); builders run only when a test asks for the model."""
    import torch

    def hf(name):
        import transformers as T
        return T

    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 100, (BATCH, SEQ), generator=gen)
    image = torch.randn(BATCH, 3, 32, 32, generator=gen)
    bert_kw = dict(hidden_size=64, num_hidden_layers=LAYERS, num_attention_heads=4,
                   intermediate_size=128, vocab_size=100, max_position_embeddings=64)
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[1, SEQ // 2:] = 0

    def mlp():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))

    def cnn():
        torch.manual_seed(0)
        nn = torch.nn
        return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, stride=2), nn.ReLU(),
                             nn.AvgPool2d(2, ceil_mode=True), nn.AdaptiveAvgPool2d(1),
                             nn.Flatten(), nn.Linear(16, 10))

    def bert(**extra):
        T = hf("bert")
        torch.manual_seed(0)
        return T.BertModel(T.BertConfig(**bert_kw, **extra))

    def build(cls, cfg, **kw):
        T = hf(cls)
        torch.manual_seed(0)
        return getattr(T, cls)(getattr(T, cfg)(**kw))

    return {
        "mlp": (mlp, lambda: (torch.randn(4, 16, generator=gen),)),
        "cnn": (cnn, lambda: (torch.randn(BATCH, 3, 16, 16, generator=gen),)),
        "bert": (bert, lambda: (ids,)),
        "bert_eager_mask": (lambda: bert(attn_implementation="eager"),
                            lambda: {"input_ids": ids, "attention_mask": mask}),
        "roberta": (lambda: build("RobertaModel", "RobertaConfig", **bert_kw), lambda: (ids,)),
        "distilbert": (lambda: build("DistilBertModel", "DistilBertConfig", dim=64,
                                     n_layers=LAYERS, n_heads=4, hidden_dim=128, vocab_size=100,
                                     max_position_embeddings=64), lambda: (ids,)),
        "electra": (lambda: build("ElectraForPreTraining", "ElectraConfig", embedding_size=32,
                                  **bert_kw), lambda: (ids,)),
        "gpt2": (lambda: build("GPT2Model", "GPT2Config", n_embd=64, n_layer=LAYERS, n_head=4,
                               vocab_size=100, n_positions=64, bos_token_id=1, eos_token_id=2),
                 lambda: (ids,)),
        "gpt2_eager": (lambda: build("GPT2Model", "GPT2Config", n_embd=64, n_layer=LAYERS,
                                     n_head=4, vocab_size=100, n_positions=64, bos_token_id=1,
                                     eos_token_id=2, attn_implementation="eager"),
                       lambda: (ids,)),
        "mixtral": (lambda: build("MixtralModel", "MixtralConfig", hidden_size=64,
                                  intermediate_size=128, num_hidden_layers=LAYERS,
                                  num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                                  num_local_experts=4, num_experts_per_tok=2, use_cache=False),
                    lambda: (ids,)),
        "vit": (lambda: build("ViTModel", "ViTConfig", hidden_size=64,
                              num_hidden_layers=LAYERS, num_attention_heads=4,
                              intermediate_size=128, image_size=32, patch_size=8),
                lambda: (image,)),
        "resnet": (lambda: build("ResNetModel", "ResNetConfig", embedding_size=16,
                                 hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                                 layer_type="bottleneck"), lambda: (image,)),
    }


class Zoo:
    """Builds, runs eagerly and captures each tiny model at most once."""

    def __init__(self):
        self.specs = _tiny_models()
        self._cache = {}

    def get(self, name):
        if name not in self._cache:
            import torch
            import torch.utils._pytree as pytree

            from trnsim.compiler.capture import capture

            build, inputs = self.specs[name]
            model = build().eval()
            example = inputs()
            with torch.no_grad():
                eager = model(**example) if isinstance(example, dict) else model(*example)
            graph = capture(model, example)
            flat = list(example.values()) if isinstance(example, dict) else list(example)
            leaves = [t.numpy() for t in pytree.tree_leaves(eager) if isinstance(t, torch.Tensor)]
            self._cache[name] = Captured(name, model, example, flat, eager, leaves, graph)
        return self._cache[name]


class Captured:
    def __init__(self, name, model, example, flat_inputs, eager, eager_leaves, graph):
        self.name = name
        self.model = model
        self.example = example
        self.flat_inputs = flat_inputs
        self.eager = eager
        self.eager_leaves = eager_leaves
        self.graph = graph


def max_error(outputs, reference):
    assert len(outputs) == len(reference)
    return max(float(np.max(np.abs(np.asarray(o, np.float32) - np.asarray(r, np.float32))))
               for o, r in zip(outputs, reference, strict=True))
