"""The batching engine behind `trnsim serve MODEL --port N`: real tokens from the model compiled
with trnsim, and the simulated device time of generating them.

Requests queue (bounded: `QueueFull` when it is full, the server's 429); one worker thread takes
up to ``max_batch`` of them at a time and generates for the batch together, as a device runs
one compiled batch (unused rows are padding), token by token, handing each token to its
request's callback as it is produced (streaming). Each request's simulated device latency is the
prefill at the batch's prompt bucket plus every decode step it took part in, from `StepTimer`.
A stopped engine refuses new requests (`EngineStopped`, the server's 503) and finishes the ones
it holds.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trnsim.errors import InvalidArgumentError, TrnsimError
from trnsim.perf.serving.buckets import bucket_for
from trnsim.perf.serving.tokens import Sampling


class QueueFull(TrnsimError):
    """More requests wait than the engine's queue holds."""


class EngineStopped(TrnsimError):
    """The engine is shutting down and takes no new requests."""


@dataclass
class Job:
    prompt: list[int]
    max_tokens: int
    sampling: Sampling
    on_token: Callable[[int], None] | None = None  # called from the worker thread
    on_done: Callable[[], None] | None = None  # called from the worker thread, once
    tokens: list[int] = field(default_factory=list)
    finish_reason: str = "length"
    device_ms: float = 0.0
    ttft_device_ms: float = 0.0
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)


class Engine:
    def __init__(self, logits: Any, timer: Any, *, max_batch: int, max_length: int,
                 queue_size: int, eos_token_id: int | None = None) -> None:
        self.logits = logits  # steps.SequenceLogits
        self.timer = timer  # steps.StepTimer
        self.max_batch = max_batch
        self.max_length = max_length
        self.eos = eos_token_id
        self._queue: queue.Queue[Job] = queue.Queue(maxsize=queue_size)
        self._stopping = threading.Event()
        self._worker = threading.Thread(target=self._run, name="trnsim-engine", daemon=True)
        self.batches = 0
        self._registry_id: int | None = None  # the served model in trnsim's runtime registry
        self.completed = 0
        self.submitted = 0

    # --- life cycle -----------------------------------------------------------------------
    def start(self) -> None:
        """Compile every bucket before taking requests."""
        from trnsim.runtime.registry import serving_model

        self.logits.warm(self.max_batch)
        for bucket in self.logits.buckets:
            self.timer.prefill_ms(self.max_batch, bucket)
            self.timer.decode_ms(self.max_batch, bucket)
        deployment = self.timer.deployment  # for trnsim top / monitor: the cores one copy holds
        self._registry_id = serving_model(self.timer.name, deployment.instance,
                                          list(range(deployment.tensor_parallel)))
        self._worker.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Refuse new requests, finish the queued ones, then stop the worker."""
        self._stopping.set()
        if self._worker.is_alive():
            self._worker.join(timeout_s)

    @property
    def accepting(self) -> bool:
        return not self._stopping.is_set()

    # --- requests -------------------------------------------------------------------------
    def submit(self, job: Job) -> Job:
        if self._stopping.is_set():
            raise EngineStopped("the server is shutting down")
        if not job.prompt:
            raise InvalidArgumentError("the prompt is empty")
        if len(job.prompt) + job.max_tokens > self.max_length:
            raise InvalidArgumentError(
                f"prompt ({len(job.prompt)} tokens) + max_tokens ({job.max_tokens}) exceeds the "
                f"model's compiled length {self.max_length}")
        return self._enqueue(job)

    def _enqueue(self, job: Any) -> Any:
        if self._stopping.is_set():
            raise EngineStopped("the server is shutting down")
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            raise QueueFull(f"{self._queue.maxsize} requests are already waiting") from None
        self.submitted += 1
        return job

    # --- the worker -----------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            try:
                first = self._queue.get(timeout=0.05)
            except queue.Empty:
                if self._stopping.is_set():
                    return
                continue
            batch = [first]
            while len(batch) < self.max_batch:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                self._generate(batch)
            except Exception as error:  # a failed batch answers its requests, never hangs them
                for job in batch:
                    job.error = f"{type(error).__name__}: {error}"
            for job in batch:
                job.done.set()
                if job.on_done is not None:
                    job.on_done()
            self.batches += 1
            self.completed += len(batch)

    def _generate(self, batch: list[Job]) -> None:
        import torch

        from trnsim.perf.serving.tokens import warpers
        from trnsim.runtime.registry import serving_step

        rows = [list(job.prompt) for job in batch]
        active = [True] * len(batch)
        prefill = self.timer.prefill_ms(self.max_batch, bucket_for(
            max(len(r) for r in rows), self.logits.buckets, "prompt"))
        cost = prefill
        for job in batch:
            job.device_ms = job.ttft_device_ms = prefill
        generators = [torch.Generator().manual_seed(job.sampling.seed) for job in batch]
        for step in range(max(job.max_tokens for job in batch)):
            if step > 0:
                positions = max(len(r) for r, a in zip(rows, active, strict=True) if a)
                cost = self.timer.decode_ms(self.max_batch, bucket_for(
                    positions, self.logits.buckets, "sequence"))
                for job, a in zip(batch, active, strict=True):
                    if a:
                        job.device_ms += cost
            with serving_step(self._registry_id, cost):  # counters for trnsim top / monitor
                logits = self.logits.rows(rows, self.max_batch).to(torch.float32)
            for i, job in enumerate(batch):
                if not active[i]:
                    continue
                scores = logits[i:i + 1]
                if job.sampling.do_sample:
                    ids = torch.tensor([rows[i]])
                    for warp in warpers(job.sampling):
                        scores = warp(ids, scores)
                    probs = torch.nn.functional.softmax(scores, dim=-1)
                    token = int(torch.multinomial(probs, 1, generator=generators[i]))
                else:
                    token = int(torch.argmax(scores, dim=-1))
                rows[i].append(token)
                job.tokens.append(token)
                if job.on_token is not None:
                    job.on_token(token)
                if self.eos is not None and token == self.eos:
                    active[i], job.finish_reason = False, "stop"
                elif len(job.tokens) >= job.max_tokens:
                    active[i] = False
            if not any(active):
                break

