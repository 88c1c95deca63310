"""The models trnsim benchmarks, built from their published configurations with random weights.

Nothing is downloaded: each entry spells out the Hugging Face config of the checkpoint it names
(the shapes are what matter for timing), builds the model with random weights and makes example
inputs like the published runs fed (token ids plus attention mask and token types, padded to the
sequence length; images for the vision models).

A name resolves (`zoo_model`) against, in order: the entries below; the offline set of popular
checkpoints' ``config.json`` fields shipped in ``perf/data/configs`` (file ``org--name.json``,
written from the published architecture hyper-parameters); and config files a user names
(`register_config`, ``--config path/to/config.json``; a name that is a path to a ``.json`` file
is one). An organisation prefix (``google/``) and a parenthesised remark are ignored, case does
not matter, and a unique prefix up to a dash picks its checkpoint (``electra-base`` ->
``electra-base-discriminator``). A config's ``architectures[0]`` decides the model: a causal LM
(``...ForCausalLM``, ``...LMHeadModel``) is built with its LM head, every other model as the
base model of its ``model_type`` (what the encoder and vision entries below build). Only
transformers' own classes are used: loading a config never runs code it names.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from trnsim.errors import InvalidArgumentError, UnknownNameError


@dataclass(frozen=True)
class ZooEntry:
    name: str
    family: str  # "text", "causal-lm" (text that can also be timed per generated token) or "vision"
    build: Callable[[], object]  # -> an eval-mode torch.nn.Module
    default_seq: int = 128
    token_types: bool | None = None  # feeds token_type_ids; None: BERT and ELECTRA by name
    image_size: int = 224

    def require_causal_lm(self) -> None:
        """Refuse, by name, a model that has no token-generation step."""
        from trnsim.errors import InvalidArgumentError

        if self.family != "causal-lm":
            decoders = sorted(e.name for e in ZOO.values() if e.family == "causal-lm")
            raise InvalidArgumentError(f"{self.name} is not a causal LM, so it has no decode "
                                       f"step; models with one: {', '.join(decoders)}")

    def decode_inputs(self, model, batch: int, context: int | None = None) -> tuple[object, dict]:
        """`model` as one token-generation step after `context` cached tokens, and its inputs."""
        from trnsim.compiler.decode_step import decode_step

        self.require_causal_lm()
        return decode_step(model, batch=batch, context=context or self.default_seq)

    def inputs(self, batch: int, seq: int | None = None) -> dict:
        import torch

        seq = seq or self.default_seq
        generator = torch.Generator().manual_seed(0)
        if self.family == "vision":
            size = self.image_size
            return {"pixel_values": torch.randn(batch, 3, size, size, generator=generator)}
        ids = torch.randint(1000, 2000, (batch, seq), generator=generator)
        inputs = {"input_ids": ids, "attention_mask": torch.ones(batch, seq, dtype=torch.int64)}
        token_types = (self.name.startswith(("bert", "electra")) if self.token_types is None
                       else self.token_types)
        if token_types:
            inputs["token_type_ids"] = torch.zeros(batch, seq, dtype=torch.int64)
        return inputs


def config_path(name: str):
    """A shipped Hugging Face config.json (`trnsim/perf/data/models/NAME.json`)."""
    from importlib import resources

    return resources.files("trnsim.perf") / "data" / "models" / f"{name}.json"


def causal_lm_builder(config: dict) -> Callable[[], object]:
    """Build a causal LM from a config dict (transformers' own classes; a config never names
    code to run: remote code is not loaded). `build.config` is that dict."""
    def build():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        import transformers

        torch.manual_seed(0)
        values = {k: v for k, v in config.items() if k not in ("model_type", "architectures")}
        try:
            cfg = transformers.AutoConfig.for_model(config["model_type"], **values)
        except (KeyError, ValueError) as error:
            from trnsim.errors import InvalidArgumentError

            raise InvalidArgumentError(f"model_type {config['model_type']!r}: {error}") from None
        return transformers.AutoModelForCausalLM.from_config(cfg).eval()
    build.config = config
    build.classes = ("AutoModelForCausalLM", "AutoConfig")
    return build


class _ShippedLM:
    """A causal LM from a shipped config.json. `config` (the file's fields, read when asked
    for) and `classes` key `trnsim bench`'s result cache, as `_hf`'s builders' do."""

    classes = ("AutoModelForCausalLM", "AutoConfig")

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def config(self) -> dict:
        return read_config(config_path(self.name))

    def __call__(self):
        return causal_lm_builder(self.config)()


