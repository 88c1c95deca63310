"""Saving and loading compiled models: a directory of JSON + safetensors, versioned, no pickle.

    model.trnsim/
      manifest.json     format version, trnsim version, options, input/output structure, the
                        execution plan (programs, cores, shared tensors, fabric), constant specs
      program.json      the plan's first instruction program (trnsim.isa.serialize)
      program.p1.json   the plan's other programs (LNC=2's second core, pipeline stages, ...)
      constants.safetensors  weights and other constant tensors, raw bytes by key
      report.json       the timing summary computed at compile time (optional)

Loading needs neither the model's Python code nor torch (unless outputs are converted back to
torch tensors), and is data only: it never imports or calls anything a file names. The manifest
lists a sha256 digest per file and carries one checksum over itself (and so over every file);
files are read through `artifact_files` (inside the artifact, regular, bounded) and checked
against `artifact_schema` before use. A missing file, a bad checksum, a malformed field or another
format version is an `ArtifactError` naming the file and the field. (A checksum catches
corruption and editing by mistake; it is not a signature: see SECURITY.md.)
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import numpy as np

from trnsim.errors import TrnsimError
from trnsim.runtime import artifact_schema as schema
from trnsim.runtime.artifact_files import ArtifactError, parse_json, read_member
from trnsim.runtime.artifact_schema import ARTIFACT_FORMAT

__all__ = [
    "ARTIFACT_FORMAT",
    "Artifact",
    "ArtifactError",
    "manifest_checksum",
    "rank_key",
    "read",
    "write",
]


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_checksum(manifest: dict) -> str:
    """The checksum of a manifest: sha256 of its canonical JSON without the checksum itself. Its
    `files` digests make it cover every file of the artifact."""
    body = {k: v for k, v in manifest.items() if k != "checksum"}
    return _digest(json.dumps(body, sort_keys=True, separators=(",", ":")).encode())


def save_constants(arrays: dict[str, np.ndarray]) -> bytes:
    """Raw bytes per tensor (safetensors has no bf16/fp8 numpy types): dtype kept in the program."""
    from safetensors.numpy import save

    raw = {name: np.ascontiguousarray(a).reshape(-1).view(np.uint8) for name, a in arrays.items()}
    return save(raw)


def rank_key(name: str, rank: int) -> str:
    """Where tensor-parallel rank `rank`'s chunk of a sharded constant is stored (rank 0's
    under `name` itself, as the program names it)."""
    return f"{name}@rank{rank}"


def write(directory: str | Path, manifest: dict, program_data: dict,
          constants: dict[str, np.ndarray], report: dict | None = None,
          more_programs: dict[str, dict] | None = None) -> Path:
    """`more_programs`: programs beside the first one, sharing its constants file, by name
    (``program.<name>.json``)."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    contents = {"program.json": json.dumps(program_data).encode(),
                "constants.safetensors": save_constants(constants)}
    for name, data in (more_programs or {}).items():
        contents[f"program.{name}.json"] = json.dumps(data).encode()
    if report is not None:
        contents["report.json"] = json.dumps(report).encode()
    for name, data in contents.items():
        (root / name).write_bytes(data)
    files = {name: _digest(data) for name, data in contents.items()}
    from trnsim import __version__

    full = {"format": ARTIFACT_FORMAT, "trnsim_version": __version__, **manifest, "files": files}
    full["checksum"] = manifest_checksum(full)
    (root / "manifest.json").write_text(json.dumps(full, indent=1))
    return root


class Artifact:
    """One artifact directory, its manifest checked and its files read on demand, each once,
    each compared with its digest."""

    def __init__(self, directory: str | Path) -> None:
        self.root = Path(directory)
        if not self.root.is_dir():
            raise ArtifactError(f"{self.root} is not a trnsim model (no such directory)")
        if not (self.root / "manifest.json").exists():
            raise ArtifactError(f"{self.root} is not a trnsim model (no manifest.json)")
        data = read_member(self.root, "manifest.json", schema.MAX_MANIFEST_BYTES)
        self.manifest_file = f"{self.root}/manifest.json"
        manifest = parse_json(data, self.manifest_file)
        schema.check_format(manifest, self.manifest_file)
        if not isinstance(manifest.get("checksum"), str) or \
                manifest["checksum"] != manifest_checksum(manifest):
            raise ArtifactError(f"{self.manifest_file} does not match its checksum (a missing "
                                f"'checksum' or 'files' field, or an edited manifest, is refused)")
        self.manifest = schema.check_manifest(manifest, self.manifest_file)
        self._programs: dict[str, dict] = {}

    def member(self, name: str, limit: int) -> bytes:
        """A file of the artifact, refused unless the manifest lists it with a matching digest."""
        digest = self.manifest["files"].get(name)
        if digest is None:
            raise ArtifactError(f"{self.manifest_file} field 'files' does not list {name}")
        data = read_member(self.root, name, limit)
        if _digest(data) != digest:
            raise ArtifactError(f"{self.root}: {name} does not match its checksum (corrupted or "
                                f"edited)")
        return data

    def json_member(self, name: str, limit: int):
        return parse_json(self.member(name, limit), f"{self.root}/{name}")

    def program_data(self, name: str = "program.json") -> dict:
        """A program file's data, checked against the schema (read once)."""
        if name not in self._programs:
            data = self.json_member(name, schema.MAX_PROGRAM_BYTES)
            schema.check_program(data, f"{self.root}/{name}")
            self._programs[name] = data
        return self._programs[name]

    def program(self, name: str = "program.json", constants: dict | None = None):
        """A program file, checked against the schema, decoded and verified."""
        from trnsim.isa.serialize import program_from_data

        file = f"{self.root}/{name}"
        data = self.program_data(name)
        try:
            program = program_from_data(data, constants)
            program.verify()
        except TrnsimError as error:
            raise ArtifactError(f"{file} field 'instructions' is not a valid program ({error})") \
                from None
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as error:
            raise ArtifactError(f"{file} field 'instructions' is malformed ({type(error).__name__}"
                                f": {error})") from None
        return program

    def constants(self) -> dict[str, np.ndarray]:
        """Every constant tensor the manifest declares (by key: a program's constant, another
        program's constant of the same name ``name@p<i>``, a rank's chunk ``name@rank<r>``),
        each checked against its declared dtype and shape."""
        raw = self.member("constants.safetensors", schema.MAX_CONSTANTS_BYTES)
        return load_constants(raw, self.manifest["constants"],
                              f"{self.root}/constants.safetensors")

    def report(self) -> dict | None:
        if "report.json" not in self.manifest["files"]:
            return None
        return self.json_member("report.json", schema.MAX_REPORT_BYTES)


