"""The report in a real browser: headless Chromium opens it from disk with the network cut off,
draws it (the screenshot is not blank and shows the engines' colours), logs nothing to the
console (no script error, no failed load) and runs its script to the end.

Chromium is a system package (Debian `chromium`); `.ci/run` installs it and sets
TRNSIM_REQUIRE_BROWSER=1 so that CI fails rather than skips without it.
"""

import os
import shutil
import subprocess

import numpy as np
import pytest

from trnsim.perf.profile_report import write_report
from trnsim.perf.profile_report.charts import ENGINE_COLOURS

PIL = pytest.importorskip("PIL.Image")  # Pillow comes with matplotlib (the test extra)

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--host-resolver-rules=MAP * ~NOTFOUND",  # no network: anything fetched would fail
         "--hide-scrollbars", "--force-device-scale-factor=1", "--window-size=1280,1400",
         "--virtual-time-budget=5000", "--enable-logging=stderr", "--v=0")


@pytest.fixture(scope="module")
def chromium():
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("TRNSIM_REQUIRE_BROWSER") == "1":
            pytest.fail("chromium is not installed (apt-get install chromium)")
        pytest.skip("needs Chromium (apt-get install chromium); CI installs it")
    return path


@pytest.fixture(scope="module")
def report(kernel_trace, tmp_path_factory):
    return write_report(kernel_trace, tmp_path_factory.mktemp("html") / "report.html")


def browse(chromium, report, tmp_path, *action: str) -> subprocess.CompletedProcess:
    done = subprocess.run([chromium, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *action,
                           report.as_uri()], capture_output=True, text=True, timeout=180,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console  # the page logs nothing: no script error, no failed load
    return done


def test_screenshot_shows_the_report(chromium, report, tmp_path):
    shot = tmp_path / "report.png"
    browse(chromium, report, tmp_path, f"--screenshot={shot}")
    pixels = np.asarray(PIL.open(shot).convert("RGB"))
    assert pixels.shape == (1400, 1280, 3)
    white = np.all(pixels == 255, axis=-1).mean()
    assert white < 0.9  # not blank
    counts = {}
    for engine in ("tensor", "vector", "dma"):  # timeline, utilisation and waits draw them
        rgb = [int(ENGINE_COLOURS[engine][i:i + 2], 16) for i in (1, 3, 5)]
        counts[engine] = int(np.all(pixels == rgb, axis=-1).sum())
    assert all(n > 500 for n in counts.values()), counts


def test_script_runs_to_the_end(chromium, report, tmp_path):
    done = browse(chromium, report, tmp_path, "--dump-dom")
    assert 'data-ready="1"' in done.stdout
    assert done.stdout.count('class="track"') == report.read_text().count('class="track"')
