"""The continuous-batching scheduler against schedules worked out by hand (constant step costs:
prefill 10 ms, decode 2 ms, whatever the bucket, so every time below is countable)."""

import pytest

from trnsim.errors import InvalidArgumentError
from trnsim.perf.serving.scheduler import Replica, SchedulerConfig
from trnsim.perf.serving.simulate import SLO, simulate
from trnsim.perf.serving.workload import Request


class Costs:
    def __init__(self, prefill=10.0, decode=2.0):
        self.prefill, self.decode, self.calls = prefill, decode, []

    def prefill_ms(self, batch, length):
        self.calls.append(("prefill", batch, length))
        return self.prefill

    def decode_ms(self, batch, positions):
        self.calls.append(("decode", batch, positions))
        return self.decode


def config(**kw):
    base = dict(max_num_seqs=2, prefill_buckets=(4, 8, 16), decode_buckets=(8, 16),
                kv_blocks=100, block_size=4)
    return SchedulerConfig(**(base | kw))


def times(trace):
    return {s.request.id: (s.first_token_ms, s.finish_ms, s.itl_ms) for s in trace.sequences}


def test_prefill_first_then_batched_decode():
    # r0 arrives at 0 (3 in, 3 out), r1 at 5 (3 in, 2 out).
    # 0-10 prefill r0 (token 1 of r0); 10-20 prefill r1 (waiting since 5; token 1 of r1);
    # 20-22 decode both (r0 token 2, r1 token 2: r1 done); 22-24 decode r0 (token 3: done).
    costs = Costs()
    trace = Replica(config(), costs).run([Request(0, 0, 3, 3), Request(1, 5, 3, 2)])
    assert times(trace) == {0: (10, 24, [12, 2]), 1: (20, 22, [2])}
    assert costs.calls == [("prefill", 1, 4), ("prefill", 1, 4), ("decode", 2, 8),
                           ("decode", 2, 8)]  # one graph at max_num_seqs, KV bucket 8
    assert trace.iterations == 4 and trace.busy_ms == 24


def test_max_num_seqs_holds_back_the_second_request():
    # one slot: r1 waits until r0 finishes at 14 (10 + 2 decodes), then 14-24 its prefill.
    trace = Replica(config(max_num_seqs=1), Costs()).run([Request(0, 0, 3, 3),
                                                         Request(1, 1, 3, 1)])
    assert times(trace) == {0: (10, 14, [2, 2]), 1: (24, 24, [])}


def test_idle_replica_waits_for_the_next_arrival():
    trace = Replica(config(), Costs()).run([Request(0, 0, 3, 1), Request(1, 100, 3, 2)])
    assert times(trace) == {0: (10, 10, []), 1: (110, 112, [2])}
    assert trace.busy_ms == 22 and trace.end_ms == 112


def test_kv_bucket_and_batch_bucket_follow_the_longest_sequence():
    costs = Costs()
    cfg = config(batch_buckets=(1, 2), decode_buckets=(8, 16))
    Replica(cfg, costs).run([Request(0, 0, 6, 4)])
    # prompt 6 -> prefill bucket 8; decodes write positions 7, 8, 9 -> KV buckets 8, 8, 16
    assert costs.calls == [("prefill", 1, 8), ("decode", 1, 8), ("decode", 1, 8),
                           ("decode", 1, 16)]


def test_kv_cache_full_preempts_the_latest_sequence_and_recomputes_it():
    # 3 blocks of 4 tokens. r0 (4 in, 4 out) takes 2 blocks at admission (prompt + 1 = 5
    # positions); r1 (2 in, 4 out) the third (3 positions). 0-10 prefill r0, 10-20 prefill r1,
    # 20-22 and 22-24 decode both (r0 holds 6 then 7 positions, r1 4 then 5: r1 has 1 block).
    # At 24 r1 needs a second block and none is free: r1 (admitted last) is preempted, its
    # block freed; 24-26 r0 decodes alone (token 4: done, 2 blocks freed); 26-36 r1 is
    # recomputed (2 + 3 tokens), which yields its token 4 (done).
    cfg = config(kv_blocks=3, max_num_seqs=2)
    trace = Replica(cfg, Costs()).run([Request(0, 0, 4, 4), Request(1, 0, 2, 4)])
    got = times(trace)
    assert got[0] == (10, 26, [12, 2, 2])
    assert got[1] == (20, 36, [2, 2, 12])
    assert trace.sequences[1].preemptions == 1
    assert trace.kv_peak_blocks == 3


