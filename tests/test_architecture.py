"""ARCHITECTURE.md stays true: every module path it names exists."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "trnsim"


def test_every_module_the_architecture_map_names_exists():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    named = set(re.findall(r"`([a-z_]+(?:/[a-z_]+)*(?:\.py|/))(?::[A-Za-z_.]+)?`", text))
    assert len(named) > 20
    missing = sorted(p for p in named if not (SRC / p).exists() and not (ROOT / p).exists())
    assert not missing, f"ARCHITECTURE.md names modules that do not exist: {missing}"
