"""Models on Trainium2 under LNC=2 (its default): one logical NeuronCore runs as two physical
NeuronCore-v3s, each kernel split between them, sharing HBM."""

import pytest
import torch

import trnsim
from trnsim.isa import CoreBarrier


class _Mlp(torch.nn.Module):
    """Decode-shaped: two tokens through 8 MiB fp32 weights (worth splitting), then a norm."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(1024, 2048)
        self.down = torch.nn.Linear(2048, 1024)
        self.norm = torch.nn.LayerNorm(1024)

    def forward(self, x):
        return self.norm(x + self.down(torch.nn.functional.gelu(self.up(x))))


@pytest.fixture(scope="module")
def mlp():
    torch.manual_seed(0)
    model = _Mlp().eval()
    x = torch.randn(2, 1024)
    compiled = {lnc: trnsim.trace(model, (x,), instance="trn2.48xlarge", auto_cast="none", lnc=lnc)
                for lnc in (1, 2)}
    return model, x, compiled


def _barriers(program) -> int:
    return sum(isinstance(i, CoreBarrier) for i in program.instructions)


def test_lnc2_splits_the_model_over_two_programs_that_meet_at_barriers(mlp):
    _, _, compiled = mlp
    assert len(compiled[1].programs()) == 1
    core0, core1 = compiled[2].programs()
    assert _barriers(core0) == _barriers(core1) >= 1  # the norm reads both halves of `down`
    assert trnsim.trace(_Mlp().eval(), (torch.randn(2, 1024),),  # the default on trn2
                        instance="trn2.48xlarge", auto_cast="none").plan.physical == 2


def test_lnc2_computes_what_eager_pytorch_computes(mlp):
    model, x, compiled = mlp
    with torch.no_grad():
        want = model(x)
    for lnc in (1, 2):
        torch.testing.assert_close(compiled[lnc](x), want, rtol=1e-5, atol=1e-5)


def test_each_core_streams_half_the_weights_and_the_step_takes_about_half_as_long(mlp):
    _, _, compiled = mlp
    one = compiled[1].timing()
    halves = compiled[2].rank_timings()
    assert len(halves) == 2
    for profile in halves:
        assert profile.summary.hbm_read_bytes < 0.6 * one.summary.hbm_read_bytes
    assert compiled[2].timing().total_ns < 0.7 * one.total_ns


def test_the_report_counts_logical_cores_by_the_models_lnc(mlp):
    _, _, compiled = mlp
    two, one = compiled[2].report(), compiled[1].report()
    assert two.copies == 64 and one.copies == 128  # trn2.48xlarge: 16 chips x 4 or 8 cores
    assert "LNC=2" in two.notes[0] and "16 chip(s)" in two.notes[0]
    assert "16 chip(s)" in one.notes[0]
    assert two.throughput_per_s == pytest.approx(64 * 2 / (two.loaded_latency_ms * 1e-3))


def test_small_kernels_stay_whole_on_core_0():
    """Splitting kernels this small would cost more in hand-overs than it saves."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
    x = torch.randn(4, 64)
    two = trnsim.trace(model, (x,), instance="trn2.48xlarge", auto_cast="none", lnc=2)
    one = trnsim.trace(model, (x,), instance="trn2.48xlarge", auto_cast="none", lnc=1)
    core0, core1 = two.programs()
    assert _barriers(core0) == 0 and not any(i.engine.name != "DMA" and i.flops()
                                              for i in core1.instructions)
    assert two.timing().total_ns == pytest.approx(one.timing().total_ns)
    torch.testing.assert_close(two(x), model(x), rtol=1e-5, atol=1e-5)


def test_a_saved_lnc2_model_loads_with_both_programs(mlp, tmp_path):
    _, x, compiled = mlp
    path = compiled[2].save(tmp_path / "mlp.trnsim")
    loaded = trnsim.load(path)
    assert len(loaded.programs()) == 2
    torch.testing.assert_close(loaded(x), compiled[2](x), rtol=0, atol=0)


def test_lnc_splits_only_trainium2_and_newer():
    assert trnsim.trace(_Mlp().eval(), (torch.randn(2, 1024),),
                        instance="inf2.xlarge").plan.physical == 1


def test_each_tensor_parallel_rank_is_a_pair_of_cores_that_both_join_its_collectives():
    torch.manual_seed(0)
    model = _Mlp().eval()
    x = torch.randn(2, 1024)
    ranks = {lnc: trnsim.trace(model, (x,), instance="trn2.48xlarge", tensor_parallel=2,
                               auto_cast="none", lnc=lnc) for lnc in (1, 2)}
    programs = ranks[2].programs()  # rank 0's two physical cores, then rank 1's
    pairs = [programs[:2], programs[2:]]
    assert [len(p) for p in pairs] == [2, 2]
    collectives = [sum(type(i).__name__ == "CollectiveOp" for i in p.instructions)
                   for p in pairs[0]]
    assert collectives[0] == collectives[1] >= 1
    with torch.no_grad():
        want = model(x)
    torch.testing.assert_close(ranks[2](x), want, rtol=1e-5, atol=1e-5)
    assert len(ranks[2].rank_timings()) == 4
    assert ranks[2].timing().total_ns < ranks[1].timing().total_ns
    assert "LNC=2" in ranks[2].report().notes[0]