def test_chunked_prefill_fuses_chunks_with_decodes():
    # max 6 batched tokens. r0 (2 in, 3 out) prefills in one chunk (0-10: 2 tokens).
    # r1 (9 in, 1 out) arrives at 1: chunk of 6 - 1 decode = 5 tokens with r0's decode
    # (10-20, r0 token 2), then 4 tokens with r0's decode (20-30, r0 token 3 done, r1 token 1).
    costs = Costs()
    cfg = config(chunked_prefill=True, max_num_batched_tokens=6, prefill_buckets=(4, 8, 16))
    trace = Replica(cfg, costs).run([Request(0, 0, 2, 3), Request(1, 1, 9, 1)])
    assert times(trace) == {0: (10, 30, [10, 10]), 1: (30, 30, [])}
    assert costs.calls == [("prefill", 1, 4), ("prefill", 1, 8), ("prefill", 1, 8)]


def test_round_robin_replicas_and_report():
    requests = [Request(i, i * 1.0, 3, 3) for i in range(4)]
    report = simulate(requests, config(), Costs(), replicas=2, slo=SLO(ttft_ms=15, tpot_ms=8))
    # each replica: r(a) at a, r(a+2) at a+2 -> prefills 10 and 20, decodes 22, 24
    assert report.requests == 4
    assert report.ttft_ms["p50"] == pytest.approx(14.0)  # ttfts 10, 10(r1: 1->11), 18, 18
    assert report.tpot_ms["mean"] == pytest.approx((7 + 7 + 2 + 2) / 4)
    assert report.goodput_requests_per_s == pytest.approx(2 / (25 / 1e3))  # r0, r1 meet both


def test_request_longer_than_the_largest_bucket_is_refused():
    with pytest.raises(InvalidArgumentError, match="max_model_len"):
        Replica(config(), Costs()).run([Request(0, 0, 10, 10)])


def test_speculative_decoding_all_drafts_accepted():
    # k = 2 draft tokens, every one accepted: each decode iteration yields 3 tokens.
    # Target: prefill 10, decode 2; draft: prefill 1, decode 0.5.
    # 0-11 prefill r0 on target and draft (token 1); 11-14 two draft steps (1) + verification
    # (2): tokens 2-4; 14-17 tokens 5-7: done (7 out).
    target, draft = Costs(), Costs(prefill=1.0, decode=0.5)
    trace = Replica(config(speculation=2), target, draft).run([Request(0, 0, 3, 7)])
    assert times(trace) == {0: (11, 17, [3, 3])}
    # verification: the target's graph at max_num_seqs x (k + 1) rows, KV bucket of the last
    # candidate (3 prompt + 1 + 2 ahead = 6 -> 8; then 9 -> 16, within the request's 10)
    assert target.calls == [("prefill", 1, 4), ("decode", 6, 8), ("decode", 6, 16)]
    assert draft.calls == [("prefill", 1, 4), ("decode", 2, 8), ("decode", 2, 8),
                           ("decode", 2, 8), ("decode", 2, 8)]
    assert trace.iterations == 3


def test_speculative_decoding_nothing_accepted_yields_one_token_per_iteration():
    # acceptance 0: each iteration costs the 2 draft steps and the verification (3 ms) and
    # yields only the target's own token: 6 iterations after the 11 ms prefill.
    trace = Replica(config(speculation=2, acceptance_rate=0.0), Costs(),
                    Costs(prefill=1.0, decode=0.5)).run([Request(0, 0, 3, 7)])
    assert times(trace) == {0: (11, 29, [3] * 6)}


def test_speculative_decoding_stops_at_the_requested_length():
    # 4 tokens out with k = 4 all accepted: the one decode iteration yields only the 3 left
    trace = Replica(config(speculation=4, decode_buckets=(8, 16)), Costs(),
                    Costs(prefill=1.0, decode=0.5)).run([Request(0, 0, 3, 4)])
    assert times(trace) == {0: (11, 15, [4])}
    assert trace.sequences[0].generated == 4


def test_speculative_acceptance_follows_the_geometric_mean():
    # tokens per iteration (1 + accepted drafts) average (1 - a^(k+1)) / (1 - a)
    k, a = 4, 0.6
    trace = Replica(config(speculation=k, acceptance_rate=a, decode_buckets=(4096,),
                           kv_blocks=2000), Costs(), Costs(1.0, 0.5)).run([Request(0, 0, 3, 4000)])
    decode_iterations = trace.iterations - 1
    mean = (4000 - 1) / decode_iterations
    assert mean == pytest.approx((1 - a ** (k + 1)) / (1 - a), rel=0.05)


def test_speculation_needs_a_draft_model_and_no_chunked_prefill():
    with pytest.raises(InvalidArgumentError, match="draft"):
        Replica(config(speculation=2), Costs())
    with pytest.raises(InvalidArgumentError, match="chunked prefill"):
        config(speculation=2, chunked_prefill=True, max_num_batched_tokens=64)
    with pytest.raises(InvalidArgumentError, match="acceptance_rate"):
        config(speculation=2, acceptance_rate=1.5)
