"""CompiledModel: calling, reports, saving/loading, the compile cache, visible cores."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import trnsim  # noqa: E402
from trnsim import hardware  # noqa: E402
from trnsim.compiler import InputShapeError  # noqa: E402
from trnsim.runtime import ArtifactError, CoresUnavailableError  # noqa: E402


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(128, 256)
        self.down = torch.nn.Linear(256, 128)
        self.norm = torch.nn.LayerNorm(128)

    def forward(self, x):
        return {"y": self.norm(x + self.down(torch.nn.functional.gelu(self.up(x)))), "x2": x * 2}


@pytest.fixture
def compiled(monkeypatch, tmp_path):
    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(tmp_path / "cache"))
    torch.manual_seed(0)
    model = Block().eval()
    x = torch.randn(4, 32, 128)
    return model, x, trnsim.trace(model, (x,), instance="inf2.xlarge")


def test_call_returns_the_eager_structure(compiled):
    model, x, c = compiled
    out = c(x)
    ref = model(x)
    assert set(out) == {"y", "x2"} and out["y"].dtype == torch.float32
    assert torch.allclose(out["x2"], ref["x2"])
    assert (out["y"] - ref["y"]).abs().max() < 5e-2
    assert isinstance(c(x.numpy())["y"], np.ndarray)  # numpy in, numpy out


def test_other_shapes_are_refused_with_both_shapes(compiled):
    _, _, c = compiled
    with pytest.raises(InputShapeError, match=r"traced with .*\[4, 32, 128\], called with \[4, 16, 128\]"):
        c(torch.randn(4, 16, 128))


@pytest.mark.parametrize("instance,contend", [("inf2.xlarge", False), ("inf1.xlarge", True)])
def test_copies_that_cannot_contend_reuse_the_single_core_profile(instance, contend):
    """Two inf2 cores' DMA (2 x 272 GB/s) cannot exceed the chip's 820 GiB/s of HBM, so the
    loaded run is the single run, exactly as simulating both cores gives; four inf1 cores share
    50 GiB/s of DRAM and are simulated together."""
    from trnsim.sim import copies_contend, simulate_cores

    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 64))
    c = trnsim.trace(model.eval(), torch.randn(64, 256), instance=instance)
    copies = c.chip.logical_cores()
    assert copies_contend(c.program, copies, c.chip) is contend
    together = simulate_cores([c.program] * copies, None, mode="timing", chip=c.chip)
    assert [p.total_ns for p in c.loaded_timing(copies)] == [r.profile.total_ns for r in together]


def test_report_arithmetic(compiled):
    _, _, c = compiled
    report = c.report()
    spec = hardware.instance("inf2.xlarge")
    assert report.copies == spec.logical_cores() == 2
    assert report.batch == 4
    assert report.throughput_per_s == pytest.approx(2 * 4 / (report.loaded_latency_ms * 1e-3))
    assert report.cost_per_inference_usd == pytest.approx(0.758 / 3600 / report.throughput_per_s)
    assert report.loaded_latency_ms >= report.latency_ms * 0.999  # copies share HBM
    assert sum(report.bound.values()) == pytest.approx(1.0)
    assert "k.matmul" in report.by_op and "latency" in report.table()
    json.dumps(report.to_dict())


def test_save_and_load_need_no_model_code(compiled, tmp_path):
    _, x, c = compiled
    path = c.save(tmp_path / "block.trnsim")
    loaded = trnsim.load(path)
    a, b = c(x), loaded(x)
    assert torch.equal(a["y"], b["y"]) and torch.equal(a["x2"], b["x2"])
    assert loaded.report().latency_ms == pytest.approx(c.report().latency_ms)


def test_corrupted_or_stale_artifacts_are_clear_errors(compiled, tmp_path):
    _, _, c = compiled
    path = tmp_path / "m.trnsim"
    c.save(path)
    program = path / "program.json"
    program.write_text(program.read_text().replace('"MultiplyMoving"', '"MultiplyMovinG"'))
    with pytest.raises(ArtifactError, match="checksum"):
        trnsim.load(path)
    c.save(path)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["format"] = 0
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="format 0"):
        trnsim.load(path)
    manifest["format"] = 1  # one program and its mode, before execution plans: recompile
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="format 1; this trnsim reads format 3"):
        trnsim.load(path)
    with pytest.raises(ArtifactError, match="not a trnsim model"):
        trnsim.load(tmp_path / "nothing")


def test_second_trace_hits_the_compile_cache(compiled):
    model, x, c = compiled
    again = trnsim.trace(model, (x,), instance="inf2.xlarge")
    assert c.meta["cache_hit"] is False and again.meta["cache_hit"] is True
    assert again.program.instructions == c.program.instructions
    assert torch.equal(again(x)["y"], c(x)["y"])


def test_warm_cache_reports_without_lowering_again(compiled):
    """A cache hit keeps the program unlowered until something needs instructions; its report
    (for the same copies and instance) comes from the cache, equal to the first."""
    from trnsim.isa import Program

    model, x, c = compiled
    first = c.report()
    again = trnsim.trace(model, (x,), instance="inf2.xlarge")
    report = again.report()
    assert not isinstance(again.plan.programs[0], Program)  # never lowered
    assert report.to_dict() == first.to_dict()
    assert isinstance(again.program, Program) and again.program.instructions


def test_a_cached_report_is_not_read_after_the_simulator_changes(compiled, monkeypatch):
    from trnsim.compiler import cache as compile_module
    from trnsim.runtime.compile import report_cache_path

    c = compiled[2]
    c.report()
    before = report_cache_path(c, 2)
    assert before.exists()
    monkeypatch.setitem(compile_module._CODE_DIGESTS, compile_module.REPORT_CODE, "edited")
    assert report_cache_path(c, 2) != before


def test_more_copies_than_visible_cores_fails_like_neuron(monkeypatch):
    model = torch.nn.Linear(8, 8)
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "1")
    with pytest.raises(CoresUnavailableError, match="Requested:2 Available:1"):
        trnsim.trace(model, (torch.randn(2, 8),), cores=2)


def test_neuron_cc_flags_are_honoured(monkeypatch, tmp_path):
    monkeypatch.setenv("TRNSIM_CACHE_DIR", "off")
    monkeypatch.setenv("NEURON_CC_FLAGS", "--auto-cast none -O1")
    model = torch.nn.Linear(64, 64)
    c = trnsim.trace(model, (torch.randn(4, 64),))
    assert c.options["auto_cast"] == "none" and c.meta["ignored_flags"] == ["-O1"]
    explicit = trnsim.trace(model, (torch.randn(4, 64),), auto_cast="matmult")
    assert explicit.options["auto_cast"] == "matmult"
