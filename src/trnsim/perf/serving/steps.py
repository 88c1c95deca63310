"""Step times from trnsim's simulator: the one module of `serving` that talks to the compiler.

A served LLM runs two compiled graphs, as Neuron's stacks build them: context encoding (the
prompt, "prefill") and token generation (one new token per sequence against the KV cache,
"decode"), each compiled per bucket of sizes. `StepTimer` compiles the graph a (batch, bucket)
needs with `trnsim.trace` (the model's weights on the meta device) and keeps its simulated
latency, in memory and in a JSON file beside trnsim's compile cache, keyed on the model's
config, the deployment and the simulator's source code: a step time is always one the
simulator measured, never a fitted curve, and a warm cache answers without compiling.

A step is one call of the compiled graph from the host, as the published generation runs made
it (transformers-neuronx calls the context-encoding graph once, then the token-generation graph
once per token): its time is the device's plus the host's share of one framework call as
transformers-neuronx makes it (`host_io`: dispatch, the hidden state embedded on the host and
copied to every rank with the position ids, each rank's logits shard copied back). The KV
cache is device state (`trnsim.compiler.decode_step.CACHE_INPUTS`): nothing of it crosses PCIe.

Everything here that knows how trnsim compiles (trace's arguments, decode_step, where the cache
lives) stays in this module, so a change of the compile joint is absorbed here.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from trnsim import hardware
from trnsim.errors import InvalidArgumentError

STEP_CACHE_VERSION = 3  # 2: a step's time includes the host's share of the call; 3: as
# transformers-neuronx makes the call (host_io)


class StepCosts(Protocol):
    """What a serving model needs from the device: milliseconds per compiled step."""

    def prefill_ms(self, batch: int, length: int) -> float: ...

    def decode_ms(self, batch: int, positions: int) -> float: ...


@dataclass(frozen=True)
class Deployment:
    """Where and how the model's graphs are compiled."""

    instance: str
    tensor_parallel: int = 1
    lnc: int | None = None
    auto_cast: str | None = None  # None: the instance compiler's default (neuronx-cc: matmult)
    # The model's own dtype (torch name, e.g. "bfloat16"): that of its activations and KV cache,
    # as the deployment loads it (transformers-neuronx's amp). None: as the model is built (fp32).
    dtype: str | None = None
    # Weight-only quantization ("int8": linear weights stored int8, dequantized on chip, as NxD
    # Inference's quantization_dtype and transformers-neuronx's QuantizationConfig); None: off.
    quantize: str | None = None

    def key(self) -> dict:
        key = {"instance": self.instance, "tp": self.tensor_parallel, "lnc": self.lnc,
               "auto_cast": self.auto_cast}
        if self.dtype is not None:  # keeps the keys of fp32 deployments' cached steps
            key["dtype"] = self.dtype
        if self.quantize is not None:
            key["quantize"] = self.quantize
        return key

    def compile_options(self) -> dict:
        """`trnsim.trace`'s keyword arguments for this deployment."""
        spec = hardware.instance(self.instance)
        return {"instance": spec.name, "auto_cast": self.auto_cast,
                "lnc": self.lnc if self.lnc in spec.chip.lnc_options else None,
                "tensor_parallel": self.tensor_parallel if self.tensor_parallel > 1 else None,
                "quantize": self.quantize}


