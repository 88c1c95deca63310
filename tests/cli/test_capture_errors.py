"""A model torch.export cannot capture ends in trnsim's one error line on stderr: torch's own
log lines (fake-tensor tracebacks) and prints (the partial graph) are not shown before it."""

import pytest

pytest.importorskip("torch")

MODELS = '''
import torch

class WrongShapes(torch.nn.Module):
    def forward(self, x):
        return x @ torch.ones(3, 3)

class DataDependent(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2
        return x

class NonZero(torch.nn.Module):
    def forward(self, x):
        return torch.nonzero(x)

def wrong_shapes():
    return WrongShapes()

def data_dependent():
    return DataDependent()

def non_zero():
    return NonZero()
'''


@pytest.mark.parametrize("factory,message", [
    ("wrong_shapes", "the model raised RuntimeError: a and b must have same reduction dim"),
    ("data_dependent", "data-dependent control flow"),
    ("non_zero", "unsupported operator call(s)"),
])
def test_only_the_clean_error_reaches_stderr(tmp_path, monkeypatch, capfd, factory, message):
    from trnsim.cli import main

    monkeypatch.setenv("TRNSIM_CACHE_DIR", "off")
    (tmp_path / f"capture_{factory}.py").write_text(MODELS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SystemExit) as exit_:
        main(["compile", f"capture_{factory}:{factory}", "--input-shape", "4x4",
              "-o", str(tmp_path / "out.trnsim")])
    out, err = capfd.readouterr()
    assert exit_.value.code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trnsim: error: "), err[-3000:]
    assert message in lines[0] and f"capture_{factory}.py:" in lines[0]


def test_a_successful_export_still_shows_what_torch_logs(monkeypatch):
    """Held records are replayed when export succeeds (nothing the user asked torch to log is
    lost)."""
    import logging

    import torch

    from trnsim.compiler.export_context import quiet_torch

    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logger = logging.getLogger("torch._trnsim_test")
    logger.addHandler(handler)
    try:
        with quiet_torch():
            logger.error("kept for later")
            assert seen == []
        assert seen == ["kept for later"]
        with pytest.raises(RuntimeError), quiet_torch():
            logger.error("dropped with the failure")
            raise RuntimeError
        assert seen == ["kept for later"]
    finally:
        logger.removeHandler(handler)
    assert torch is not None
