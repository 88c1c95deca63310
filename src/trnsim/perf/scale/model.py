"""What the planner needs of a model: its transformer shape, from a name, a config or a size.

A model is named by a zoo/offline-config name (`trnsim.perf.zoo`), by a Hugging Face
``config.json`` path, by one of the large published shapes below (too large for the offline
set's purpose), or by a parameter count (``70B``, ``300e9``) given the standard decoder shape:
Llama's (SwiGLU, RMSNorm, rotary, grouped-query attention with 8 KV heads, head size 128,
intermediate width 3.5 x hidden rounded to 256, 128k vocabulary) at the depth and width that
Kaplan et al.'s aspect ratio (hidden / layers ~ 128) gives for that count.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

from trnsim.errors import InvalidArgumentError, UnknownNameError
from trnsim.perf.zoo import config_field


@dataclass(frozen=True)
class ModelSpec:
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    gated: bool = True  # SwiGLU MLP (3 matrices) or GELU MLP (2)
    norm: str = "rms"
    causal: bool = True
    rotary: bool = True
    tied_embeddings: bool = False
    default_seq: int = 2048
    experts: int = 1  # mixture of experts: MLP copies per layer
    experts_per_token: int = 1
    # vision transformer: pixels per patch side (0: a text model), input channels, and the
    # classifier's labels (`vocab` is 0: there is no token embedding or LM head)
    patch: int = 0
    channels: int = 3
    labels: int = 0

    # --- parameter counts ----------------------------------------------------------------
    @property
    def attention_params(self) -> int:
        return self.hidden * (self.heads + 2 * self.kv_heads) * self.head_dim \
            + self.heads * self.head_dim * self.hidden

    @property
    def mlp_params(self) -> int:
        """One expert's MLP."""
        return (3 if self.gated else 2) * self.hidden * self.ffn

    @property
    def norm_params(self) -> int:
        return (2 if self.norm == "rms" else 4) * self.hidden

    @property
    def layer_params(self) -> int:
        return self.attention_params + self.experts * self.mlp_params + self.norm_params

    @property
    def embedding_params(self) -> int:
        """Token embedding plus the LM head (once when tied); a vision model's patch
        convolution, class token, position embeddings and classifier."""
        if self.patch:
            convolution = (self.channels * self.patch ** 2 + 1) * self.hidden  # with its bias
            class_and_positions = (1 + self.default_seq) * self.hidden
            return convolution + class_and_positions + (self.hidden + 1) * self.labels
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def params(self) -> int:
        return self.layers * self.layer_params + self.embedding_params + self.hidden

    @property
    def active_params(self) -> int:
        """Parameters a token uses (an MoE token visits `experts_per_token` experts)."""
        dense = self.attention_params + self.experts_per_token * self.mlp_params + \
            self.norm_params
        return self.layers * dense + self.embedding_params + self.hidden

    def flops_per_token(self, seq: int) -> float:
        """Training FLOPs per token: 6 x active parameters (forward 2, backward 4), plus
        attention's score and value matmuls (12 x layers x seq x heads x head_dim, PaLM's
        formula), the model FLOPs MFU counts (no recomputation)."""
        return 6.0 * self.active_params + 12.0 * self.layers * seq * self.heads * self.head_dim

    def to_dict(self) -> dict:
        return dict(vars(self), params=self.params)


# Published shapes of models larger than trnsim's offline config set holds.
LARGE_MODELS: dict[str, ModelSpec] = {m.name: m for m in (
    ModelSpec("llama-3-70b", 80, 8192, 64, 8, 128, 28672, 128256, default_seq=8192),
    ModelSpec("llama-3.1-70b", 80, 8192, 64, 8, 128, 28672, 128256, default_seq=8192),
    ModelSpec("llama-3.1-405b", 126, 16384, 128, 8, 128, 53248, 128256, default_seq=8192),
    ModelSpec("llama-2-70b", 80, 8192, 64, 8, 128, 28672, 32000, default_seq=4096),
    ModelSpec("gpt3-175b", 96, 12288, 96, 96, 128, 49152, 50257, gated=False, norm="layer",
              rotary=False, tied_embeddings=True, default_seq=2048),
)}


