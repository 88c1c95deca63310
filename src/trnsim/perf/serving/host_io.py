"""What one call of a served LLM's graph moves between the host and its NeuronCores, as
transformers-neuronx (the stack of the published generation rows, 0.10 in Neuron SDK 2.18)
makes it, and how long the host's side of the call takes.

Read from transformers-neuronx's code (aws-neuron/transformers-neuronx, April 2024):

- By default (``NeuronConfig.on_device_embedding=False``) the model's forward looks the token
  embeddings up on the host (``LlamaForSampling.forward``: ``embed_tokens(input_ids)``) and the
  compiled graph takes the hidden state, not token ids. A decoder graph's inputs are
  (``layers/transformer.py`` ``inputs``): the hidden state [batch, tokens, hidden] (BSH; HSB
  transposes it, same bytes) in the model's dtype (``amp``), then cache_ids [tokens],
  start_ids [batch] and last_token_id (a scalar), s32. Prefill's tokens are the prompt's
  bucket (the prompt padded on the right to it), decode's one.
- Both graphs run through ``compiler.Executor`` (``use_executor``; the context graphs when every
  layer is unrolled, the default): one host thread per rank, each copying the call's inputs to
  its own rank, executing it and copying its outputs back. Every rank receives the whole hidden
  state.
- The language-model head is split by vocabulary (``lm_head`` sharded along the vocabulary,
  padded to a multiple of the ranks) and its logits are not gathered on the device
  (``rms_lm_head`` all-gathers only across nodes): every rank returns its shard
  [vocab / ranks, 1, batch] in the model's dtype (``return_ranks=-1``), which the host
  concatenates and casts to fp32.

Time (`trnsim.runtime.host_time.ranks_host_time`): the framework's dispatch, then the copies of
the ranks on one chip one after another over that chip's PCIe link, the chips' links side by
side (`trnsim.hardware.host`). The host CPU's own work (the embedding lookup, the casts, top-k
sampling of the logits) is not timed: no figure for it is published.
"""

from __future__ import annotations

import math
from typing import Any

from trnsim import hardware
from trnsim.errors import InvalidArgumentError
from trnsim.hardware.host import FRAMEWORK_INDEX_BYTES
from trnsim.numerics import dtype as as_dtype
from trnsim.perf.zoo import config_field


def call_bytes(config: dict, dtype: str | None, ranks: int, phase: str, batch: int,
               size: int) -> tuple[list[int], list[int]]:
    """(input copies, output copies) in bytes that one rank of a `ranks`-way call receives and
    returns: `phase` "prefill" of a `size`-token bucket or "decode" (one token; `size` is the
    KV positions and moves nothing); `dtype` is the model's (torch name; None: fp32)."""
    hidden = int(config_field(config, "hidden_size", "n_embd", "d_model"))
    if not config.get("vocab_size"):
        raise InvalidArgumentError("the model's config names no vocab_size: the host's copies "
                                   "of a generation step follow from it")
    item = as_dtype(dtype or "float32").itemsize
    tokens = size if phase == "prefill" else 1
    inputs = [batch * tokens * hidden * item,  # the hidden state, embedded on the host
              tokens * FRAMEWORK_INDEX_BYTES,  # cache_ids
              batch * FRAMEWORK_INDEX_BYTES,  # start_ids
              FRAMEWORK_INDEX_BYTES]  # last_token_id
    outputs = [math.ceil(int(config["vocab_size"]) / ranks) * batch * item]  # the logits shard
    return inputs, outputs


def step_host_time(config: dict, deployment: Any, phase: str, batch: int,
                   size: int) -> Any:
    """`trnsim.runtime.host_time.HostTime` of one call of the step (None where the instance
    names no host). `deployment` is a `steps.Deployment`."""
    from trnsim.runtime.host_time import ranks_host_time

    spec = hardware.instance(deployment.instance)
    ranks = max(1, deployment.tensor_parallel)
    inputs, outputs = call_bytes(config, deployment.dtype, ranks, phase, batch, size)
    per_chip = min(ranks, spec.chip.logical_cores(deployment.lnc))
    return ranks_host_time(spec, inputs, outputs, ranks=ranks, ranks_per_chip=per_chip)
