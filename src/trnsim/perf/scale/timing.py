"""Per-shape compute timings from the simulator, cached on disk as JSON.

A plan's compute is one core's share of a layer (and of the embedding/LM head) for one
micro-batch, measured by the training path (`trnsim.perf.scale.measure`): never a fitted
curve. Each timing is a JSON file keyed on the shape, the instance's core, the precision,
the optimizer and the source of every simulator layer (`simulator_digest`), so a changed
kernel or cost re-measures. Missing shapes are measured in one child process per request.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from trnsim.errors import TrnsimError
from trnsim.perf.scale.layer import HeadShape, LayerShape

TIMING_VERSION = 1


class MeasurementError(TrnsimError):
    """The simulator could not time a shape (its compiler refused it)."""


@dataclass(frozen=True)
class Timing:
    forward_ns: float
    backward_ns: float
    optimizer_ns: float
    flops: float = 0.0
    chunks: int = 1
    seq_split: int = 0  # times the sequence was halved to compose it (see measure)

    @property
    def step_ns(self) -> float:
        return self.forward_ns + self.backward_ns + self.optimizer_ns


_OWN: list[str] = []


def _digest() -> str:
    """The simulator's source below `perf`, and this package's measuring modules."""
    from trnsim.perf.serving.steps import simulator_digest

    if not _OWN:
        here = Path(__file__).resolve().parent
        own = b"".join((here / name).read_bytes() for name in ("measure.py", "layer.py"))
        _OWN.append(hashlib.sha256(own).hexdigest()[:16])
    return simulator_digest() + _OWN[0]


def cache_root() -> Path | None:
    from trnsim.runtime.compile import cache_dir

    root = cache_dir()
    return None if root is None else root / "scale"


_FINGERPRINTS: dict[int, tuple[object, str]] = {}


def spec_fingerprint(spec) -> str:
    """`hardware.spec.fingerprint`, remembered per spec object: specs are frozen, and a search
    asks once per candidate, where digesting a spec walks every figure. Keyed on identity (the
    spec is held, so its id is not reused), so `core_variant`'s changed specs get their own."""
    found = _FINGERPRINTS.get(id(spec))
    if found is None or found[0] is not spec:
        from trnsim.hardware.spec import fingerprint

        found = _FINGERPRINTS[id(spec)] = (spec, fingerprint(spec))
    return found[1]


def entry_path(kind: str, shape, instance: str, precision: str, optimizer: str,
               root: Path | None = None) -> Path:
    from trnsim import hardware

    core = spec_fingerprint(hardware.instance(instance).chip.core)
    payload = json.dumps({"kind": kind, "shape": asdict(shape), "core": core,
                          "precision": precision, "optimizer": optimizer, "code": _digest(),
                          "version": TIMING_VERSION}, sort_keys=True)
    key = hashlib.sha256(payload.encode()).hexdigest()[:24]
    root = root or cache_root() or Path(os.environ.get("TMPDIR", "/tmp")) / "trnsim-scale"
    return root / f"{kind}-{shape.key()}-{key}.json"


def done_count(missing: list[dict], finished: int) -> str:
    """Which shapes the child timed before it stopped (each written as it finished)."""
    left = [Path(item["path"]).name.rsplit("-", 1)[0] for item in missing[finished:]]
    return f"{finished} of {len(missing)} shape(s) timed; not timed: {', '.join(left)}"


class Timer:
    """Timings of layer and head shapes on one instance type, precision and optimizer."""

    def __init__(self, instance: str, precision: str, optimizer: str,
                 progress: Callable[[str], None] | None = None) -> None:
        self.instance = instance
        self.precision = precision
        self.optimizer = optimizer
        self.progress = progress
        self.measured = 0  # shapes this timer had simulated (cache misses)
        self._memo: dict[str, Timing] = {}

    def _path(self, kind: str, shape) -> Path:
        return entry_path(kind, shape, self.instance, self.precision, self.optimizer)

    def cached(self, kind: str, shape) -> Timing | None:
        path = self._path(kind, shape)
        key = str(path)
        if key in self._memo:
            return self._memo[key]
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if "error" in data:
            raise MeasurementError(f"{kind} {shape.key()} on {self.instance}: the simulator "
                                   f"could not time it ({data['error']})")
        timing = Timing(data["forward_ns"], data["backward_ns"], data["optimizer_ns"],
                        float(data.get("flops", 0.0)), int(data.get("chunks", 1)),
                        int(data.get("seq_split", 0)))
        self._memo[key] = timing
        return timing

    def ensure(self, items: Sequence[tuple[str, LayerShape | HeadShape]]) -> None:
        """Measure every (kind, shape) not in the cache, in one child process."""
        missing, seen = [], set()
        for kind, shape in items:
            path = self._path(kind, shape)
            if str(path) in seen or path.exists():
                continue
            seen.add(str(path))
            missing.append({"kind": kind, "shape": asdict(shape), "path": str(path)})
        if not missing:
            return
        request = {"instance": self.instance, "precision": self.precision,
                   "optimizer": self.optimizer, "items": missing}
        env = dict(os.environ)
        src = str(Path(__file__).resolve().parents[3])
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                   else "")
        if self.progress:
            self.progress(f"simulating {len(missing)} shape(s) on {self.instance}")
        code, finished, err = self._run_child(request, env, len(missing))
        if code < 0:  # a signal: SIGKILL is what the kernel's out-of-memory killer sends
            import signal

            name = signal.Signals(-code).name
            raise MeasurementError(
                f"timing shapes on {self.instance}: the measuring process was killed by {name}"
                + (" (out of host memory? the lazy device holds the step's values on the host)"
                   if name == "SIGKILL" else "") + f"; {done_count(missing, finished)}")
        if code != 0:
            raise MeasurementError(f"timing shapes on {self.instance} failed: "
                                   f"{err.strip().splitlines()[-1] if err.strip() else '?'}")

    def _run_child(self, request: dict, env: dict, count: int) -> tuple[int, int, str]:
        """Run the measuring child; (its exit code, shapes it finished, its stderr). Its stderr
        goes to a file: a pipe read only at the end would block a child that writes more than
        the pipe holds (warnings, split notes) while stdout is read."""
        finished = 0
        with tempfile.TemporaryFile("w+") as errors:
            proc = subprocess.Popen([sys.executable, "-m", "trnsim.perf.scale.measure"],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=errors, text=True, env=env)
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(json.dumps(request))
            proc.stdin.close()
            for finished, _ in enumerate(proc.stdout, 1):
                self.measured += 1
                if self.progress:
                    self.progress(f"simulated {finished} of {count} shape(s)")
            code = proc.wait()
            errors.seek(0)
            return code, finished, errors.read()

    def timing(self, kind: str, shape) -> Timing:
        found = self.cached(kind, shape)
        if found is None:
            self.ensure([(kind, shape)])
            found = self.cached(kind, shape)
        if found is None:
            raise MeasurementError(f"{kind} {shape.key()}: no timing was written")
        return found
