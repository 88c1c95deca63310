"""neuron-cc's NeuronCore Pipeline on inf1: stages on cores, results, latency and throughput."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import trnsim  # noqa: E402
from trnsim.compiler import options_from_env  # noqa: E402
from trnsim.errors import UnsupportedError  # noqa: E402
from trnsim.sim.execution_plan import weights_on_chip  # noqa: E402


class Stack(torch.nn.Module):
    def __init__(self, layers=4, width=256):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = torch.nn.functional.gelu(layer(x))
        return x, x.sum(-1)


@pytest.fixture
def model(monkeypatch):
    monkeypatch.setenv("TRNSIM_CACHE_DIR", "off")
    torch.manual_seed(0)
    return Stack().eval(), (torch.randn(8, 256),)


def test_stages_give_the_models_results_and_time_one_after_another(model):
    net, inputs = model
    whole = trnsim.trace(net, inputs, instance="inf1.xlarge")
    staged = trnsim.trace(net, inputs, instance="inf1.xlarge", pipeline_cores=4)
    assert len(staged.plan.stages()) == 4 and staged.options["cores"] == 4
    with torch.no_grad():
        want = net(*inputs)
    for got, ref, single in zip(staged(*inputs), want, whole(*inputs), strict=True):
        np.testing.assert_array_equal(got.numpy(), single.numpy())  # same kernels, same numbers
        assert np.abs(got.numpy() - ref.numpy()).max() < 2e-2 * np.abs(ref.numpy()).max()
    report = staged.report()
    alone = staged.rank_timings()
    assert report.latency_ms == pytest.approx(sum(p.total_ns for p in alone) / 1e6)
    streaming = staged.loaded_timing()
    assert report.throughput_per_s == pytest.approx(
        8 / (max(p.total_ns for p in streaming) * 1e-9))  # one copy on inf1.xlarge's 4 cores
    assert "4 stages" in report.notes[0] and "cached on chip" in report.notes[0]
    assert report.kernels[-1].end_ns == pytest.approx(report.latency_ms * 1e6, rel=1e-9)


def test_small_stages_cache_their_weights_and_stream_faster(model):
    net, inputs = model
    whole = trnsim.trace(net, inputs, instance="inf1.xlarge").report()
    staged = trnsim.trace(net, inputs, instance="inf1.xlarge", pipeline_cores=4)
    assert all(weights_on_chip(p) for p in staged.programs())  # 128 KiB each
    report = staged.report()
    assert report.hbm_read_bytes < whole.hbm_read_bytes  # weights come from on-chip memory
    assert report.throughput_per_s > whole.throughput_per_s / 4  # vs one copy on one core


def test_pipeline_mode_is_neuron_ccs_and_inf1s(model, monkeypatch):
    net, inputs = model
    with pytest.raises(UnsupportedError, match="Inferentia"):
        trnsim.trace(net, inputs, instance="inf2.xlarge", pipeline_cores=2)
    monkeypatch.setenv("NEURON_CC_FLAGS", "--neuroncore-pipeline-cores 2")
    assert options_from_env().pipeline_cores == 2
    staged = trnsim.trace(net, inputs, instance="inf1.xlarge")
    assert len(staged.plan.stages()) == 2


def test_a_pipelined_model_saves_and_loads(model, tmp_path):
    net, inputs = model
    staged = trnsim.trace(net, inputs, instance="inf1.xlarge", pipeline_cores=3)
    loaded = trnsim.load(staged.save(tmp_path / "staged.trnsim"))
    assert len(loaded.plan.stages()) == 3
    assert [weights_on_chip(p) for p in loaded.programs()] == \
        [weights_on_chip(p) for p in staged.programs()]
    for got, want in zip(loaded(*inputs), staged(*inputs), strict=True):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert loaded.report().latency_ms == pytest.approx(staged.report().latency_ms)
    (tmp_path / "staged.trnsim" / "program.p2.json").write_text("{}")
    with pytest.raises(trnsim.runtime.ArtifactError, match="checksum"):
        trnsim.load(tmp_path / "staged.trnsim")
