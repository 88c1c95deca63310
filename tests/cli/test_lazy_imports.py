"""Commands that trace no model never import torch or transformers (4 s of a warm start)."""

import subprocess
import sys
import textwrap

KERNEL = textwrap.dedent('''
    import trnsim.nki as nki
    import trnsim.nki.language as nl


    @nki.jit
    def double(a):
        out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.multiply(nl.load(a), 2.0))
        return out
''')

CHILD = textwrap.dedent('''
    import sys
    from trnsim.cli import main

    for argv in {commands!r}:
        try:
            main(argv)
        except SystemExit as stop:
            assert stop.code in (0, None), (argv, stop.code)
    print(sorted(m for m in ("torch", "transformers") if m in sys.modules))
''')


def test_commands_without_a_model_do_not_import_torch(tmp_path):
    kernel = tmp_path / "double.py"
    kernel.write_text(KERNEL)
    commands = [["--help"], ["instances"], ["ls", "--instance", "trn1.32xlarge", "--json"],
                ["nccom-test", "-r", "8", "-b", "1M", "-e", "1M", "allr"],
                ["kernel", "run", f"{kernel}::double", "--shapes", "128x64", "--trace", "t.json"],
                ["profile", "view", "t.json"]]
    result = subprocess.run([sys.executable, "-c", CHILD.format(commands=commands)],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_the_cli_and_the_bench_result_cache_load_no_simulator():
    """A warm `trnsim bench` reads cached results: the CLI, the bench and the cache's location
    load neither the simulator, the ISA, the NKI front end nor torch (half its import time)."""
    child = ("import sys, trnsim.cli, trnsim.perf.bench, trnsim.compiler.cache; "
             "print(sorted(m for m in ('torch', 'trnsim.sim', 'trnsim.isa', 'trnsim.nki') "
             "if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
