"""The tokens a model generates, greedy or sampled, decided as Hugging Face `generate` decides
them, from logits the simulated device computed.

`next_logits(ids)` gives the last position's logits of each row (trnsim's compiled model; see
`steps.SequenceLogits`). Sampling applies transformers' own temperature, top-k and top-p
warpers in `generate`'s order, then draws with `torch.multinomial` from a generator seeded
with `seed`, so a seeded run draws what `torch.manual_seed(seed); model.generate(...)` draws.
A sequence that emits the end-of-sequence token is finished and padded, as `generate` pads it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trnsim.errors import InvalidArgumentError

HF_DEFAULT_TOP_K = 50  # transformers' GenerationConfig default when sampling


@dataclass(frozen=True)
class Sampling:
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int = HF_DEFAULT_TOP_K
    top_p: float = 1.0
    seed: int = 0

    def check(self) -> None:
        if self.temperature <= 0:
            raise InvalidArgumentError(f"temperature must be > 0 when sampling; got "
                                       f"{self.temperature} (use greedy decoding instead)")
        if not 0 < self.top_p <= 1:
            raise InvalidArgumentError(f"top_p must be in (0, 1]; got {self.top_p}")
        if self.top_k < 0:
            raise InvalidArgumentError(f"top_k must be >= 0; got {self.top_k}")


def warpers(sampling: Sampling) -> list:
    from transformers.generation.logits_process import (
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    chosen = []
    if sampling.temperature != 1.0:
        chosen.append(TemperatureLogitsWarper(sampling.temperature))
    if sampling.top_k:
        chosen.append(TopKLogitsWarper(top_k=sampling.top_k))
    if sampling.top_p < 1.0:
        chosen.append(TopPLogitsWarper(top_p=sampling.top_p))
    return chosen


def generate_tokens(next_logits: Callable[[Any], Any], input_ids: Any, max_new_tokens: int, *,
                    sampling: Sampling = Sampling(), eos_token_id: int | list[int] | None = None,
                    pad_token_id: int | None = None) -> Any:
    """The prompt followed by up to `max_new_tokens` generated tokens per row ([batch, length])."""
    import torch

    if max_new_tokens < 1:
        raise InvalidArgumentError(f"max_new_tokens must be >= 1; got {max_new_tokens}")
    if sampling.do_sample:
        sampling.check()
    eos = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id or [])
    pad = pad_token_id if pad_token_id is not None else (eos[0] if eos else 0)
    warps = warpers(sampling) if sampling.do_sample else []
    generator = torch.Generator().manual_seed(sampling.seed)
    ids = input_ids.clone()
    unfinished = torch.ones(ids.shape[0], dtype=torch.long)
    for _ in range(max_new_tokens):
        scores = next_logits(ids).to(dtype=torch.float32)
        if sampling.do_sample:
            for warp in warps:
                scores = warp(ids, scores)
            probs = torch.nn.functional.softmax(scores, dim=-1)
            token = torch.multinomial(probs, num_samples=1, generator=generator).squeeze(1)
        else:
            token = torch.argmax(scores, dim=-1)
        token = token * unfinished + pad * (1 - unfinished)
        ids = torch.cat([ids, token[:, None]], dim=-1)
        if eos:
            unfinished = unfinished * (~torch.isin(token, torch.tensor(eos))).long()
            if int(unfinished.max()) == 0:
                break
    return ids
