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
    assert manifest["shards"] == 2 and manifest["sharded"]
    code, out, err = run(capsys, "run", "mlp.trnsim", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["by_op"]["k.collective"]["kernels"] == 1  # the down projection's all-reduce
    assert report["latency_ms"] > 0


EMBEDDING_FACTORY = '''
import torch


class TokensAndKinds(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.words = torch.nn.Embedding(1000, 32)
        self.kinds = torch.nn.Embedding(3, 32)
        self.out = torch.nn.Linear(32, 8)

    def forward(self, ids, kinds):
        return self.out(self.words(ids) + self.kinds(kinds))


def make():
    torch.manual_seed(0)
    return TokensAndKinds().eval()
'''


@pytest.fixture
def embedding_model(capsys, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("TRNSIM_CACHE_DIR", "off")
    (tmp_path / "emb_factory.py").write_text(EMBEDDING_FACTORY)
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "compile", "emb_factory:make", "--input-shape", "2x16:int64",
                         "--input-shape", "2x16:int64", "-o", "emb.trnsim")
    assert code == 0, err
    return tmp_path / "emb.trnsim", out


def test_compile_says_it_wrote_a_directory_its_files_and_size(embedding_model):
    path, out = embedding_model
    files = sorted(f for f in path.rglob("*") if f.is_file())
    total = sum(f.stat().st_size for f in files)
    line = next(line for line in out.splitlines() if line.startswith("wrote"))
    assert f"wrote emb.trnsim/ (a directory of {len(files)} files" in line
    assert all(f.name in line for f in files)
    from trnsim.cli.format import size

    assert size(total) in line and "trnsim run emb.trnsim" in line


def test_run_prints_outputs_and_token_ids_span_the_table(embedding_model, capsys):
    path, _ = embedding_model
    code, out, err = run(capsys, "run", str(path))
    assert code == 0, err
    assert "ids int32[2x16]: random in [0, 1000)" in out
    assert "kinds int32[2x16]: random in [0, 3)" in out
    line = next(line for line in out.splitlines() if line.strip().startswith("output "))
    assert "float32[2x16x8]: [" in line and "mean" in line
    import trnsim
    from trnsim.cli.model import random_model_inputs

    model = trnsim.load(str(path))
    (ids, kinds), _ = random_model_inputs(model, seed=0)
    assert 100 < ids.max() < 1000 and kinds.max() == 2  # not only 0 and 1
    code, out, err = run(capsys, "run", str(path), "--json")
    data = json.loads(out)
    assert data["outputs"][0]["shape"] == [2, 16, 8] and len(data["outputs"][0]["first"]) == 4
    expected = model(ids, kinds).reshape(-1)[:4]
    assert data["outputs"][0]["first"] == pytest.approx([float(v) for v in expected])


def test_a_bad_input_shape_is_refused_before_torch_is_imported(tmp_path):
    import subprocess
    import sys

    script = ("import sys\nfrom trnsim.cli import main\ntry:\n    main(['compile', "
              "'nowhere:make', '--input-shape', '1,128'])\nexcept SystemExit as stop:\n"
              "    print(stop.code, 'torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.stdout.split() == ["2", "False"], done.stderr
    assert "bad --input-shape '1,128'; write e.g. 1x128:int64" in done.stderr