def _hf(cls_name: str, config_cls: str, **config):
    """A builder of `cls_name` from `config_cls(**config)`; `build.config` is that config."""
    def build():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        import transformers

        torch.manual_seed(0)
        cfg = getattr(transformers, config_cls)(**config)
        model = getattr(transformers, cls_name)(cfg)
        return model.eval()
    build.config = config
    build.classes = (cls_name, config_cls)
    return build


_BERT_LARGE = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                   intermediate_size=4096, vocab_size=30522, max_position_embeddings=512)

_LLAMA_32_1B = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                    num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                    max_position_embeddings=131072, tie_word_embeddings=True, rope_theta=500000.0,
                    rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0,
                                  "original_max_position_embeddings": 8192})

ZOO: dict[str, ZooEntry] = {e.name: e for e in (
    ZooEntry("bert-base-uncased", "text", _hf("BertModel", "BertConfig", hidden_size=768,
                                               num_hidden_layers=12, num_attention_heads=12,
                                               intermediate_size=3072, vocab_size=30522)),
    ZooEntry("bert-large-uncased", "text", _hf("BertModel", "BertConfig", **_BERT_LARGE)),
    ZooEntry("electra-large-discriminator", "text",
             _hf("ElectraModel", "ElectraConfig", embedding_size=1024, **_BERT_LARGE), 256),
    ZooEntry("roberta-large", "text", _hf("RobertaModel", "RobertaConfig", hidden_size=1024,
                                          num_hidden_layers=24, num_attention_heads=16,
                                          intermediate_size=4096, vocab_size=50265,
                                          max_position_embeddings=514, type_vocab_size=1,
                                          pad_token_id=1)),
    ZooEntry("distilbert-base-uncased", "text", _hf("DistilBertModel", "DistilBertConfig", dim=768,
                                                    n_layers=6, n_heads=12, hidden_dim=3072,
                                                    vocab_size=30522)),
    ZooEntry("gpt2", "text", _hf("GPT2Model", "GPT2Config", n_embd=768, n_layer=12, n_head=12,
                                 vocab_size=50257, n_positions=1024, use_cache=False)),
    ZooEntry("vit-base-patch16-224", "vision", _hf("ViTModel", "ViTConfig", hidden_size=768,
                                                   num_hidden_layers=12, num_attention_heads=12,
                                                   intermediate_size=3072, image_size=224,
                                                   patch_size=16)),
    # decoder LLMs with their LM head, timed on a prompt (prefill) of `seq` tokens, or with
    # bench --decode per generated token after `seq` cached tokens; build them under
    # trnsim.empty_weights() unless the host has the memory for fp32 weights
    ZooEntry("llama-3.2-1b", "causal-lm", _hf("LlamaForCausalLM", "LlamaConfig", **_LLAMA_32_1B)),
    ZooEntry("llama-2-7b", "causal-lm", _ShippedLM("llama-2-7b")),
    ZooEntry("llama-3-8b", "causal-lm", _ShippedLM("llama-3-8b")),
    ZooEntry("mistral-7b", "causal-lm", _hf("MistralForCausalLM", "MistralConfig", hidden_size=4096,
                                       intermediate_size=14336, num_hidden_layers=32,
                                       num_attention_heads=32, num_key_value_heads=8,
                                       vocab_size=32000, sliding_window=4096)),
    # mixture of experts (Hugging Face's default grouped_mm experts): 47B weights, run with
    # bench --tp (tensor parallel) on a Trainium instance
    ZooEntry("mixtral-8x7b", "causal-lm", _hf("MixtralForCausalLM", "MixtralConfig",
                                         hidden_size=4096, intermediate_size=14336,
                                         num_hidden_layers=32, num_attention_heads=32,
                                         num_key_value_heads=8, vocab_size=32000,
                                         num_local_experts=8, num_experts_per_tok=2,
                                         max_position_embeddings=32768)),
    ZooEntry("resnet-50", "vision", _hf("ResNetModel", "ResNetConfig", embedding_size=64,
                                        hidden_sizes=[256, 512, 1024, 2048], depths=[3, 4, 6, 3],
                                        layer_type="bottleneck")),
)}


VISION_MODEL_TYPES = frozenset({"vit", "deit", "beit", "dinov2", "resnet", "convnext",
                                "convnextv2", "swin", "regnet", "mobilenet_v2", "levit",
                                "poolformer", "segformer", "yolos"})
_CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")
_USER_CONFIGS: dict[str, Path] = {}


def _config_dir() -> Path:
    return Path(str(resources.files("trnsim.perf") / "data" / "configs"))


def _key(name: str) -> str:
    """Lower case, without an organisation prefix or a parenthesised remark."""
    name = re.sub(r"\s*\(.*\)\s*$", "", name.strip())
    return name.rsplit("/", 1)[-1].lower()


