"""Where registry records live and how they are written and read back.

One JSON file per process, ``<pid>.json``, in a directory only this user can enter:
``$TRNSIM_RUNTIME_DIR``, else ``$XDG_RUNTIME_DIR/trnsim``, else ``<tmp>/trnsim-<uid>``. Files are
written whole to a temporary name and renamed over the old one, so a reader never sees half a
record. A record whose process has died (or whose pid now names another process: the start time
differs) is deleted by whoever reads it, so no stale entry outlives its process.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
import time
from pathlib import Path

from trnsim.errors import TrnsimError

DIR_ENV = "TRNSIM_RUNTIME_DIR"
FORMAT = 1  # the record's schema version; readers skip records of another version
MAX_RECORD_BYTES = 4 << 20  # a record is a few KB to ~100 KB; larger is not one of ours
TEMP_PREFIX = ".tmp-"
ORPHAN_TEMP_AGE_S = 60.0  # a temporary file this old was left by a writer that died mid-write


class RegistryDirError(TrnsimError):
    """The registry directory is missing, not a directory, or open to other users."""


def registry_dir(environ=None) -> Path:
    """The per-user directory of records (not created here)."""
    environ = os.environ if environ is None else environ
    if environ.get(DIR_ENV):
        return Path(environ[DIR_ENV])
    runtime = environ.get("XDG_RUNTIME_DIR")
    if runtime and _owned_private_dir(Path(runtime)):
        return Path(runtime) / "trnsim"
    return Path(tempfile.gettempdir()) / f"trnsim-{os.getuid()}"


def _owned_private_dir(path: Path) -> bool:
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()


def ensure_dir(path: Path) -> Path:
    """Create the directory (0700) if needed and check that it is ours and private."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700, parents=True)
    check_dir(path)
    return path


def check_dir(path: Path) -> None:
    try:
        info = path.lstat()
    except FileNotFoundError:
        raise RegistryDirError(f"registry directory {path} does not exist") from None
    if not stat.S_ISDIR(info.st_mode):
        raise RegistryDirError(f"registry directory {path} is not a directory (a symlink or a file)")
    if info.st_uid != os.getuid():
        raise RegistryDirError(f"registry directory {path} belongs to uid {info.st_uid}, not to "
                               f"this user ({os.getuid()}); set {DIR_ENV} to a directory of yours")
    if info.st_mode & 0o077:
        raise RegistryDirError(f"registry directory {path} is open to other users (mode "
                               f"{stat.S_IMODE(info.st_mode):o}, expected 700); chmod 700 it")


def record_path(directory: Path, pid: int) -> Path:
    return directory / f"{pid}.json"


def write_record(directory: Path, record: dict) -> None:
    """Write `record` as ``<pid>.json`` atomically (temporary file + rename)."""
    data = json.dumps(record, separators=(",", ":")).encode()
    fd, temp = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temp, record_path(directory, record["pid"]))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def remove_record(directory: Path, pid: int) -> None:
    with contextlib.suppress(OSError):
        os.unlink(record_path(directory, pid))


def process_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux /proc), None elsewhere or when
    it has gone. Together with the pid it names one process: pids are reused, start times not."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()  # the command name may hold spaces and parens
    try:
        return int(fields[19])  # field 22 of proc(5), counted after "pid (comm)"
    except (IndexError, ValueError):
        return None


def is_alive(pid: int, start: int | None) -> bool:
    """Whether the process that wrote a record is still running."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # another user's process now has this pid: ours has gone
    if start is None:
        return True
    current = process_start(pid)
    return current is None or current == start


def read_records(directory: Path | None = None, *, clean: bool = True) -> list[dict]:
    """Every live process's record, oldest process first; dead processes' records are removed
    (with ``clean``). A missing directory means no process has registered yet."""
    directory = registry_dir() if directory is None else directory
    if not directory.exists():
        return []
    check_dir(directory)
    records = []
    now = time.time()
    for path in sorted(directory.iterdir()):
        if path.name.startswith(TEMP_PREFIX):
            if clean and _age_s(path, now) > ORPHAN_TEMP_AGE_S:
                with contextlib.suppress(OSError):
                    path.unlink()
            continue
        if path.suffix != ".json" or not path.stem.isdigit():
            continue
        record = _load(path)
        if record is None:
            continue
        if not is_alive(int(record["pid"]), record.get("proc_start")):
            if clean:
                with contextlib.suppress(OSError):
                    path.unlink()
            continue
        records.append(record)
    return sorted(records, key=lambda r: (r.get("started_at", 0.0), r["pid"]))


def _age_s(path: Path, now: float) -> float:
    try:
        return now - path.stat().st_mtime
    except OSError:
        return 0.0


def _load(path: Path) -> dict | None:
    """A record, or None when it is not one (wrong size, not JSON, another format)."""
    try:
        if path.stat().st_size > MAX_RECORD_BYTES:  # checked before reading it
            return None
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        return None
    if not isinstance(record.get("pid"), int) or str(record["pid"]) != path.stem:
        return None
    return record
