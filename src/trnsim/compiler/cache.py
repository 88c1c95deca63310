"""The compile cache: the lowering of a (kernel-level graph, options, core, trnsim code) on disk.

JSON, weights excluded (they come from the live model), so a second trace of the same model
skips lowering. A hit keeps only the lowering's small facts (tensor names, kernel calls); the
program is lowered again when something needs its instructions (a functional call, a profile,
save, or a report not cached yet). Lowering is deterministic and, with kernel-call replay,
faster than decoding a stored instruction list. The cache lives in $TRNSIM_CACHE_DIR (default
~/.cache/trnsim; "off" disables); `runtime` keeps reports beside the programs.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

from trnsim import __version__
from trnsim.hardware.spec import fingerprint

CACHE_ENV = "TRNSIM_CACHE_DIR"
# What decides a lowered program (an edited kernel must never read a stale cached program),
# and what decides a report of it (the simulator, the fabric, the report itself).
# (a k.* node is lowered by its record in compiler/kernel_ops, which calls the kernels)
PROGRAM_CODE = ("kernels", "compiler/lowering", "compiler/kernel_ops", "nki", "isa", "hardware")
REPORT_CODE = ("sim", "collectives", "runtime", "compiler/compile.py")
_CODE_DIGESTS: dict[tuple[str, ...], str] = {}
# torch.export, the NKI tracer and the lowering keep per-process state (the current trace, the
# fake-tensor mode): one capture or lowering at a time; other threads wait their turn
COMPILE_LOCK = threading.RLock()


def cache_dir() -> Path | None:
    value = os.environ.get(CACHE_ENV, str(Path.home() / ".cache" / "trnsim"))
    return None if value.lower() in ("", "off", "0", "none") else Path(value)


def cache_key(graph, options, core) -> str:
    text = graph.pretty(constants=True, sources=True)
    payload = json.dumps({"graph": text, "options": options.key(), "core": fingerprint(core),
                          "trnsim": __version__, "code": code_digest()}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def code_digest(packages: tuple[str, ...] = PROGRAM_CODE) -> str:
    """A digest of the source files of `packages` (packages or modules under trnsim/)."""
    if packages not in _CODE_DIGESTS:
        root = Path(__file__).resolve().parents[1]
        h = hashlib.sha256()
        for package in packages:
            found = root / package
            for path in [found] if found.is_file() else sorted(found.rglob("*.py")):
                h.update(path.read_bytes())
        _CODE_DIGESTS[packages] = h.hexdigest()[:16]
    return _CODE_DIGESTS[packages]


def lower_cached(graph, options, core, lnc: int):
    """(Lowered, cache hit) of `graph` for `core`, `lnc` physical cores per logical core."""
    from trnsim.compiler.lowering import KernelCall, Lowered, lower

    root = cache_dir()
    path = root / f"{cache_key(graph, options, core)}.json" if root else None
    if path is not None and path.exists():
        try:
            data = json.loads(path.read_text())
            calls = [KernelCall(**c) for c in data["kernels"]]
            lazy = LazyLowering(graph, core, lnc)
            return Lowered(lazy, data["inputs"], data["outputs"], calls,
                           partner=lazy.partner, shared=tuple(data.get("shared", ()))), True
        except (OSError, KeyError, TypeError, ValueError):
            pass  # a stale or unreadable entry: compile again and overwrite it
    lowered = lower(graph, core, lnc=lnc)
    if path is not None:
        write_json(path, {"inputs": lowered.inputs, "outputs": lowered.outputs,
                          "kernels": [vars(c) for c in lowered.kernels],
                          "shared": list(lowered.shared)})
    return lowered, False


class LazyLowering:
    """The program of a cache hit, lowered on first use (and, under LNC=2, its partner's)."""

    def __init__(self, graph, core, lnc: int = 1) -> None:
        self._args = (graph, core, lnc)
        self._lowered = None

    def _lower(self):
        with COMPILE_LOCK:
            if self._lowered is None:
                from trnsim.compiler.lowering import lower

                graph, core, lnc = self._args
                self._lowered = lower(graph, core, lnc=lnc)
        return self._lowered

    def __call__(self):
        return self._lower().program

    @property
    def partner(self):
        """Core 1's program (None unless LNC=2), lowered with core 0's."""
        if self._args[2] < 2:
            return None
        return lambda: self._lower().partner


def write_json(path: Path, data: dict) -> None:
    """Write a cache entry atomically; a cache that cannot be written is skipped silently."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        tmp.replace(path)
    except OSError:
        pass