def prefill_module(model: Any) -> Any:
    """`model` as Neuron's context-encoding graph: the prompt in, the last position's logits out
    (the LM head runs on one position, as NxD Inference computes it)."""
    import torch

    class Prefill(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.model = inner

        def forward(self, input_ids):
            out = self.model(input_ids=input_ids, use_cache=False, logits_to_keep=1)
            return out.logits[:, -1]

    step = Prefill(model)
    step.training = model.training
    return step


class StepTimer:
    """Simulated step latencies of one model on one deployment, cached per (phase, batch,
    bucket). `build` makes the model (it is called at most once, under `empty_weights`)."""

    def __init__(self, name: str, build: Callable[[], Any], config: dict,
                 deployment: Deployment, *, persist: bool = True, compose_layers: bool = False,
                 progress: Callable[[str], None] | None = None) -> None:
        self.name = name
        self.compose_layers = compose_layers
        self.deployment = deployment
        self._build = build
        self._model = None
        self._config = config
        self._progress = progress
        self._times: dict[str, float] = {}
        self.compiles = 0
        self.compile_seconds = 0.0
        self._path = _cache_file(self._key()) if persist else None
        if self._path is not None and self._path.exists():
            try:
                self._times = {k: float(v) for k, v in
                               json.loads(self._path.read_text())["times"].items()}
            except (OSError, ValueError, KeyError, TypeError):
                self._times = {}
        spec = hardware.instance(deployment.instance)
        if deployment.lnc is not None and deployment.lnc not in spec.chip.lnc_options:
            raise InvalidArgumentError(f"--lnc {deployment.lnc}: {spec.name}'s chip offers "
                                       f"{', '.join(map(str, spec.chip.lnc_options))}")

    # --- the model ------------------------------------------------------------------------
    @property
    def model(self) -> Any:
        if self._model is None:
            from trnsim.compiler.empty_weights import empty_weights

            with empty_weights():
                self._model = self._build()
        return self._model

    @property
    def config(self) -> dict:
        return self._config

    def weight_bytes(self, bytes_per_weight: int = 2) -> int:
        """Parameters x bytes each (bf16 weights by default, as the published runs served);
        with int8 weight storage, a decoder linear layer's weight is one byte a weight plus an
        fp32 scale per output column; the LM head keeps its dtype
        (`trnsim.compiler.passes.quantize`)."""
        import torch

        total = sum(p.numel() for p in self.model.parameters()) * bytes_per_weight
        if self.deployment.quantize == "int8":
            head = self.model.get_output_embeddings() \
                if hasattr(self.model, "get_output_embeddings") else None
            for module in self.model.modules():
                if isinstance(module, torch.nn.Linear) and module is not head:
                    weight = module.weight
                    total -= weight.numel() * (bytes_per_weight - 1) - weight.shape[0] * 4
        return total

    # --- step times -----------------------------------------------------------------------
    def prefill_ms(self, batch: int, length: int) -> float:
        return self._time("prefill", batch, length)

    def decode_ms(self, batch: int, positions: int) -> float:
        """One generated token per sequence with `positions` KV positions (the cached tokens
        plus the new one)."""
        return self._time("decode", batch, positions)

    def known(self) -> dict[str, float]:
        return dict(self._times)

    def _time(self, phase: str, batch: int, size: int) -> float:
        if self.compose_layers:
            return self._composed(phase, batch, size)
        return self._measured(phase, batch, size, None)

    def _measured(self, phase: str, batch: int, size: int, layers: int | None) -> float:
        key = f"{phase}:{batch}:{size}" + (f":layers={layers}" if layers else "")
        if key not in self._times:
            self._times[key] = self._simulate(phase, batch, size, layers)
            self._save()
        return self._times[key]

    def _composed(self, phase: str, batch: int, size: int) -> float:
        """A model too large to simulate whole in reasonable time, composed from simulated
        models of one and two of its layers (DESIGN: composed estimates stay anchored to the
        instruction-level model): t(L) = t(1) + (L - 1) * (t(2) - t(1)). The second layer's
        cost is everything one more identical layer adds (its kernels, its collectives); the
        rest (embedding, final norm, LM head) is in t(1) once."""
        layers = _layer_count(self._config)
        one = self._measured(phase, batch, size, 1)
        if layers == 1:
            return one
        two = self._measured(phase, batch, size, 2)
        return one + (layers - 1) * (two - one)

    def _simulate(self, phase: str, batch: int, size: int, layers: int | None = None) -> float:
        if self._progress:
            self._progress(f"compiling {self.name} {phase} batch {batch} "
                           f"{'length' if phase == 'prefill' else 'positions'} {size}"
                           + (f" ({layers} layer{'s' if layers > 1 else ''})" if layers else ""))
        start = time.perf_counter()
        model = self.model if layers is None else _with_layers(self._config, layers)
        compiled = compile_step(model, self._config, self.deployment, phase, batch, size)
        latency = float(compiled.report().latency_ms) + host_ms(self._config, self.deployment,
                                                                phase, batch, size)
        self.compiles += 1
        self.compile_seconds += time.perf_counter() - start
        return latency

    # --- the persistent cache --------------------------------------------------------------
    def _key(self) -> str:
        payload = json.dumps({"model": self._config, "deployment": self.deployment.key(),
                              "compose": self.compose_layers, "code": simulator_digest(),
                              "version": STEP_CACHE_VERSION}, sort_keys=True, default=str)
        return hashlib.sha256(payload.encode()).hexdigest()[:32]

    def _save(self) -> None:
        if self._path is None:
            return
        try:
            if self._path.exists():  # another process may have added steps: keep them
                try:
                    theirs = json.loads(self._path.read_text())["times"]
                    self._times = {**{k: float(v) for k, v in theirs.items()}, **self._times}
                except (ValueError, KeyError, TypeError, AttributeError):
                    pass
            self._path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"model": self.name, "deployment": self.deployment.key(),
                                       "times": self._times}, indent=1, sort_keys=True))
            tmp.replace(self._path)
        except OSError:
            pass  # a cache that cannot be written is skipped


def compile_step(model: Any, config: dict, deployment: Deployment, phase: str, batch: int,
                 size: int) -> Any:
    """`model` (meta weights, described by `config`) compiled for `deployment` as one step:
    "prefill" of `size` prompt tokens, or "decode" of one token with `size` KV positions."""
    import torch

    from trnsim.compiler.decode_step import decode_step
    from trnsim.runtime import trace

    if deployment.dtype is not None:  # meta weights: a dtype change allocates nothing
        model = model.to(getattr(torch, deployment.dtype))
    if phase == "prefill":
        vocab = int(config.get("vocab_size") or 1000)
        ids = torch.randint(0, min(vocab, 1000), (batch, size),
                            generator=torch.Generator().manual_seed(0))
        module, kwargs = prefill_module(model), {"input_ids": ids}
    else:
        module, kwargs = decode_step(model, batch=batch, context=size - 1)
    return trace(module, (), kwargs=kwargs, **deployment.compile_options())


