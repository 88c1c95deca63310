"""One token-generation step of a Hugging Face causal LM, as a model `trace` can compile.

Prefill (the prompt) and decode (each further token) stress different parts of a chip: prefill
is matmul-bound, decode reads every weight and the whole KV cache to produce one token per
sequence, so it is bound by memory bandwidth. Neuron's LLM stacks compile the two as separate
graphs; this does the same for any model whose forward takes ``past_key_values``:

    step, inputs = trnsim.decode_step(model, batch=1, context=512)
    compiled = trnsim.trace(step, (), kwargs=inputs, instance="inf2.xlarge")
    print(compiled.report())   # latency = time per output token at a 512-token context

The KV cache is an input (``past_keys`` / ``past_values``: one [batch, kv_heads, context + 1,
head_dim] tensor per layer, the first `context` positions cached, the last free) and the output
is the next token's logits. As Neuron's stacks do with their preallocated cache, the step writes
the new token's key and value into the free position in place and attends over the whole
buffer; the compiled program updates its device copy of the input (the caller's tensors are
left alone). A sliding-window layer (Mistral, Gemma2) whose window the context outgrows keeps
Hugging Face's own cache, which appends with ``torch.cat`` and so copies the window each step
(within its window it sees every key, and is written in place like the others).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from trnsim.errors import InvalidArgumentError

# The step's arguments that are the device's own KV cache, not data the host sends each step:
# Neuron's LLM stacks keep the cache in device memory across steps (transformers-neuronx's and
# NxD Inference's KV cache is device state updated in place by each graph).
CACHE_INPUTS = ("past_keys", "past_values")


def decode_step(model: Any, *, batch: int = 1, context: int = 128, seed: int = 0
                ) -> tuple[DecodeStep, dict[str, Any]]:
    """`model` wrapped to generate one token after `context` cached tokens, and example inputs:
    random token ids and a KV cache in the model's dtype (zeros for a model on the meta device)."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "num_hidden_layers"):
        raise InvalidArgumentError(
            f"decode_step needs a Hugging Face causal LM (a model with a config); got "
            f"{type(model).__name__}")
    if batch < 1 or context < 1:
        raise InvalidArgumentError(f"decode_step: batch and context must be >= 1; got batch "
                                   f"{batch}, context {context}")
    limit = getattr(config, "max_position_embeddings", None)
    if limit is not None and context + 1 > limit:
        raise InvalidArgumentError(f"decode_step: context {context} + 1 new token exceeds the "
                                   f"model's max_position_embeddings ({limit})")
    shape = (batch, _kv_heads(config), context + 1, _head_dim(config))
    param = next(model.parameters())
    dtype = param.dtype
    generator = torch.Generator().manual_seed(seed)

    def cache() -> tuple[Any, ...]:
        if param.device.type == "meta":
            return tuple(torch.zeros(shape, dtype=dtype) for _ in range(config.num_hidden_layers))
        return tuple(torch.randn(shape, generator=generator).to(dtype)
                     for _ in range(config.num_hidden_layers))

    ids = torch.randint(0, min(int(getattr(config, "vocab_size", 1000)), 1000), (batch, 1),
                        generator=generator)
    step = DecodeStep(model)
    step.training = model.training  # a new module starts in train mode; mirror the model's
    keys, values = CACHE_INPUTS
    return step, {"input_ids": ids, keys: cache(), values: cache()}


def _kv_heads(config: Any) -> int:
    return int(getattr(config, "num_key_value_heads", None) or config.num_attention_heads)


def _head_dim(config: Any) -> int:
    return int(getattr(config, "head_dim", None)
               or config.hidden_size // config.num_attention_heads)


class DecodeStep(torch.nn.Module):
    """``logits = model(input_ids, past_key_values=cache(past_keys, past_values))[:, -1]``."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, past_keys, past_values):
        from transformers import DynamicCache

        if len(past_keys) != len(past_values):
            raise InvalidArgumentError(f"decode step: {len(past_keys)} key caches but "
                                       f"{len(past_values)} value caches")
        new = input_ids.shape[-1]
        cache = DynamicCache(config=self.model.config)
        for layer, (k, v) in enumerate(zip(past_keys, past_values, strict=True)):
            if k.shape != v.shape or k.shape[-2] <= new:
                raise InvalidArgumentError(
                    f"decode step: layer {layer}'s cache is {list(k.shape)} (keys) and "
                    f"{list(v.shape)} (values); both need the cached positions plus {new} free")
            seen = k.shape[-2] - new
            existing = cache.layers[layer] if layer < len(cache.layers) else None
            if existing is not None and existing.is_sliding \
                    and seen + new > existing.sliding_window:
                cache.update(k[:, :, :seen], v[:, :, :seen], layer)  # HF's appending window
            else:
                while len(cache.layers) <= layer:
                    cache.layers.append(None)
                cache.layers[layer] = _slot_layer_type()(k, v, seen)
        out = self.model(input_ids=input_ids, past_key_values=cache, use_cache=True)
        return out.logits[:, -1]


@functools.cache
def _slot_layer_type() -> type:
    """Built on first use: transformers is imported only by callers of decode_step."""
    from transformers.cache_utils import DynamicLayer

    class SlotLayer(DynamicLayer):
        """A layer's cache with free positions after `seen` tokens: the new tokens' keys and
        values are written there in place, and attention reads the whole buffer."""

        def __init__(self, keys, values, seen: int) -> None:
            super().__init__()
            self.keys, self.values, self.seen = keys, values, seen
            self.dtype, self.device = keys.dtype, keys.device
            self.is_initialized = True

        def update(self, key_states, value_states, *args, **kwargs):
            end = self.seen + key_states.shape[-2]
            self.keys[:, :, self.seen:end] = key_states
            self.values[:, :, self.seen:end] = value_states
            self.seen = end
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.seen

    return SlotLayer
