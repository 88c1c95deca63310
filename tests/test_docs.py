"""Every code block of README.md and docs/*.md runs, so the examples cannot drift.

Blocks run in document order, each document in a fresh working directory: ```python blocks in
one namespace per document (a later block may use an earlier one's names), ```bash blocks as
`bash -eo pipefail` with `trnsim` on PATH (this interpreter's `python -m trnsim`), each with a
time limit. A block too slow or too heavy for CI is preceded by the marker

    <!-- docs-test: skip REASON -->

which this test honours and reports as a skip with the reason (pytest -ra lists them); a marker
without a reason fails. Other languages (```text, tables) are not run.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"<!--\s*docs-test:\s*skip\b(.*?)-->")
FENCE = re.compile(r"^```(\w*)\s*$")
BASH_TIMEOUT_S = 180
RUN = ("bash", "python")


@dataclass
class Block:
    document: Path
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    skip: str | None  # the marker's reason, "" for a marker without one, None: runs

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"


def blocks(document: Path) -> list[Block]:
    found, lines, i = [], document.read_text().splitlines(), 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.search(before)
        found.append(Block(document, i + 1, match.group(1), "\n".join(lines[i + 1:end]) + "\n",
                           marker.group(1).strip() if marker else None))
        i = end + 1
    return found


def test_every_document_has_blocks_and_markers_give_reasons():
    for document in DOCUMENTS:
        found = blocks(document)
        assert any(b.language in RUN and b.skip is None for b in found), document
        assert all(b.skip != "" for b in found), [b.name for b in found if b.skip == ""]
    # the README's set-up block is never run here: it installs trnsim (CI runs it: .ci/run)
    assert blocks(ROOT / "README.md")[0].skip


@pytest.fixture(scope="module")
def shim(tmp_path_factory):
    """A `trnsim` command on PATH for bash blocks: this interpreter, this checkout's code."""
    bin_dir = tmp_path_factory.mktemp("bin")
    script = bin_dir / "trnsim"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m trnsim "$@"\n')
    script.chmod(0o755)
    return bin_dir


def _environment(shim_dir: Path, cache: Path) -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{shim_dir}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env["TRNSIM_CACHE_DIR"] = str(cache)
    env.pop("COLUMNS", None)
    return env


def _run_bash(block: Block, cwd: Path, env: dict) -> None:
    try:
        done = subprocess.run(["bash", "-eo", "pipefail", "-c", block.code], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=BASH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.name}: took over {BASH_TIMEOUT_S} s; make it smaller or mark it "
                    f"<!-- docs-test: skip REASON -->")
    assert done.returncode == 0, (f"{block.name} failed ({done.returncode}):\n{block.code}\n"
                                  f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}")


def _run_python(block: Block, namespace: dict) -> None:
    code = compile(block.code, block.name, "exec")
    with contextlib.redirect_stdout(io.StringIO()):
        exec(code, namespace)  # the document's own example, as a reader pastes it


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_document_examples_run(document, shim, tmp_path, monkeypatch):
    """Runs the document's blocks in order; skipped ones are reported with their reasons."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRNSIM_CACHE_DIR", str(tmp_path / "cache"))
    env = _environment(shim, tmp_path / "cache")
    namespace: dict = {"__name__": "__docs__"}
    ran, skipped = [], []
    for block in blocks(document):
        if block.language not in RUN:
            continue
        if block.skip is not None:
            skipped.append(f"{block.name} ({block.skip})")
            continue
        if block.language == "bash":
            _run_bash(block, tmp_path, env)
        else:
            _run_python(block, namespace)
        ran.append(block.name)
    assert ran
    if skipped:
        print(f"{document.name}: ran {len(ran)} blocks; not run (marked): " + "; ".join(skipped))
        import warnings

        warnings.warn(f"{document.name}: {len(skipped)} code blocks marked too slow for CI, "
                      "not run: " + "; ".join(skipped), stacklevel=1)
