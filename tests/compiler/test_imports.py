"""`import trnsim` and `import trnsim.compiler` must not import torch (the kernel path needs none)."""

import subprocess
import sys


def test_importing_the_compiler_does_not_import_torch():
    code = ("import sys, trnsim, trnsim.compiler; "
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
