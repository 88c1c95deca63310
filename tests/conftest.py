"""Shared fixtures. Tests mirror src/trnsim; each layer's tests need only that layer and below."""

import pytest


@pytest.fixture(autouse=True)
def _unlimited_table_width(monkeypatch):
    """CLI tables fit $COLUMNS when it is set (trnsim.cli.app.console); a developer's terminal
    must not change what tests print, so tests that want a width set it themselves."""
    monkeypatch.delenv("COLUMNS", raising=False)
