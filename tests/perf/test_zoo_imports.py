"""Deferred optional imports while a zoo model is built (`trnsim.perf.zoo_imports`).

Each check runs in a fresh interpreter: the test process may have imported scipy.optimize already,
and a deferred module must be one nobody has imported yet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _run(code: str) -> dict:
    env = {**os.environ, "PYTHONPATH": SRC}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_listed_function_forwards_to_the_real_one_without_loading_it_early():
    result = _run("""
        import json, sys
        import numpy as np
        from trnsim.perf.zoo_imports import deferred_imports
        with deferred_imports():
            from scipy.optimize import linear_sum_assignment
            loaded_inside = type(sys.modules["scipy.optimize"]).__name__
        left_after = "scipy.optimize" in sys.modules
        cost = np.array([[4.0, 1.0, 3.0], [2.0, 0.0, 5.0], [3.0, 2.0, 2.0]])
        rows, cols = linear_sum_assignment(cost)
        import scipy.optimize
        want_rows, want_cols = scipy.optimize.linear_sum_assignment(cost)
        print(json.dumps({"inside": loaded_inside, "left_after": left_after,
                          "same": rows.tolist() == want_rows.tolist()
                          and cols.tolist() == want_cols.tolist(),
                          "real_after": type(scipy.optimize).__name__,
                          "name": linear_sum_assignment.__name__}))
    """)
    assert result == {"inside": "_StandIn", "left_after": False, "same": True,
                      "real_after": "module", "name": "linear_sum_assignment"}


def test_any_other_name_loads_the_real_module_even_inside_the_block():
    result = _run("""
        import json, sys
        from trnsim.perf.zoo_imports import deferred_imports
        with deferred_imports():
            from scipy.optimize import OptimizeResult
            inside = type(sys.modules["scipy.optimize"]).__name__
        import scipy.optimize
        print(json.dumps({"class": isinstance(OptimizeResult, type), "inside": inside,
                          "same": OptimizeResult is scipy.optimize.OptimizeResult}))
    """)
    assert result == {"class": True, "inside": "module", "same": True}


def test_a_module_already_imported_is_left_as_it_is():
    result = _run("""
        import json, sys
        import scipy.optimize
        real = sys.modules["scipy.optimize"]
        from trnsim.perf.zoo_imports import deferred_imports
        with deferred_imports():
            from scipy.optimize import linear_sum_assignment
        print(json.dumps({"real": sys.modules["scipy.optimize"] is real,
                          "same": linear_sum_assignment is real.linear_sum_assignment}))
    """)
    assert result == {"real": True, "same": True}


def test_a_submodule_imported_inside_the_block_is_the_real_one():
    result = _run("""
        import json, sys
        from trnsim.perf.zoo_imports import deferred_imports
        with deferred_imports():
            import scipy.optimize._optimize as optimize
            from scipy.optimize import linear_sum_assignment
        print(json.dumps({"real": hasattr(optimize, "_minimize_bfgs"),
                          "works": linear_sum_assignment([[1.0, 0.0], [0.0, 1.0]])[1].tolist()}))
    """)
    assert result == {"real": True, "works": [1, 0]}


def test_a_zoo_build_leaves_scipy_optimize_unimported_and_transformers_working():
    result = _run("""
        import json, sys
        from trnsim.perf.bench import build_model
        model = build_model("bert-base-uncased", initialise=False)
        from transformers.loss import loss_for_object_detection as detection
        print(json.dumps({"loaded": "scipy.optimize" in sys.modules,
                          "layers": len(model.encoder.layer),
                          "match": detection.linear_sum_assignment([[2.0, 1.0], [1.0, 2.0]])[1]
                          .tolist()}))
    """)
    assert result == {"loaded": False, "layers": 12, "match": [1, 0]}
