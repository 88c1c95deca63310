"""Embeddings from an encoder (BERT, RoBERTa, DistilBERT...) compiled with trnsim, batched as the
HTTP server's ``/v1/embeddings`` runs them.

An encoder has no generation loop: one compiled forward per (batch, sequence bucket) turns a
batch of token-id rows into vectors. As Neuron serves encoders, the graph is compiled for a fixed
batch and a few sequence-length buckets; rows are right-padded to the smallest bucket that holds
the longest, with an attention mask, and unused batch rows are padding. The vector of a row is
the mean of its last hidden states over its real tokens (sentence-transformers' default
pooling), computed in the compiled graph. Each request's simulated device time is the latency of
every compiled batch it rode in.

`EmbeddingEngine` shares the generation engine's queue and worker (bounded queue -> 429,
shutdown -> 503, dynamic batching of waiting requests).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trnsim.errors import InvalidArgumentError
from trnsim.perf.serving.buckets import bucket_for
from trnsim.perf.serving.engine import Engine

# Hugging Face model types of bidirectional encoders (no generation step: served for embeddings).
ENCODER_MODEL_TYPES = frozenset({"bert", "roberta", "xlm-roberta", "distilbert", "electra",
                                 "albert", "camembert", "deberta", "deberta-v2", "mpnet"})


def is_encoder(model: str) -> bool:
    """Whether `model` (a zoo name or a config.json) is an encoder of `ENCODER_MODEL_TYPES`."""
    from trnsim.compiler.empty_weights import empty_weights
    from trnsim.perf.zoo import zoo_model

    entry = zoo_model(model)
    if entry.family != "text":
        return False
    with empty_weights():
        config = entry.build().config
    return getattr(config, "model_type", None) in ENCODER_MODEL_TYPES


class PooledEncoder:
    """`model` compiled per sequence bucket at batch `batch`: token rows -> mean-pooled vectors,
    and the simulated latency of each compiled batch."""

    def __init__(self, model: Any, deployment: Any, buckets: tuple[int, ...], batch: int) -> None:
        self.model = model
        self.deployment = deployment
        self.buckets = buckets
        self.batch = batch
        self._compiled: dict[int, Any] = {}
        self._latency: dict[int, float] = {}

    def warm(self) -> None:
        for bucket in self.buckets:
            self._program(bucket)

    def latency_ms(self, bucket: int) -> float:
        if bucket not in self._latency:
            self._latency[bucket] = float(self._program(bucket).report().latency_ms)
        return self._latency[bucket]

    def __call__(self, rows: list[list[int]]) -> tuple[Any, float]:
        """Vectors of `rows` (at most `batch` of them) and the device time of their batch."""
        import torch

        if len(rows) > self.batch:
            raise InvalidArgumentError(f"{len(rows)} inputs exceed the compiled batch {self.batch}")
        bucket = bucket_for(max(len(r) for r in rows), self.buckets, "input")
        ids = torch.zeros((self.batch, bucket), dtype=torch.long)
        mask = torch.zeros((self.batch, bucket), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, :len(row)] = torch.tensor(row, dtype=torch.long)
            mask[i, :len(row)] = 1
        mask[len(rows):, 0] = 1  # padding rows attend to one position (no empty softmax)
        vectors = self._program(bucket)(ids, mask)
        return vectors[:len(rows)].to(torch.float32), self.latency_ms(bucket)

    def _program(self, bucket: int) -> Any:
        import torch

        from trnsim import hardware
        from trnsim.runtime import trace

        if bucket not in self._compiled:
            class MeanPooled(torch.nn.Module):
                def __init__(self, inner: Any) -> None:
                    super().__init__()
                    self.model = inner

                def forward(self, input_ids, attention_mask):
                    hidden = self.model(input_ids=input_ids,
                                        attention_mask=attention_mask).last_hidden_state
                    weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
                    return (hidden * weights).sum(1) / weights.sum(1)

            d = self.deployment
            spec = hardware.instance(d.instance)
            example = (torch.zeros((self.batch, bucket), dtype=torch.long),
                       torch.ones((self.batch, bucket), dtype=torch.long))
            self._compiled[bucket] = trace(
                MeanPooled(self.model).eval(), example, instance=spec.name,
                auto_cast=d.auto_cast, lnc=d.lnc if d.lnc in spec.chip.lnc_options else None,
                tensor_parallel=d.tensor_parallel if d.tensor_parallel > 1 else None)
        return self._compiled[bucket]


@dataclass(eq=False)
class EmbeddingJob:
    """One request's inputs (token-id rows); `vectors` and `device_ms` when done."""

    prompt: list[list[int]]
    vectors: list[list[float]] = field(default_factory=list)
    device_ms: float = 0.0
    error: str | None = None
    on_done: Any = None  # called from the worker thread, once
    done: Any = None

    def __post_init__(self) -> None:
        import threading

        self.done = threading.Event()


class EmbeddingEngine(Engine):
    """The generation engine's queue and worker around a `PooledEncoder`."""

    def __init__(self, encoder: PooledEncoder, *, queue_size: int, max_length: int) -> None:
        super().__init__(None, None, max_batch=encoder.batch, max_length=max_length,
                         queue_size=queue_size)
        self.encoder = encoder

    def start(self) -> None:
        self.encoder.warm()
        for bucket in self.encoder.buckets:
            self.encoder.latency_ms(bucket)
        self._worker.start()

    def submit(self, job: EmbeddingJob) -> EmbeddingJob:
        if not job.prompt or any(not row for row in job.prompt):
            raise InvalidArgumentError("every input must hold at least one token")
        longest = max(len(row) for row in job.prompt)
        if longest > self.max_length:
            raise InvalidArgumentError(f"an input of {longest} tokens exceeds the model's "
                                       f"compiled length {self.max_length}")
        if len(job.prompt) > self.max_batch:
            raise InvalidArgumentError(f"{len(job.prompt)} inputs in one request exceed the "
                                       f"server's batch of {self.max_batch}")
        return self._enqueue(job)

    def _generate(self, batch: list[EmbeddingJob]) -> None:
        """The waiting requests' rows, `max_batch` rows per compiled batch."""
        rows = [(job, row) for job in batch for row in job.prompt]
        for start in range(0, len(rows), self.max_batch):
            chunk = rows[start:start + self.max_batch]
            vectors, ms = self.encoder([row for _, row in chunk])
            riders: dict[int, EmbeddingJob] = {}
            for (job, _), vector in zip(chunk, vectors, strict=True):
                job.vectors.append(vector.tolist())
                riders[id(job)] = job
            for job in riders.values():
                job.device_ms += ms
