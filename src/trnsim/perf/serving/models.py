"""Which causal LM to serve: a zoo name or a Hugging Face ``config.json``, as a config dict and a
builder (random weights; `empty_weights` for timing). Loading a config never runs code."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trnsim.errors import InvalidArgumentError


@dataclass(frozen=True)
class ModelSource:
    name: str
    config: dict
    build: Callable[[], Any]

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V one token occupies in every layer's cache (bf16)."""
        c = self.config
        heads = int(c.get("num_attention_heads") or c.get("n_head"))
        kv = int(c.get("num_key_value_heads") or heads)
        hidden = int(c.get("hidden_size") or c.get("n_embd"))
        head_dim = int(c.get("head_dim") or hidden // heads)
        layers = int(c.get("num_hidden_layers") or c.get("n_layer"))
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