def from_config(config: dict, name: str) -> ModelSpec:
    """A transformer's shape from a Hugging Face config dict (Llama, GPT-2, BERT, ViT, ...)."""
    def get(*keys, default=None):
        return config_field(config, *keys, default=default, name=name)

    kind = str(config.get("model_type", ""))
    hidden = int(get("hidden_size", "n_embd", "d_model"))
    heads = int(get("num_attention_heads", "n_head"))
    layers = int(get("num_hidden_layers", "n_layer"))
    ffn = int(get("intermediate_size", "n_inner", "ffn_dim", default=4 * hidden) or 4 * hidden)
    act = str(config.get("hidden_act", config.get("activation_function", "gelu")))
    gated = act in ("silu", "swiglu") or kind in ("llama", "mistral", "qwen2", "mixtral")
    vision = kind in ("vit", "deit")
    encoder = kind in ("bert", "roberta", "xlm-roberta", "electra", "albert") or vision
    if vision:
        seq = (int(get("image_size", default=224)) // int(get("patch_size", default=16))) ** 2 + 1
    else:
        seq = int(get("max_position_embeddings", "n_positions", default=2048))
    return ModelSpec(
        name=name, layers=layers, hidden=hidden, heads=heads,
        kv_heads=int(get("num_key_value_heads", default=heads)),
        head_dim=int(config.get("head_dim") or hidden // heads), ffn=ffn,
        vocab=0 if vision else int(get("vocab_size", default=32000)),
        gated=gated, norm="rms" if gated else "layer", causal=not encoder,
        rotary=kind in ("llama", "mistral", "qwen2", "mixtral"),
        tied_embeddings=bool(config.get("tie_word_embeddings", kind in ("gpt2", "bert"))),
        default_seq=min(seq, 2048) if not vision else seq,
        experts=int(config.get("num_local_experts") or 1),
        experts_per_token=int(config.get("num_experts_per_tok") or 1),
        patch=int(get("patch_size", default=16)) if vision else 0,
        channels=int(get("num_channels", default=3)) if vision else 3,
        # Hugging Face's PretrainedConfig: num_labels from id2label, else 2
        labels=(len(config.get("id2label") or {}) or int(config.get("num_labels") or 2))
        if vision else 0)


_COUNT = re.compile(r"^\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*([kmbt]?)\s*$", re.IGNORECASE)


def from_param_count(text: str) -> ModelSpec:
    """The standard decoder shape (module docstring) with about this many parameters."""
    match = _COUNT.match(text)
    if match is None:
        raise InvalidArgumentError(f"parameter count {text!r}: write e.g. 70B or 300e9")
    scale = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}[match.group(2).lower()]
    target = float(match.group(1)) * scale
    if not 1e7 <= target <= 1e14:
        raise InvalidArgumentError(f"parameter count {text!r}: between 10M and 100T, please")
    best = None
    for layers in range(4, 257, 2):
        hidden = max(256, round(layers * 128 / 128) * 128)
        heads = hidden // 128
        ffn = int(math.ceil(3.5 * hidden / 256) * 256)
        spec = ModelSpec(f"decoder-{text.strip()}", layers, hidden, heads, min(8, heads), 128,
                         ffn, 128256, default_seq=4096)
        if best is None or abs(spec.params - target) < abs(best.params - target):
            best = spec
    return best


def resolve(name: str, layers: int | None = None) -> ModelSpec:
    """A model by large-model name, parameter count, config.json path or zoo name."""
    key = name.strip().lower().rsplit("/", 1)[-1]
    if key in LARGE_MODELS:
        spec = LARGE_MODELS[key]
    elif _COUNT.match(name):
        spec = from_param_count(name)
    elif name.endswith(".json") or Path(name).is_file():
        from trnsim.perf.zoo import read_config

        if not Path(name).is_file():
            raise InvalidArgumentError(f"model config {name}: no such file")
        spec = from_config(read_config(name), Path(name).stem)
    else:
        from trnsim.perf.zoo import read_config, shipped_configs

        configs = shipped_configs()
        path = configs.get(key)
        if path is None:
            known = sorted(set(configs) | set(LARGE_MODELS))
            raise UnknownNameError("model", name, known)
        spec = from_config(read_config(path), key)
    return spec if layers is None else replace(spec, layers=layers)
