"""Continuous batching on one replica, as vLLM on Neuron schedules it, simulated step by step.

The replica is one copy of the model (its tensor-parallel group). Each iteration runs one
compiled graph and takes the simulated time of that graph (`StepCosts`), so the clock moves by
whole steps, as a device that runs one program at a time:

- **Prefill first, one at a time.** When a request waits, a sequence slot is free
  (``max_num_seqs``) and the KV cache has blocks for its prompt, the iteration is that request's
  context encoding at the prompt's bucket (vLLM-neuron's NeuronScheduler: one prefill per
  iteration, ``ctx_batch_size=1``). It yields the request's first token.
- **Otherwise decode** every running sequence: one token each, in the token-generation graph at
  the batch bucket holding the running count (NxD Inference compiles one batch size,
  ``max_num_seqs``, unless batch buckets are given) and the KV bucket holding the longest
  sequence.
- **Chunked prefill** (optional): a prompt is encoded ``max_num_batched_tokens`` at a time, each
  chunk fused with one decode token of every running sequence; such an iteration costs the
  context-encoding graph over all its tokens (ASSUMPTION `FUSED_CHUNK_COST`).
- **Paged KV cache**: ``kv_blocks`` blocks of ``block_size`` tokens. A sequence holds the blocks
  its tokens fill; when a decode needs a block and none is free, the most recently admitted
  sequence is preempted and recomputed later (vLLM's recompute preemption), its blocks freed.
- **Speculative decoding** (optional, ``speculation`` = k draft tokens, as vLLM on Neuron runs a
  draft model): a prompt is encoded by the draft model too; each decode iteration runs the
  draft's token-generation graph k times (k candidate tokens per sequence, one after another),
  then the target once over the k candidates plus the position after them, which verifies them.
  Each candidate is accepted with probability ``acceptance_rate`` (independently, seeded) until
  the first rejection; a sequence gains its accepted candidates plus the target's own next token
  (so 1 to k + 1 tokens an iteration), and holds KV blocks for the k speculated positions.
  The verification's cost is ASSUMPTION `VERIFY_COST`.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field

from trnsim.errors import InvalidArgumentError
from trnsim.perf.serving.buckets import bucket_for
from trnsim.perf.serving.steps import StepCosts
from trnsim.perf.serving.workload import Request

# ASSUMPTION: a chunked-prefill iteration (a prompt chunk plus one token per decoding sequence)
# costs the context-encoding graph over that many tokens: the weights are read once for all of
# them and the chunk's attention to its own earlier chunks is not timed separately.
FUSED_CHUNK_COST = "context-encoding graph over chunk + decode tokens"
# ASSUMPTION: the target's verification of k candidates per sequence (k + 1 query positions
# against the KV cache) costs its token-generation graph with k + 1 rows per sequence at the KV
# bucket of the last candidate: the weights are read once for every row, as in the fused
# graph; each row's read of the cache is counted separately (an upper bound on that part).
VERIFY_COST = "token-generation graph at batch x (k + 1) rows"


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int
    prefill_buckets: tuple[int, ...]
    decode_buckets: tuple[int, ...]  # KV positions
    kv_blocks: int
    block_size: int = 32  # vLLM on Neuron's default block size
    batch_buckets: tuple[int, ...] | None = None  # None: one graph at max_num_seqs
    chunked_prefill: bool = False
    max_num_batched_tokens: int = 512
    speculation: int = 0  # k draft tokens per decode iteration (0: no draft model)
    acceptance_rate: float = 1.0  # each draft token's chance that the target accepts it
    seed: int = 0  # of the acceptance draws

    def __post_init__(self) -> None:
        if self.speculation < 0 or not 0.0 <= self.acceptance_rate <= 1.0:
            raise InvalidArgumentError(
                f"speculation must be >= 0 and acceptance_rate within [0, 1]; got "
                f"{self.speculation}, {self.acceptance_rate}")
        if self.speculation and self.chunked_prefill:
            raise InvalidArgumentError("speculative decoding and chunked prefill cannot be "
                                       "combined (vLLM on Neuron schedules one or the other)")
        if self.max_num_seqs < 1 or self.block_size < 1 or self.kv_blocks < 1:
            raise InvalidArgumentError(
                f"max_num_seqs, block_size and kv_blocks must be >= 1; got {self.max_num_seqs}, "
                f"{self.block_size}, {self.kv_blocks}")
        if self.chunked_prefill and self.max_num_batched_tokens <= self.max_num_seqs:
            raise InvalidArgumentError(
                f"max_num_batched_tokens {self.max_num_batched_tokens} must exceed max_num_seqs "
                f"{self.max_num_seqs} to leave room for a prompt chunk")

    @property
    def max_model_len(self) -> int:
        return self.decode_buckets[-1]

    def decode_batch(self, running: int) -> int:
        return bucket_for(running, self.batch_buckets, "batch") if self.batch_buckets \
            else self.max_num_seqs


@dataclass(eq=False, slots=True)  # compared by identity: a sequence is one request's life
class Sequence:
    request: Request
    admitted: int = 0  # admission order, for preemption
    prefilled: int = 0  # tokens of prompt (+ recomputed output) in the KV cache
    generated: int = 0
    blocks: int = 0
    first_token_ms: float | None = None
    last_token_ms: float = 0.0
    finish_ms: float | None = None
    preemptions: int = 0
    itl_ms: list[float] = field(default_factory=list)

    @property
    def prompt(self) -> int:
        """Tokens to encode before the next token: the prompt, plus output already produced
        when the sequence was preempted and is recomputed."""
        return self.request.input_tokens + self.generated

    @property
    def positions(self) -> int:
        """KV positions the next decode step holds: the prompt, the tokens generated before
        the last one, and the last one, whose key and value that step writes."""
        return self.request.input_tokens + self.generated


@dataclass
class ReplicaTrace:
    sequences: list[Sequence]
    busy_ms: float
    end_ms: float
    iterations: int
    prefill_iterations: int
    kv_block_ms: float  # integral of blocks in use over time
    kv_peak_blocks: int
    kv_blocks: int


class Replica:
    """Runs `requests` (sorted by arrival) through the scheduler; `run()` returns the trace."""

    def __init__(self, config: SchedulerConfig, costs: StepCosts,
                 draft: StepCosts | None = None) -> None:
        if config.speculation and draft is None:
            raise InvalidArgumentError("speculative decoding needs the draft model's step costs")
        self.config = config
        self.costs = costs
        self.draft = draft if config.speculation else None
        self.free_blocks = config.kv_blocks
        self._accept = random.Random(config.seed)

    def _blocks(self, tokens: int) -> int:
        return math.ceil(tokens / self.config.block_size)

    def run(self, requests: list[Request]) -> ReplicaTrace:
        cfg = self.config
        for r in requests:
            if r.input_tokens + r.output_tokens > cfg.max_model_len:
                raise InvalidArgumentError(
                    f"request {r.id}: {r.input_tokens} + {r.output_tokens} tokens exceed the "
                    f"largest compiled sequence ({cfg.max_model_len}, max_model_len)")
            if self._blocks(r.input_tokens + r.output_tokens) > cfg.kv_blocks:
                raise InvalidArgumentError(
                    f"request {r.id} needs {self._blocks(r.input_tokens + r.output_tokens)} KV "
                    f"blocks; the cache holds {cfg.kv_blocks}")
        pending = deque(requests)
        waiting: deque[Sequence] = deque()
        running: list[Sequence] = []
        done: list[Sequence] = []
        prefilling: Sequence | None = None  # chunked prefill in progress
        now = busy = kv_integral = 0.0
        iterations = prefills = peak = admitted = 0
        while pending or waiting or running or prefilling:
            while pending and pending[0].arrival_ms <= now:
                waiting.append(Sequence(pending.popleft()))
            if not (waiting or running or prefilling):
                now = pending[0].arrival_ms
                continue
            if prefilling is None and waiting and len(running) < cfg.max_num_seqs \
                    and self._blocks(waiting[0].prompt + 1) <= self.free_blocks:
                prefilling = waiting.popleft()
                admitted += 1
                prefilling.admitted = admitted
                prefilling.prefilled = 0
                prefilling.blocks = self._blocks(prefilling.prompt + 1)
                self.free_blocks -= prefilling.blocks
            gained: dict[int, int] = {}
            if prefilling is not None and not cfg.chunked_prefill:
                bucket = bucket_for(prefilling.prompt, cfg.prefill_buckets, "prompt")
                step = self.costs.prefill_ms(1, bucket)
                if self.draft is not None:  # the draft model encodes the prompt too
                    step += self.draft.prefill_ms(1, bucket)
                finished_prefill, decoding = prefilling, []
                prefills += 1
            else:
                decoding = self._make_room(running, waiting)
                if self.draft is not None and prefilling is None and decoding:
                    step, gained = self._speculative_step(decoding)
                    finished_prefill = None
                else:
                    step, finished_prefill = self._mixed_step(prefilling, decoding)
                prefills += prefilling is not None
            used = cfg.kv_blocks - self.free_blocks
            kv_integral += used * step
            peak = max(peak, cfg.kv_blocks - self.free_blocks)
            now += step
            busy += step
            iterations += 1
            for seq in decoding:
                self._emit(seq, now, gained.get(id(seq), 1))
            if finished_prefill is not None:
                finished_prefill.prefilled = finished_prefill.prompt
                self._emit(finished_prefill, now)
                running.append(finished_prefill)
                prefilling = None
            for seq in [s for s in running if s.generated >= s.request.output_tokens]:
                running.remove(seq)
                seq.finish_ms = now
                self.free_blocks += seq.blocks
                seq.blocks = 0
                done.append(seq)
        done.sort(key=lambda s: s.request.id)
        return ReplicaTrace(done, busy, now, iterations, prefills, kv_integral, peak,
                            cfg.kv_blocks)

    def _mixed_step(self, prefilling: Sequence | None, decoding: list[Sequence]
                    ) -> tuple[float, Sequence | None]:
        """A decode iteration, or (chunked prefill) a prompt chunk fused with the decodes."""
        cfg = self.config
        if prefilling is None:
            if not decoding:
                return 0.0, None
            positions = max(s.positions for s in decoding)
            return self.costs.decode_ms(cfg.decode_batch(len(decoding)),
                                        bucket_for(positions, cfg.decode_buckets, "sequence")), None
        chunk = min(prefilling.prompt - prefilling.prefilled,
                    cfg.max_num_batched_tokens - len(decoding))
        prefilling.prefilled += chunk
        tokens = chunk + len(decoding)
        step = self.costs.prefill_ms(1, bucket_for(tokens, cfg.prefill_buckets, "chunk"))
        return step, prefilling if prefilling.prefilled >= prefilling.prompt else None

    def _speculative_step(self, decoding: list[Sequence]) -> tuple[float, dict[int, int]]:
        """k draft steps and the target's verification; the tokens each sequence gains."""
        cfg, k = self.config, self.config.speculation
        batch = cfg.decode_batch(len(decoding))

        def bucket(ahead: int) -> int:  # KV positions of the longest sequence `ahead` further
            return bucket_for(max(self._lookahead(s, ahead) for s in decoding),
                              cfg.decode_buckets, "sequence")

        step = sum(self.draft.decode_ms(batch, bucket(i)) for i in range(k))
        step += self.costs.decode_ms(batch * (k + 1), bucket(k))
        gained = {}
        for seq in decoding:
            accepted = 0
            while accepted < k and self._accept.random() < cfg.acceptance_rate:
                accepted += 1
            gained[id(seq)] = min(accepted + 1, seq.request.output_tokens - seq.generated)
        return step, gained

    @staticmethod
    def _lookahead(seq: Sequence, ahead: int) -> int:
        """KV positions `ahead` tokens past the next one, within the request's own length."""
        return min(seq.positions + ahead, seq.request.input_tokens + seq.request.output_tokens)

    def _make_room(self, running: list[Sequence], waiting: deque[Sequence]) -> list[Sequence]:
        """The sequences that decode this iteration, each with a block for its next token;
        preempts the latest admitted ones (back to the front of the queue) when blocks run out."""
        if not running:
            return []
        size = self.config.block_size
        k = self.config.speculation
        needs = [max(-(-self._lookahead(s, k) // size) - s.blocks, 0) for s in running]
        if sum(needs) <= self.free_blocks:  # the common case: room for every sequence
            for seq, need in zip(running, needs, strict=True):
                seq.blocks += need
            self.free_blocks -= sum(needs)
            return list(running)
        for seq in sorted(running, key=lambda s: s.admitted):
            if seq not in running:
                continue
            need = self._blocks(self._lookahead(seq, k)) - seq.blocks
            while need > self.free_blocks:
                victim = max(running, key=lambda s: s.admitted)
                running.remove(victim)
                self.free_blocks += victim.blocks
                victim.blocks = 0
                victim.preemptions += 1
                waiting.appendleft(victim)
                if victim is seq:
                    break
            if seq in running and need > 0:
                self.free_blocks -= need
                seq.blocks += need
        return list(running)

    @staticmethod
    def _emit(seq: Sequence, now: float, tokens: int = 1) -> None:
        """`tokens` new tokens at `now` (more than one with speculation: they reach a streaming
        client together, so they make one inter-token gap)."""
        if seq.first_token_ms is None:
            seq.first_token_ms = now
        else:
            seq.itl_ms.append(now - seq.last_token_ms)
        seq.last_token_ms = now
        seq.generated += tokens
