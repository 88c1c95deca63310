"""`serve --search` (the cheapest layout meeting p99 targets) and `--plot` (the PNG written), on a
tiny space with constant step costs so each candidate's outcome is countable by hand."""

import pytest

from trnsim.perf.serving.deploy import Layout, SchedulerChoices, search
from trnsim.perf.serving.models import ModelSource
from trnsim.perf.serving.simulate import SLO
from trnsim.perf.serving.workload import Request

MODEL = ModelSource("tiny", {"hidden_size": 64, "num_attention_heads": 4,
                             "num_key_value_heads": 2, "num_hidden_layers": 2,
                             "max_position_embeddings": 256}, build=lambda: None)


class Costs:
    def __init__(self, decode):
        self.decode = decode

    def prefill_ms(self, batch, length):
        return 10.0

    def decode_ms(self, batch, positions):
        return self.decode


# One request every 10 ms, 3 prompt tokens, 2 output tokens (one decode step each).
# One replica: each prefill alone takes the 10 ms between arrivals, so the queue (and TTFT)
# grows without bound. Two replicas (round-robin): each gets a request every 20 ms and finishes
# it in 10 + decode <= 18 ms, so every TTFT is the 10 ms prefill and TPOT the decode step.
REQUESTS = [Request(i, 10.0 * i, 3, 2) for i in range(200)]
DECODE = {("inf2.xlarge", 1): 20.0, ("inf2.xlarge", 2): 8.0, ("trn1.2xlarge", 2): 8.0}


def costs_for(layout):
    return Costs(DECODE[layout.instance, layout.tensor_parallel]), 1 << 20


def test_search_picks_the_cheapest_layout_meeting_both_targets():
    candidates = [Layout("trn1.2xlarge", 2), Layout("inf2.xlarge", 1), Layout("inf2.xlarge", 2)]
    rows = search(MODEL, candidates, SchedulerChoices(max_num_seqs=8), REQUESTS, costs_for,
                  SLO(ttft_ms=12.0, tpot_ms=10.0), max_instances=3)
    best, runner_up, unmet = rows
    # TP2 takes both cores of a 2-core instance (one replica each): two instances are needed
    assert (best["instance"], best["tp"], best["instances"], best["meets"]) == \
        ("inf2.xlarge", 2, 2, True)
    assert best["price_per_hour"] == pytest.approx(2 * 0.758)
    assert best["ttft_p99_ms"] == pytest.approx(10.0) and best["tpot_p99_ms"] == 8.0
    assert (runner_up["instance"], runner_up["instances"], runner_up["meets"]) == \
        ("trn1.2xlarge", 2, True)
    assert runner_up["price_per_hour"] > best["price_per_hour"]
    # TP1's 20 ms decode step misses the TPOT target however many instances serve
    assert (unmet["instance"], unmet["tp"], unmet["meets"]) == ("inf2.xlarge", 1, False)
    assert unmet["tpot_p99_ms"] == 20.0


def test_search_needs_a_target():
    from trnsim.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="--slo-ttft-ms"):
        search(MODEL, [Layout("inf2.xlarge", 2)], SchedulerChoices(), REQUESTS, costs_for, SLO())


def test_plot_writes_a_png_of_latency_against_load(tmp_path):
    pytest.importorskip("matplotlib")
    from trnsim.perf.serving.plot import serving_plot

    points = [{"rate": r, "ttft_ms": {"p50": 10.0 * r, "p99": 20.0 * r},
               "tpot_ms": {"p50": 2.0, "p99": 3.0 * r}} for r in (1.0, 2.0, 4.0)]
    path = tmp_path / "load.png"
    serving_plot(points, str(path), title="tiny")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
