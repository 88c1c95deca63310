"""Compiler test fixtures: tiny models (random weights, from configs, offline), captured once.

torch.export costs about a second per model, so each tiny model is built and captured once per
session and shared by every test file. `@pytest.mark.slow` tests (full-size models) run only
with TRNSIM_SLOW=1.
"""

from __future__ import annotations

import os

import pytest

from tests.compiler.zoo import Zoo

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

def pytest_configure(config):
    config.addinivalue_line("markers", "slow: full-size models; run with TRNSIM_SLOW=1")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("TRNSIM_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: set TRNSIM_SLOW=1 to run")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def zoo():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    return Zoo()
