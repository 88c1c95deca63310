"""The report of a compiled model's inference (trnsim.trace -> CompiledModel.profile): each
kernel the compiler emitted ("op:node" labels) is a roofline row, utilisation equals the
simulator's, and the timeline has every stream of each core."""

import pytest

from trnsim.perf.profile_report import read_trace, render
from trnsim.perf.profile_report.analysis import figures

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    import trnsim

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(),
                                torch.nn.Linear(512, 256)).eval()
    compiled = trnsim.trace(model, (torch.randn(64, 256),), instance="inf2.xlarge")
    path = compiled.profile(tmp_path_factory.mktemp("model") / "model.json")
    return compiled, read_trace(path)


def test_compiled_model_kernels_are_roofline_rows(compiled):
    model, trace = compiled
    (profile,) = model.rank_timings()
    (core,) = trace.cores
    kernels = {k.name: k for k in figures(core).kernels}
    labels = {ins.label for ins in profile.program.instructions}
    assert set(kernels) == labels and all(":" in name for name in kernels)
    matmuls = [k for k in kernels.values() if k.flops]
    assert len(matmuls) == 2  # the two Linear layers
    assert sum(k.flops for k in kernels.values()) == profile.summary.tensor_flops
    page = render(trace)
    for k in matmuls:
        assert f'data-kernel="{k.name}"' in page


def test_compiled_model_utilisation_equals_the_simulators(compiled):
    model, trace = compiled
    (profile,) = model.rank_timings()
    fig = figures(trace.cores[0])
    assert fig.total_ns == pytest.approx(profile.total_ns, rel=1e-12)
    for engine, share in profile.summary.engine_utilisation.items():
        assert fig.engine_utilisation[engine] == pytest.approx(share, rel=1e-9)
