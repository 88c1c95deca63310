"""DESIGN.md's layering: a layer never imports one above it (not even inside a function)."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "trnsim"
LAYERS = ["hardware", "numerics", "collectives", "isa", "sim", "nki", "kernels", "compiler",
          "runtime", "perf", "cli"]
BASE = {"errors"}  # below every layer
TOP = {"__init__", "__main__", "run"}  # the package itself and entry points: may import anything


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "trnsim" or len(parts) < 2:
        return None
    return parts[1]


def _imports(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "trnsim":
                for alias in node.names:
                    yield node.lineno, f"trnsim.{alias.name}"
            else:
                yield node.lineno, node.module


def test_no_layer_imports_an_upper_layer():
    violations = []
    for path in SRC.rglob("*.py"):
        own = path.relative_to(SRC).parts[0].removesuffix(".py")
        if own in TOP:
            continue
        rank = -1 if own in BASE else LAYERS.index(own)
        for line, module in _imports(path):
            target = _layer(module)
            if target is None or target in BASE or target == own or module == "trnsim.__version__":
                continue
            if target in TOP or target not in LAYERS or LAYERS.index(target) > rank:
                violations.append(f"{path.relative_to(SRC)}:{line} imports {module}")
    assert not violations, "\n".join(violations)