def host_ms(config: dict, deployment: Deployment, phase: str, batch: int, size: int) -> float:
    """The host's share of one call of a step (ms): framework dispatch and the PCIe copies
    transformers-neuronx makes (`host_io`; 0 where the instance names no host)."""
    from trnsim.perf.serving.host_io import step_host_time

    host = step_host_time(config, deployment, phase, batch, size)
    return 0.0 if host is None else host.total_ns / 1e6


_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")


def _layer_count(config: dict) -> int:
    for key in _LAYER_KEYS:
        if config.get(key):
            return int(config[key])
    raise InvalidArgumentError("the model's config names no layer count (num_hidden_layers)")


def _with_layers(config: dict, layers: int) -> Any:
    """The model with only its first `layers` layers (meta weights)."""
    from trnsim.compiler.empty_weights import empty_weights
    from trnsim.perf.zoo import causal_lm_builder

    smaller = dict(config)
    for key in _LAYER_KEYS:
        if key in smaller:
            smaller[key] = layers
    if isinstance(smaller.get("layer_types"), list):
        smaller["layer_types"] = smaller["layer_types"][:layers]
    with empty_weights():
        return causal_lm_builder(smaller)()


def _cache_file(key: str) -> Path | None:
    from trnsim.runtime.compile import cache_dir

    root = cache_dir()
    return None if root is None else root / "serving" / f"steps-{key}.json"


_DIGEST: list[str] = []


def simulator_digest() -> str:
    """A digest of the source that decides a step time: every trnsim module below `perf`."""
    if not _DIGEST:
        root = Path(__file__).resolve().parents[2]
        h = hashlib.sha256()
        for package in ("compiler", "kernels", "isa", "sim", "hardware", "collectives",
                        "runtime", "nki", "numerics"):
            for path in sorted((root / package).rglob("*.py")):
                h.update(path.read_bytes())
        _DIGEST.append(h.hexdigest()[:16])
    return _DIGEST[0]


class SequenceLogits:
    """The next-token logits of each row of a batch of token ids, computed by the model compiled
    with trnsim and run functionally (the numbers the device would compute).

    The ids are padded on the right to the smallest of `buckets` and run through one compiled
    full-sequence graph per bucket. A causal model's logits at a position do not depend on later
    positions, so right padding leaves the real positions' logits as they would be unpadded; the
    last real position's logits are returned. This recomputes the prefix each token (the timing
    of generation comes from the KV-cache graphs, `StepTimer`); it is meant for small models."""

    def __init__(self, model: Any, deployment: Deployment, buckets: tuple[int, ...]) -> None:
        self.model = model
        self.deployment = deployment
        self.buckets = buckets
        self._compiled: dict[tuple[int, int], Any] = {}

    def __call__(self, ids: Any) -> Any:
        import torch

        from trnsim.perf.serving.buckets import bucket_for

        batch, length = ids.shape
        bucket = bucket_for(length, self.buckets, "generated sequence")
        padded = torch.zeros((batch, bucket), dtype=ids.dtype)
        padded[:, :length] = ids
        logits = self._program(batch, bucket)(padded)
        return logits[:, length - 1]

    def rows(self, rows: list[list[int]], batch: int) -> Any:
        """Next-token logits of each of `rows` (token id lists of any lengths), run as one
        batch of `batch` rows (the compiled batch size; unused rows are padding)."""
        import torch

        from trnsim.perf.serving.buckets import bucket_for

        if len(rows) > batch:
            raise InvalidArgumentError(f"{len(rows)} sequences exceed the compiled batch {batch}")
        longest = max(len(r) for r in rows)
        bucket = bucket_for(longest, self.buckets, "sequence")
        padded = torch.zeros((batch, bucket), dtype=torch.long)
        for i, row in enumerate(rows):
            padded[i, :len(row)] = torch.tensor(row, dtype=torch.long)
        logits = self._program(batch, bucket)(padded)
        last = torch.tensor([len(r) - 1 for r in rows])
        return logits[torch.arange(len(rows)), last]

    def warm(self, batch: int) -> None:
        """Compile every bucket's program now (a server does this before taking requests)."""
        for bucket in self.buckets:
            self._program(batch, bucket)

    def _program(self, batch: int, bucket: int) -> Any:
        import torch

        from trnsim.runtime import trace

        if (batch, bucket) not in self._compiled:
            class Logits(torch.nn.Module):
                def __init__(self, inner: Any) -> None:
                    super().__init__()
                    self.model = inner

                def forward(self, input_ids):
                    return self.model(input_ids=input_ids, use_cache=False).logits

            module = Logits(self.model).eval()
            example = torch.zeros((batch, bucket), dtype=torch.long)
            self._compiled[batch, bucket] = trace(module, (example,),
                                                  **self.deployment.compile_options())
        return self._compiled[batch, bucket]
