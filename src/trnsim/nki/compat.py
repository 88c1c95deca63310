"""Make unmodified NKI code import trnsim: `import neuronxcc.nki` (legacy) or `import nki` (current).

`install()` registers module aliases in `sys.modules`, the way the NKI Library's own simulation
mode swaps modules. trnsim ships no top-level package named `neuronxcc` or `nki`; the aliases exist
only in processes that ask for them (`install()`, or `python -m trnsim.run script.py` with
TRNSIM_NEURONXCC=1 / TRNSIM_NKI=1).
"""

from __future__ import annotations

import importlib
import sys
import types

LEGACY_MODULES = {
    "neuronxcc": None,  # a bare package object holding `nki`
    "neuronxcc.nki": "trnsim.nki",
    "neuronxcc.nki.language": "trnsim.nki.language",
    "neuronxcc.nki.isa": "trnsim.nki.isa",
    "neuronxcc.nki.isa.constants": "trnsim.nki.isa.enums",
    "neuronxcc.nki.typing": "trnsim.nki.typing",
    "neuronxcc.nki.compiler": "trnsim.nki.compiler",
}

CURRENT_MODULES = {
    "nki": "trnsim.nki.current",
    "nki.language": "trnsim.nki.current.language",
    "nki.isa": "trnsim.nki.current.isa",
    "nki.typing": "trnsim.nki.typing",
    "nki.collectives": "trnsim.nki.current.collectives",
}


def install(api: str = "neuronxcc") -> None:
    """Alias the legacy ("neuronxcc") or current ("nki") NKI module names to trnsim."""
    table = {"neuronxcc": LEGACY_MODULES, "legacy": LEGACY_MODULES, "nki": CURRENT_MODULES,
             "current": CURRENT_MODULES}.get(api)
    if table is None:
        from trnsim.errors import InvalidArgumentError

        raise InvalidArgumentError(f"compat.install: unknown API {api!r}; use 'neuronxcc' or 'nki'")
    for alias, target in table.items():
        if target is None:
            module = sys.modules.get(alias) or types.ModuleType(alias)
            module.__path__ = []  # a package, so submodule imports resolve through sys.modules
            sys.modules[alias] = module
            continue
        sys.modules[alias] = importlib.import_module(target)
    if api in ("neuronxcc", "legacy"):
        sys.modules["neuronxcc"].nki = sys.modules["neuronxcc.nki"]


def uninstall() -> None:
    for alias in (*LEGACY_MODULES, *CURRENT_MODULES):
        sys.modules.pop(alias, None)
