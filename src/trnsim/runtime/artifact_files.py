"""Reading the files of a saved model without trusting them: inside the artifact, regular, bounded.

A `.trnsim` directory may come from anyone. Every member is named relative to the artifact root,
must resolve inside it, must be a regular file reached without a symbolic link (a link out of the
artifact, `/dev/zero` or a FIFO is refused before a byte is read), and its size is checked against
a limit before reading. Each file is read once, into memory: its checksum and its parsing see the
same bytes, so nothing can change it in between.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from pathlib import Path

from trnsim.errors import TrnsimError

# Member names a manifest may list: the programs, the constants, the timing report, and the
# manifests of pipeline stages saved beside the first (``stage<i>/``). Nothing else is read.
MEMBER_NAME = re.compile(r"manifest\.json|program(\.p[1-9][0-9]{0,5})?\.json|"
                         r"constants\.safetensors|report\.json")
MAX_JSON_DEPTH = 64  # manifests and programs nest a few levels; deeper is not ours


class ArtifactError(TrnsimError):
    """A saved model that is missing, corrupted, hostile, or from an incompatible version."""


def member_path(root: Path, name: str) -> Path:
    """`root/name` after checking the name is one a manifest may list and that neither it nor a
    directory on the way is a symbolic link or leads outside `root`."""
    if not isinstance(name, str) or not MEMBER_NAME.fullmatch(name):
        raise ArtifactError(f"{root}: manifest.json field 'files' names {name!r}, which is not a "
                            f"file a trnsim artifact holds")
    path = root / name
    if "/" in name:
        directory = root / name.split("/", 1)[0]
        _check_directory(root, directory)
    if not path.resolve().is_relative_to(root.resolve()):
        raise ArtifactError(f"{root}: {name} resolves outside the artifact directory")
    return path


def _check_directory(root: Path, directory: Path) -> None:
    try:
        mode = os.lstat(directory).st_mode
    except FileNotFoundError:
        raise ArtifactError(f"{root}: {directory.name}/ is missing") from None
    if stat.S_ISLNK(mode) or not stat.S_ISDIR(mode):
        raise ArtifactError(f"{root}: {directory.name}/ is not a directory inside the artifact "
                            f"(symbolic links are refused)")


def read_member(root: Path, name: str, limit_bytes: int) -> bytes:
    """The bytes of member `name`, refused unless it is a regular file of at most `limit_bytes`."""
    path = member_path(root, name)
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise ArtifactError(f"{root}: {name} is missing") from None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise ArtifactError(f"{root}: {name} is a symbolic link (refused: an artifact's "
                                f"files must be inside it)") from None
        raise ArtifactError(f"{root}: {name} cannot be read ({error.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ArtifactError(f"{root}: {name} is not a regular file (devices, FIFOs and "
                                f"directories are refused)")
        if info.st_size > limit_bytes:
            raise ArtifactError(f"{root}: {name} is {info.st_size} bytes, over the limit of "
                                f"{limit_bytes} bytes for this file")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(info.st_size + 1)  # one more byte shows a file still growing
    finally:
        os.close(fd)
    if len(data) > info.st_size:
        raise ArtifactError(f"{root}: {name} changed size while it was read")
    return data


def parse_json(data: bytes, where: str) -> object:
    """JSON from bytes, with the nesting depth bounded (a 100,000-deep list is refused without
    recursing) and every failure an ArtifactError naming the file."""
    depth = _max_depth(data)
    if depth > MAX_JSON_DEPTH:
        raise ArtifactError(f"{where}: JSON nests {depth} levels deep, over the limit of "
                            f"{MAX_JSON_DEPTH}")
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ArtifactError(f"{where} is not UTF-8 text (corrupted)") from None
    except (json.JSONDecodeError, RecursionError, ValueError) as error:
        raise ArtifactError(f"{where} is not valid JSON ({error})") from None


_BRACKETS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def _max_depth(data: bytes) -> int:
    """The deepest bracket nesting of a JSON text, strings skipped (linear, no recursion)."""
    depth = deepest = 0
    for match in _BRACKETS.finditer(data):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        elif token in (b"]", b"}"):
            depth -= 1
    return deepest