def load_constants(raw: bytes, specs: dict[str, dict], file: str) -> dict[str, np.ndarray]:
    """The arrays `specs` declare, from safetensors bytes whose header is checked first."""
    from safetensors.numpy import load

    from trnsim.numerics import dtype as as_dtype

    header = safetensors_header(raw, file)
    out = {}
    for name, spec in specs.items():
        entry = header.get(name)
        if entry is None:
            raise ArtifactError(f"{file} field {name!r} is missing (a constant the program needs)")
        dt = as_dtype(spec["dtype"])
        need = int(np.prod(spec["shape"], dtype=np.int64)) * dt.itemsize
        have = entry["data_offsets"][1] - entry["data_offsets"][0]
        if have != need:
            raise ArtifactError(f"{file} field {name!r} holds {have} bytes; its shape "
                                f"{list(spec['shape'])} of {dt.name} needs {need}")
    try:
        arrays = load(raw)
    except Exception as error:  # the safetensors parser's own error types
        raise ArtifactError(f"{file} is not a valid safetensors file ({error})") from None
    for name, spec in specs.items():
        out[name] = arrays[name].view(as_dtype(spec["dtype"]).np_dtype).reshape(spec["shape"])
    return out


def safetensors_header(raw: bytes, file: str) -> dict:
    """The header of a safetensors file, bounded and checked: every entry raw bytes (U8, 1-D)
    whose offsets lie inside the data and tile it without gaps or overlaps."""
    if len(raw) < 8:
        raise ArtifactError(f"{file} is truncated ({len(raw)} bytes, no header)")
    (size,) = struct.unpack("<Q", raw[:8])
    if size > schema.MAX_SAFETENSORS_HEADER_BYTES:
        raise ArtifactError(f"{file} field 'header' declares {size} bytes, over the limit of "
                            f"{schema.MAX_SAFETENSORS_HEADER_BYTES}")
    if 8 + size > len(raw):
        raise ArtifactError(f"{file} is truncated (header of {size} bytes, file of {len(raw)})")
    header = parse_json(raw[8:8 + size], file)
    if not isinstance(header, dict):
        raise ArtifactError(f"{file} field 'header' must be an object")
    header.pop("__metadata__", None)
    data_bytes = len(raw) - 8 - size
    spans = []
    for name, entry in header.items():
        where = f"header.{name}"
        schema.record(entry, file, where, {"dtype", "shape", "data_offsets"})
        if entry["dtype"] != "U8":
            raise schema.fail(file, f"{where}.dtype", "must be U8 (trnsim stores raw bytes)")
        offsets = schema.listing(entry["data_offsets"], file, f"{where}.data_offsets", 2)
        begin, end = (*offsets, None, None)[:2]
        schema.integer(begin, file, f"{where}.data_offsets", 0, data_bytes)
        schema.integer(end, file, f"{where}.data_offsets", begin, data_bytes)
        if entry["shape"] != [end - begin]:
            raise schema.fail(file, f"{where}.shape", f"must be [{end - begin}]")
        spans.append((begin, end))
    position = 0
    for begin, end in sorted(spans):
        if begin != position:
            raise ArtifactError(f"{file} field 'header' has overlapping or gapped tensors")
        position = end
    if position != data_bytes:
        raise ArtifactError(f"{file} is truncated or padded ({data_bytes} data bytes, the header "
                            f"describes {position})")
    return header


def read(directory: str | Path) -> tuple[dict, dict, dict[str, np.ndarray], dict | None]:
    """(manifest, first program's data, constants, report) of a checked artifact."""
    artifact = Artifact(directory)
    return artifact.manifest, artifact.program_data(), artifact.constants(), artifact.report()