def shipped_configs() -> dict[str, Path]:
    """The offline config set: checkpoint name (lower case, no organisation) -> file."""
    out = {}
    for path in sorted(_config_dir().glob("*.json")):
        out[path.stem.rsplit("--", 1)[-1].lower()] = path
    return out


def register_config(path: str | Path) -> str:
    """Make a user's Hugging Face ``config.json`` resolvable; returns the name it answers to
    (its ``_name_or_path`` without organisation, else the file's stem, else its directory's
    name when the file is called config.json)."""
    path = Path(path)
    fields = read_config(path)
    stem = path.parent.name if path.stem == "config" else path.stem
    name = _key(str(fields.get("_name_or_path") or stem))
    _USER_CONFIGS[name] = path
    _USER_CONFIGS[_key(stem)] = path
    return name


def read_config(path) -> dict:
    """A config.json (a path, or a packaged file) as a dict: JSON only, never code. Keys that
    trnsim's shipped files add for people (``_source``) are dropped; ``_name_or_path`` is kept."""
    try:
        fields = json.loads((Path(path) if isinstance(path, str) else path).read_text())
    except OSError as error:
        raise InvalidArgumentError(f"cannot read model config {str(path)!r}: "
                                   f"{error.strerror or error}") from None
    except ValueError as error:
        raise InvalidArgumentError(f"model config {str(path)!r} is not JSON: {error}") from None
    if not isinstance(fields, dict) or "model_type" not in fields:
        raise InvalidArgumentError(f"model config {str(path)!r} has no 'model_type' (a Hugging "
                                   "Face config.json names its model_type)")
    return {k: v for k, v in fields.items() if not k.startswith("_") or k == "_name_or_path"}


def config_field(config: dict, *keys: str, default: Any = None, name: str = "model") -> Any:
    """The first of `keys` a Hugging Face config sets (not None): families name one field
    differently (``hidden_size``, GPT-2's ``n_embd``, BART's ``d_model``). Without it and
    without a `default`, an `InvalidArgumentError` naming the keys."""
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    if default is None:
        raise InvalidArgumentError(f"model config {name!r} has none of {', '.join(keys)}")
    return default


def config_entry(path: str | Path, name: str | None = None) -> ZooEntry:
    """A zoo entry built from a Hugging Face config.json (module docstring)."""
    fields = read_config(path)
    model_type = str(fields["model_type"])
    arch = (fields.get("architectures") or [""])[0]
    causal = arch.endswith(_CAUSAL_SUFFIXES)
    family = ("vision" if model_type in VISION_MODEL_TYPES
              else "causal-lm" if causal else "text")
    image = fields.get("image_size", 224)
    return ZooEntry(name or _key(str(fields.get("_name_or_path") or Path(path).stem)), family,
                    _from_config(fields, arch if causal else None),
                    token_types=int(fields.get("type_vocab_size") or 0) > 1,
                    image_size=int(image[0] if isinstance(image, list) else image))


def _from_config(fields: dict, causal_class: str | None):
    """A builder of the model a config's fields describe; `build.config` is those fields."""
    def build():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        import transformers

        torch.manual_seed(0)
        kwargs = {k: v for k, v in fields.items()
                  if not k.startswith("_") and k not in ("architectures", "model_type")}
        try:
            cfg = transformers.AutoConfig.for_model(fields["model_type"], **kwargs)
        except ValueError as error:
            raise InvalidArgumentError(f"config: {error}") from None
        if causal_class is None:
            return transformers.AutoModel.from_config(cfg).eval()
        cls = getattr(transformers, causal_class, None)
        if not isinstance(cls, type) or not issubclass(cls, transformers.PreTrainedModel):
            raise InvalidArgumentError(f"config names architecture {causal_class!r}, which is not "
                                       "a transformers model class")
        return cls(cfg).eval()
    build.config = fields
    build.classes = (causal_class or "AutoModel", "AutoConfig")
    return build


def zoo_model(name: str) -> ZooEntry:
    """The entry a model name (or a path to a config.json) resolves to (module docstring)."""
    text = name.strip()
    if text.lower().endswith(".json"):
        if not Path(text).is_file():
            raise InvalidArgumentError(f"model config {text!r} not found")
        return config_entry(text)
    key = _key(text)
    if key in ZOO:
        return ZOO[key]
    configs = {**shipped_configs(), **_USER_CONFIGS}
    if key in configs:
        return config_entry(configs[key], key)
    prefixed = [k for k in configs if k.startswith(key + "-")]
    if len(prefixed) == 1:
        return config_entry(configs[prefixed[0]], prefixed[0])
    if prefixed:
        raise InvalidArgumentError(f"model name {name!r} is ambiguous: "
                                   f"{', '.join(sorted(prefixed))}")
    raise UnknownNameError("benchmark model", name, [*ZOO, *configs])
