"""Argument checks shared by commands, run before any work: output paths, sizes, name lists.

Each raises a TrnsimError (one line, exit status 2) naming the option and the value, so a
mistyped path or size never surfaces as a traceback after minutes of simulation.
"""

from __future__ import annotations

from pathlib import Path

from trnsim.errors import InvalidArgumentError, LimitExceededError

# The largest tensor `kernel run` accepts: the HBM of the largest chip trnsim models holds
# 144 GiB (Trainium3); an input beyond it cannot exist on the device
MAX_KERNEL_INPUT_BYTES = 144 << 30


def output_file(path: str | None, option: str) -> None:
    """A file the command will write: its directory must exist and it must not be a directory."""
    if path is None:
        return
    if not path.strip():
        raise InvalidArgumentError(f"{option} is empty: give a file path")
    target = Path(path)
    if target.is_dir():
        raise InvalidArgumentError(f"{option} {path}: is a directory, not a file")
    parent = target.parent
    if not parent.is_dir():
        raise InvalidArgumentError(f"{option} {path}: directory {parent} does not exist")


def output_directory(path: str | None, option: str) -> None:
    """A directory the command will write files into: it may exist (not as a file); its parent
    must."""
    if path is None:
        return
    if not path.strip():
        raise InvalidArgumentError(f"{option} is empty: give a directory path")
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise InvalidArgumentError(f"{option} {path}: a file exists there (give a directory)")
    if not target.parent.is_dir():
        raise InvalidArgumentError(f"{option} {path}: directory {target.parent} does not exist")


def new_artifact(path: str, option: str = "--output") -> None:
    """Where `compile` saves a model: a new path or an earlier artifact (replaced); never an
    existing file or a directory that is not a trnsim artifact (such as the source tree)."""
    if not path.strip():
        raise InvalidArgumentError(f"{option} is empty: give a path such as model.trnsim")
    target = Path(path)
    if target.is_file() or target.is_symlink():
        raise InvalidArgumentError(f"{option} {path}: a file exists there (give a new path)")
    if target.is_dir() and not (target / "manifest.json").is_file():
        raise InvalidArgumentError(f"{option} {path}: an existing directory that is not a "
                                   f"trnsim model (give a new path such as model.trnsim)")
    if not target.parent.is_dir():
        raise InvalidArgumentError(f"{option} {path}: directory {target.parent} does not exist")


def instance_given(name: str | None, example: str = "trn1.32xlarge",
                   option: str = "--instance") -> None:
    """An instance option given empty (``--instance ''``) is a mistake, not the default."""
    if name is not None and not name.strip():
        raise InvalidArgumentError(f"{option} is empty: give an instance such as {example}")


def existing_file(path: str | None, what: str) -> None:
    if path is not None and not Path(path).is_file():
        raise InvalidArgumentError(f"{what} {path}: no such file")


def names(text: str | None, option: str, known: tuple[str, ...]) -> tuple[str, ...] | None:
    """A comma-separated list from `known` (None when the option is not given)."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or not all(parts):
        raise InvalidArgumentError(f"{option} {text!r}: an empty name (expected "
                                   f"{', '.join(known) if known else 'comma-separated names'})")
    unknown = [p for p in parts if known and p not in known]
    if unknown:
        raise InvalidArgumentError(f"{option}: unknown {unknown[0]!r} (expected one of "
                                   f"{', '.join(known)})")
    return tuple(parts)


def lnc(value: int | None) -> None:
    if value is not None and value not in (1, 2):
        raise InvalidArgumentError(f"--lnc {value}: a logical NeuronCore is 1 or 2 physical cores")


def kernel_inputs(specs: list[tuple[tuple[int, ...], str]]) -> None:
    """Shapes of `kernel run`: positive dimensions, each tensor within a chip's HBM."""
    from trnsim.numerics import dtype as as_dtype

    for shape, dtype in specs:
        if any(d <= 0 for d in shape):
            raise InvalidArgumentError(f"--shapes {'x'.join(map(str, shape))}: dimensions must be "
                                       f"positive")
        size = as_dtype(dtype).itemsize
        for d in shape:
            size *= d
        if size > MAX_KERNEL_INPUT_BYTES:
            raise LimitExceededError(f"--shapes {'x'.join(map(str, shape))}:{dtype} bytes", size,
                                     MAX_KERNEL_INPUT_BYTES,
                                     context="the HBM of the largest chip trnsim models")
