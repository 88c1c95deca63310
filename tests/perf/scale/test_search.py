"""`--search` on a tiny space: every fitting layout, best per dollar first; Ray agrees."""

import pytest

from trnsim.perf.scale.layout import Training
from trnsim.perf.scale.model import ModelSpec
from trnsim.perf.scale.plan import plan_training
from trnsim.perf.scale.search import candidates, search
from trnsim.perf.scale.system import parse_system

MODEL = ModelSpec("tiny", layers=4, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn=128,
                  vocab=100)
SYSTEM = parse_system("trn1.32xlarge")
WORK = Training(seq=32, global_batch=128, micro_batch=1, precision="bf16")


def test_search_finds_every_fitting_layout_best_per_dollar_first(fake_timings):
    pairs = candidates(MODEL, SYSTEM, WORK, micro_batches=(1, 2))
    fake_timings(MODEL, SYSTEM, pairs)
    result = search(MODEL, SYSTEM, WORK, backend="in-process", micro_batches=(1, 2))
    assert result.evaluated == len(pairs)
    brute = []
    for layout, work in pairs:  # each candidate planned on its own
        try:
            plan = plan_training(MODEL, SYSTEM, layout, work)
        except Exception:
            continue
        if plan.fits:
            brute.append(plan)
    assert result.fitting == len(brute) == len(result.plans) > 10
    best = max(brute, key=lambda p: p.tokens_per_dollar)
    assert result.plans[0].tokens_per_dollar == pytest.approx(best.tokens_per_dollar)
    ranked = [p.tokens_per_dollar for p in result.plans]
    assert ranked == sorted(ranked, reverse=True)
    assert sorted((p.layout, p.micro_batch) for p in result.plans) == \
        sorted((p.layout, p.micro_batch) for p in brute)


def test_search_drops_layouts_that_do_not_fit(fake_timings):
    big = ModelSpec("big", layers=4, hidden=8192, heads=64, kv_heads=8, head_dim=128,
                    ffn=28672, vocab=128256)
    work = Training(seq=64, global_batch=32, micro_batch=1, precision="fp32")
    pairs = candidates(big, SYSTEM, work, micro_batches=(1,))
    fake_timings(big, SYSTEM, pairs)
    result = search(big, SYSTEM, work, backend="in-process", micro_batches=(1,))
    assert result.rejected.get("does not fit HBM", 0) > 0
    assert all(p.fits for p in result.plans)
    assert all(p.memory["total_bytes"] <= 16 * 2**30 for p in result.plans)


def test_ray_gives_the_in_process_results(fake_timings):
    pytest.importorskip("ray")
    pairs = candidates(MODEL, SYSTEM, WORK, micro_batches=(1,))
    fake_timings(MODEL, SYSTEM, pairs)
    local = search(MODEL, SYSTEM, WORK, backend="in-process", micro_batches=(1,))
    remote = search(MODEL, SYSTEM, WORK, backend="ray", micro_batches=(1,), chunks=3)
    assert remote.backend == "ray"
    assert [p.to_dict() for p in remote.plans] == [p.to_dict() for p in local.plans]
