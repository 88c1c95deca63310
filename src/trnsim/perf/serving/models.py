"""Which causal LM to serve: a zoo name or a Hugging Face ``config.json``, as a config dict and a
builder (random weights; `empty_weights` for timing). Loading a config never runs code."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trnsim.errors import InvalidArgumentError
from trnsim.perf.zoo import config_field


@dataclass(frozen=True)
class ModelSource:
    name: str
    config: dict
    build: Callable[[], Any]

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V one token occupies in every layer's cache (bf16)."""
        c, name = self.config, self.name
        heads = int(config_field(c, "num_attention_heads", "n_head", name=name))
        kv = int(config_field(c, "num_key_value_heads", default=heads, name=name))
        hidden = int(config_field(c, "hidden_size", "n_embd", "d_model", name=name))
        head_dim = int(c.get("head_dim") or hidden // heads)
        layers = int(config_field(c, "num_hidden_layers", "n_layer", name=name))
        return 2 * layers * kv * head_dim * 2

    @property
    def max_positions(self) -> int | None:
        value = self.config.get("max_position_embeddings") or self.config.get("n_positions")
        return int(value) if value else None


def resolve_model(name_or_path: str) -> ModelSource:
    """A zoo causal LM by name, or a path to a config.json."""
    from trnsim.perf.zoo import ZOO, causal_lm_builder, read_config, zoo_model

    path = Path(name_or_path)
    if name_or_path.endswith(".json") or path.is_file():
        if not path.is_file():
            raise InvalidArgumentError(f"model config {name_or_path}: no such file")
        config = read_config(str(path))
        return ModelSource(path.stem if path.stem != "config" else path.parent.name or "model",
                           config, causal_lm_builder(config))
    if name_or_path.strip().lower() not in ZOO:
        zoo_model(name_or_path)  # raises UnknownNameError with suggestions
    entry = zoo_model(name_or_path)
    entry.require_causal_lm()
    return ModelSource(entry.name, _zoo_config(entry), entry.build)


def _zoo_config(entry) -> dict:
    """The entry's config as a dict (built on the meta device: no weights allocated)."""
    from trnsim.compiler.empty_weights import empty_weights

    with empty_weights():
        model = entry.build()
    config = model.config.to_dict()
    return {k: v for k, v in config.items() if not k.startswith("_") and k != "transformers_version"}
