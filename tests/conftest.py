"""Shared fixtures. Tests mirror src/trnsim; each layer's tests need only that layer and below."""

import os
import tempfile

import pytest

# Models the tests run register with trnsim's runtime registry (`trnsim top` / `monitor`): keep
# their records in a directory of this test session, apart from the user's own processes.
os.environ.setdefault("TRNSIM_RUNTIME_DIR", tempfile.mkdtemp(prefix="trnsim-test-registry-"))


@pytest.fixture(autouse=True)
def _unlimited_table_width(monkeypatch):
    """CLI tables fit $COLUMNS when it is set (trnsim.cli.app.console); a developer's terminal
    must not change what tests print, so tests that want a width set it themselves."""
    monkeypatch.delenv("COLUMNS", raising=False)
