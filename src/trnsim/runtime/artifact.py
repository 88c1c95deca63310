"""Saving and loading compiled models: a directory of JSON + safetensors, versioned, no pickle.

    model.trnsim/
      manifest.json     format version, trnsim version, options, input/output structure, the
                        execution plan (programs, cores, shared tensors, fabric), constant specs
      program.json      the first instruction program (trnsim.isa.serialize)
      program.p1.json   the plan's other programs (LNC=2's second core, pipeline stages, ...)
      constants.safetensors  weights and other constant tensors, raw bytes by key
      report.json       the timing summary computed at compile time (optional)

Loading needs neither the model's Python code nor torch (unless outputs are converted back to
torch tensors). A missing file, a bad checksum or another format version is a clear error.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from trnsim.errors import TrnsimError

ARTIFACT_FORMAT = 2  # 2: one ExecutionPlan (format 1 held one program and its mode)


class ArtifactError(TrnsimError):
    """A saved model that is missing, corrupted, or from an incompatible version."""


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def save_constants(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Raw bytes per tensor (safetensors has no bf16/fp8 numpy types): dtype kept in the manifest."""
    from safetensors.numpy import save_file

    raw = {name: np.ascontiguousarray(a).reshape(-1).view(np.uint8) for name, a in arrays.items()}
    save_file(raw, str(path))


def load_constants(path: Path, specs: dict[str, dict]) -> dict[str, np.ndarray]:
    from safetensors.numpy import load_file

    from trnsim.numerics import dtype as as_dtype

    raw = load_file(str(path))
    out = {}
    for name, spec in specs.items():
        if name not in raw:
            raise ArtifactError(f"{path}: constant {name!r} is missing")
        dt = as_dtype(spec["dtype"])
        out[name] = raw[name].view(dt.np_dtype).reshape(spec["shape"])
    return out


def rank_key(name: str, rank: int) -> str:
    """Where tensor-parallel rank `rank`'s chunk of a sharded constant is stored (rank 0's
    under `name` itself, as the program names it)."""
    return f"{name}@rank{rank}"


def write(directory: str | Path, manifest: dict, program_data: dict,
          constants: dict[str, np.ndarray], report: dict | None = None,
          more_programs: dict[str, dict] | None = None) -> Path:
    """`more_programs`: programs beside the main one that use its constants, by name
    (``program.<name>.json``; `read_program` reads one back)."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    (root / "program.json").write_text(json.dumps(program_data))
    save_constants(root / "constants.safetensors", constants)
    files = {"program.json": _digest(root / "program.json"),
             "constants.safetensors": _digest(root / "constants.safetensors")}
    for name, data in (more_programs or {}).items():
        file = f"program.{name}.json"
        (root / file).write_text(json.dumps(data))
        files[file] = _digest(root / file)
    if report is not None:
        (root / "report.json").write_text(json.dumps(report))
    from trnsim import __version__

    full = {"format": ARTIFACT_FORMAT, "trnsim_version": __version__, "files": files, **manifest}
    (root / "manifest.json").write_text(json.dumps(full, indent=1))
    return root


def read_program(directory: str | Path, name: str) -> dict:
    """One of `write`'s `more_programs` (`read` has checked its checksum)."""
    path = Path(directory) / f"program.{name}.json"
    if not path.exists():
        raise ArtifactError(f"{directory}: program.{name}.json is missing")
    return json.loads(path.read_text())


def read(directory: str | Path) -> tuple[dict, dict, dict[str, np.ndarray], dict | None]:
    root = Path(directory)
    manifest_path = root / "manifest.json"
    if not manifest_path.exists():
        raise ArtifactError(f"{root} is not a trnsim model (no manifest.json)")
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError as error:
        raise ArtifactError(f"{manifest_path} is corrupted: {error}") from None
    if manifest.get("format") != ARTIFACT_FORMAT:
        raise ArtifactError(f"{root} has artifact format {manifest.get('format')!r}; this trnsim "
                            f"reads format {ARTIFACT_FORMAT} (recompile the model)")
    for name, digest in manifest.get("files", {}).items():
        path = root / name
        if not path.exists():
            raise ArtifactError(f"{root}: {name} is missing")
        if _digest(path) != digest:
            raise ArtifactError(f"{root}: {name} does not match its checksum (corrupted or edited)")
    program_data = json.loads((root / "program.json").read_text())
    constants = load_constants(root / "constants.safetensors", manifest.get("constants", {}))
    report_path = root / "report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    return manifest, program_data, constants, report
