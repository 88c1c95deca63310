"""Unmodified neuronxcc.nki code runs: the sys.modules shim, `python -m trnsim.run`, the CLI."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from trnsim.cli import main
from trnsim.nki import compat

KERNEL_FILE = textwrap.dedent('''
    import numpy as np
    import neuronxcc.nki as nki
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl
    from neuronxcc.nki.isa.constants import engine


    @nki.jit
    def scaled_add(a, b):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        x = nl.load(a)
        y = nl.load(b)
        z = nisa.tensor_tensor(x, y, op=np.add, engine=engine.vector)
        nl.store(out, value=nl.multiply(z, 0.5))
        return out
''')

TEST_FILE = textwrap.dedent('''
    import numpy as np
    import neuronxcc.nki as nki
    from kernel_mod import scaled_add


    def test_scaled_add():
        a = np.random.rand(128, 64).astype(np.float32)
        b = np.random.rand(128, 64).astype(np.float32)
        out = nki.simulate_kernel(scaled_add, a, b)
        assert np.allclose(out, (a + b) / 2)
''')


def test_install_makes_neuronxcc_imports_resolve():
    compat.install("neuronxcc")
    try:
        import neuronxcc.nki.language as nl

        from trnsim.nki import language

        assert nl is language
        assert "neuronxcc" not in {p.split(".")[0] for p in __import__("trnsim").__path__}
    finally:
        compat.uninstall()
    assert "neuronxcc.nki" not in sys.modules


def test_unmodified_kernel_and_its_pytest_run_via_trnsim_run(tmp_path):
    (tmp_path / "kernel_mod.py").write_text(KERNEL_FILE)
    (tmp_path / "test_kernel_mod.py").write_text(TEST_FILE)
    result = subprocess.run([sys.executable, "-m", "trnsim.run", "-m", "pytest", "-q", "-p",
                             "no:cacheprovider", str(tmp_path)], capture_output=True, text=True,
                            env={**__import__("os").environ, "TRNSIM_NEURONXCC": "1"}, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_cli_kernel_run_prints_latency_and_where_time_went(tmp_path, capsys):
    path = tmp_path / "kernel_mod.py"
    path.write_text(KERNEL_FILE)
    profile = tmp_path / "trace.json"
    with pytest.raises(SystemExit) as info:
        main(["kernel", "run", f"{path}::scaled_add", "--shapes", "128x512,128x512", "--target", "trn2",
              "--profile", str(profile)])
    out = capsys.readouterr().out
    assert info.value.code == 0
    assert "on NeuronCore-v3:" in out and "where the time went" in out
    assert profile.exists()


def test_cli_kernel_run_bad_shape_exits_2(tmp_path, capsys):
    path = tmp_path / "kernel_mod.py"
    path.write_text(KERNEL_FILE)
    with pytest.raises(SystemExit) as info:
        main(["kernel", "run", f"{path}::scaled_add", "--shapes", "128xz"])
    assert info.value.code == 2 and "bad shape" in capsys.readouterr().err


def test_torch_tensors_in_and_out():
    torch = pytest.importorskip("torch")
    from trnsim import nki
    from trnsim.nki import language as nl

    @nki.jit
    def k(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.exp(nl.load(x)))
        return out

    x = torch.randn(16, 8, dtype=torch.bfloat16)
    y = k(x)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.bfloat16
    np.testing.assert_allclose(y.float().numpy(), torch.exp(x.float()).numpy(), rtol=1e-2)


def test_kernel_run_says_which_dtypes_its_inputs_have(capsys):
    """A dtype after the last shape is every input's, and the command says what it used."""
    from trnsim.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["kernel", "run", "trnsim.kernels.tutorials::matmul_optimized", "--shapes",
              "1024x2048,1024x1024:bfloat16", "--timing-only", "--json"])
    assert stop.value.code in (0, None), capsys.readouterr().err
    data = json.loads(capsys.readouterr().out)
    assert [i["dtype"] for i in data["inputs"]] == ["bfloat16", "bfloat16"]
    assert data["latency_us"] > 0
    with pytest.raises(SystemExit) as stop:
        main(["kernel", "run", "trnsim.kernels.tutorials::matmul_optimized", "--shapes",
              "1024x2048:bfloat16,1024x1024"])
    assert stop.value.code == 2 and "name one on every shape" in capsys.readouterr().err
