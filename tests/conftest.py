"""Shared fixtures. Tests mirror src/trnsim; each layer's tests need only that layer and below."""

import atexit
import os
import shutil
import tempfile

import pytest

# Models the tests run register with trnsim's runtime registry (`trnsim top` / `monitor`): keep
# their records in a directory of this test session, apart from the user's own processes.
if "TRNSIM_RUNTIME_DIR" not in os.environ:
    os.environ["TRNSIM_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="trnsim-test-registry-")
    atexit.register(shutil.rmtree, os.environ["TRNSIM_RUNTIME_DIR"], ignore_errors=True)

# The compiler verifies the graph after every pass (`trnsim.compiler.passes`, a check mode: by
# default only the pipeline's result is verified).
os.environ.setdefault("TRNSIM_PASSES", "check")


@pytest.fixture(autouse=True)
def _unlimited_table_width(monkeypatch):
    """CLI tables fit $COLUMNS when it is set (trnsim.cli.app.console); a developer's terminal
    must not change what tests print, so tests that want a width set it themselves."""
    monkeypatch.delenv("COLUMNS", raising=False)
