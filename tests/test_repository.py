"""Repository rules CI relies on: README's commands match .ci/run, and the code is ruff-clean."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("```bash", 1)[1].split("```", 1)[0]
    return [line.strip() for line in block.strip().splitlines()]


def test_readme_has_two_setup_commands_and_ci_runs_the_test_one():
    commands = _readme_commands()
    assert len(commands) == 2
    assert "trnsim" in commands[0].split("&&")[1]
    assert "pytest" in commands[1]
    assert commands[1] in (ROOT / ".ci" / "run").read_text()


def test_ruff_clean():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.skip("ruff not installed (it is in the test extras)")
    paths = [p for p in ("src", "tests", "benchmarks") if (ROOT / p).exists()]
    result = subprocess.run([ruff, "check", *paths], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
