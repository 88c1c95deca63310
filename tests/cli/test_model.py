import importlib
import json

import pytest

from trnsim.cli import main


def run(capsys, *argv):
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    out = capsys.readouterr()
    return info.value.code, out.out, out.err


FACTORY = '''
import torch

def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
'''


def test_compile_split_over_two_cores_then_run(capsys, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("TRNSIM_CACHE_DIR", "off")
    monkeypatch.setattr(importlib.import_module("trnsim.compiler.passes.tensor_parallel"),
                        "MIN_SHARD_BYTES", 0)
    (tmp_path / "tiny_tp_factory.py").write_text(FACTORY)
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "compile", "tiny_tp_factory:mlp", "--input-shape", "8x64",
                         "--instance", "trn1.2xlarge", "--tp", "2", "-o", "mlp.trnsim")
    assert code == 0, err
    assert "tensor parallel" in out and "k.collective" in out
    manifest = json.loads((tmp_path / "mlp.trnsim" / "manifest.json").read_text())
    assert manifest["tensor_parallel"] == 2 and manifest["sharded"]
    code, out, err = run(capsys, "run", "mlp.trnsim", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["by_op"]["k.collective"]["kernels"] == 1  # the down projection's all-reduce
    assert report["latency_ms"] > 0
