"""A user's kernel named the way `trnsim kernel run` and `trnsim validate` name it.

``FILE.py::KERNEL`` loads KERNEL from a Python file (its directory goes on ``sys.path`` so the
file's own imports work, and ``neuronxcc.nki`` resolves to trnsim's); ``package.module::KERNEL``
imports an installed module (e.g. ``trnsim.kernels.tutorials::matmul_optimized``). Shapes are
written ``128x512,512x256:bfloat16``, in argument order: a dtype after the last shape only is
every shape's; otherwise each shape names its own or none does (`parse_shapes`).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

import numpy as np

from trnsim.errors import InvalidArgumentError


def parse_shapes(text: str, default_dtype: str) -> list[tuple[tuple[int, ...], str]]:
    """Input shapes in argument order, each with its dtype. A dtype after the last shape only
    applies to every shape (``128x512,128x512:bfloat16``: both bf16); otherwise each shape
    names its own (``128x512:float32,128x512:bfloat16``) or none does (`default_dtype`).
    Some-but-not-all dtypes anywhere else are ambiguous and refused."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise InvalidArgumentError("no input shapes given; write them like 128x512,128x512")
    specs = []
    for part in parts:
        shape_text, _, dtype = part.partition(":")
        try:
            shape = tuple(int(s) for s in shape_text.lower().split("x"))
        except ValueError:
            raise InvalidArgumentError(f"bad shape {part!r}; write shapes like 128x512 or "
                                       f"128x512:bfloat16") from None
        specs.append((shape, dtype.strip()))
    named = [dtype for _, dtype in specs if dtype]
    if len(named) == len(specs):
        return specs
    if not named:
        return [(shape, default_dtype) for shape, _ in specs]
    if len(named) == 1 and specs[-1][1]:
        return [(shape, specs[-1][1]) for shape, _ in specs]
    raise InvalidArgumentError(
        f"shapes {text!r}: {len(named)} of {len(specs)} name a dtype; name one on every shape "
        f"(128x512:float32,128x512:bfloat16) or only after the last, for all of them "
        f"(128x512,128x512:bfloat16)")


def load_kernel(target: str, base_dir: str | Path | None = None):
    """The `nki.jit` kernel `target` names; a relative FILE.py is looked for in `base_dir`
    first (e.g. the directory of the CSV that names it), then in the working directory."""
    from trnsim.nki import Kernel, compat, jit

    where, sep, name = target.partition("::")
    if not sep or not where or not name:
        raise InvalidArgumentError(f"name the kernel as FILE.py::KERNEL or module::KERNEL; got "
                                   f"{target!r}")
    compat.install("neuronxcc")  # both NKI APIs: a file may `import neuronxcc.nki` or `import nki`
    compat.install("nki")
    if where.endswith(".py"):
        path = _find(where, base_dir)
        spec = importlib.util.spec_from_file_location(f"_trnsim_kernel_{abs(hash(path))}", path)
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
        _exec_user_file(spec, module, path)
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as error:
            raise InvalidArgumentError(f"kernel module {where!r} cannot be imported ({error}); "
                                       f"a file must end in .py") from None
    fn = getattr(module, name, None)
    if fn is None:
        raise InvalidArgumentError(f"{where} has no kernel named {name!r}")
    from trnsim.nki.current import Kernel as CurrentKernel

    # a kernel either API's jit made stays as it is (re-wrapping a current-API kernel in the
    # legacy jit would trace its nl calls against the legacy front end's tiles)
    return fn if isinstance(fn, (Kernel, CurrentKernel)) else jit(fn)


def _exec_user_file(spec, module, path: str) -> None:
    """Run the kernel file's top level; what fails there is the user's file, named by its line."""
    import traceback

    from trnsim.errors import TrnsimError

    try:
        spec.loader.exec_module(module)
    except TrnsimError:
        raise
    except Exception as error:  # any error in the user's file becomes one named error
        frames = [f for f in traceback.extract_tb(error.__traceback__)
                  if os.path.abspath(f.filename) == os.path.abspath(path)]
        where = f"{path}:{frames[-1].lineno}" if frames else path
        if isinstance(error, SyntaxError) and error.lineno:
            where = f"{path}:{error.lineno}"
        hint = ""
        if isinstance(error, ModuleNotFoundError):
            hint = (" (trnsim serves `nki`, `neuronxcc.nki` and, under `python -m trnsim.run`, "
                    "torch_xla/torch_neuronx; other packages must be installed)")
        raise KernelFileError(f"{where}: loading the kernel file failed: "
                              f"{type(error).__name__}: {error}{hint}") from None


class KernelFileError(InvalidArgumentError):
    """The kernel file itself failed to load (an import, a syntax error, its top-level code)."""


def _find(path: str, base_dir: str | Path | None) -> str:
    candidates = [Path(path)]
    if base_dir is not None and not os.path.isabs(path):
        candidates.insert(0, Path(base_dir) / path)
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate)
    raise InvalidArgumentError(f"kernel file {path!r} does not exist (looked in "
                               f"{', '.join(str(c.parent.resolve()) for c in candidates)})")


def random_inputs(specs, seed: int) -> list[np.ndarray]:
    from trnsim.numerics import cast
    from trnsim.numerics import dtype as as_dtype

    rng = np.random.default_rng(seed)
    arrays = []
    for shape, dtype in specs:
        dt = as_dtype(dtype)
        if dt.is_float:
            arrays.append(cast(rng.standard_normal(shape).astype(np.float32), dt))
        else:
            arrays.append(rng.integers(0, 16, shape).astype(dt.np_dtype))
    return arrays
