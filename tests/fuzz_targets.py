"""Fuzz targets shared by CI (a few seconds, tests/*/test_*_fuzz.py) and `benchmarks/fuzz.py`
(at length): the artifact loader fed mutated `.trnsim` directories, and the command line fed
hostile argument lists. Each case ends in one of three outcomes: "ok" (accepted), "clean" (a
TrnsimError or a usage error: one line, exit status 2) or "uncaught" (anything else: a bug).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
import struct
from pathlib import Path

from hypothesis import strategies as st

from trnsim.errors import TrnsimError

# --- artifact loader --------------------------------------------------------------------------
MANIFEST_KEYS = ("format", "trnsim_version", "files", "checksum", "name", "instance", "options",
                 "inputs", "outputs", "input_structure", "output_structure", "kernels",
                 "placement", "plan", "constants", "sharded", "shards", "extra")
PLAN_KEYS = ("programs", "cores", "shared", "lnc", "fabric", "cores.program", "cores.slot",
             "cores.shard", "cores.stage", "cores.inputs", "programs.file", "programs.constants")
FILES = ("manifest.json", "program.json", "constants.safetensors")
HOSTILE_TYPES = ("os.system", "subprocess.getoutput", "builtins.open", "shutil.rmtree",
                 "builtins.eval", "transformers.modeling_outputs.BaseModelOutput", "posix.system")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True)
    | st.text(max_size=12) | st.sampled_from(["../../etc/passwd", "/dev/zero", "tensor", "U8"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=12)

structures = st.recursive(
    st.builds(lambda kind, value: {"kind": kind, **({"value": value} if kind == "const" else {})},
              st.sampled_from(["tensor", "const", "closure"]), json_values),
    lambda inner: st.builds(
        lambda kind, children, typ: {"kind": kind, "children": children,
                                     "keys": [f"k{i}" for i in range(len(children))],
                                     **({"type": typ} if kind == "model_output" else {})},
        st.sampled_from(["tuple", "list", "dict", "model_output"]),
        st.lists(inner, max_size=3), st.sampled_from(HOSTILE_TYPES)),
    max_leaves=8)

mutations = st.lists(st.one_of(
    st.tuples(st.just("field"), st.sampled_from(MANIFEST_KEYS), json_values),
    st.tuples(st.just("plan"), st.sampled_from(PLAN_KEYS), json_values),
    st.tuples(st.just("structure"), st.sampled_from(["input_structure", "output_structure"]),
              structures),
    st.tuples(st.just("program"), st.sampled_from(["tensors", "instructions", "target", "name",
                                                   "format", "sbuf_peak"]),
              st.integers(0, 3), json_values),
    st.tuples(st.just("truncate"), st.sampled_from(FILES), st.floats(0, 1)),
    st.tuples(st.just("flip"), st.sampled_from(FILES), st.integers(0, 10**6), st.integers(1, 255)),
    st.tuples(st.just("header"), st.integers(0, 2**64 - 1)),
    st.tuples(st.just("depth"), st.integers(1, 200_000)),
), min_size=1, max_size=3)
reseal_flags = st.booleans()


def make_artifact(directory: Path) -> Path:
    """A small compiled model saved once; cases mutate copies of it."""
    import torch

    import trnsim

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8).eval()
    return Path(trnsim.trace(model, (torch.randn(2, 8),), instance="inf2.xlarge")
                .save(directory / "base.trnsim"))


def _reseal(root: Path) -> None:
    from trnsim.runtime.artifact import manifest_checksum

    try:
        manifest = json.loads((root / "manifest.json").read_text())
    except (ValueError, UnicodeDecodeError, RecursionError):
        return  # not JSON the harness can read back: left as it is
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        return
    for name in list(manifest["files"]):
        path = root / str(name)
        if path.is_file() and not path.is_symlink() and path.resolve().is_relative_to(root):
            manifest["files"][name] = hashlib.sha256(path.read_bytes()).hexdigest()
    manifest.pop("checksum", None)
    try:
        manifest["checksum"] = manifest_checksum(manifest)
    except RecursionError:
        return
    (root / "manifest.json").write_text(json.dumps(manifest))


def _json(root: Path, name: str):
    try:
        return json.loads((root / name).read_text())
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


def mutate(root: Path, changes, reseal: bool) -> None:
    for change in changes:
        kind = change[0]
        if kind in ("field", "structure", "depth"):
            manifest = _json(root, "manifest.json")
            if not isinstance(manifest, dict):
                continue
            if kind == "depth":
                text = json.dumps(manifest)[:-1] + ', "output_structure": ' + \
                    "[" * change[1] + "]" * change[1] + "}"
                (root / "manifest.json").write_text(text)
                continue
            manifest[change[1]] = change[2]
            (root / "manifest.json").write_text(json.dumps(manifest))
        elif kind == "plan":
            manifest = _json(root, "manifest.json")
            plan = manifest.get("plan") if isinstance(manifest, dict) else None
            if not isinstance(plan, dict):
                continue
            outer, _, inner = change[1].partition(".")
            entries = plan.get(outer)
            if inner and isinstance(entries, list) and entries and isinstance(entries[0], dict):
                entries[0][inner] = change[2]
            else:
                plan[outer] = change[2]
            (root / "manifest.json").write_text(json.dumps(manifest))
        elif kind == "program":
            program = _json(root, "program.json")
            if not isinstance(program, dict):
                continue
            _, key, index, value = change
            target = program.get(key)
            if isinstance(target, list) and target:
                target[index % len(target)] = value
            else:
                program[key] = value
            (root / "program.json").write_text(json.dumps(program))
        elif kind == "truncate":
            data = (root / change[1]).read_bytes()
            (root / change[1]).write_bytes(data[:int(len(data) * change[2])])
        elif kind == "flip":
            data = bytearray((root / change[1]).read_bytes())
            if data:
                data[change[2] % len(data)] ^= change[3]
            (root / change[1]).write_bytes(bytes(data))
        elif kind == "header":
            data = (root / "constants.safetensors").read_bytes()
            (root / "constants.safetensors").write_bytes(struct.pack("<Q", change[1]) + data[8:])
    if reseal:
        _reseal(root)


def artifact_case(base: Path, workdir: Path, changes, reseal: bool) -> str:
    """Load a mutated copy of `base`; the outcome ("ok", "clean" or "uncaught: ...")."""
    import trnsim

    root = workdir / "case.trnsim"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(base, root)
    try:
        mutate(root, changes, reseal)
    except RecursionError:  # the harness could not write this case (json.dumps depth)
        return "skipped"
    try:
        trnsim.load(root)
    except TrnsimError:
        return "clean"
    except Exception as error:  # the outcome under test: any other exception is a finding
        return f"uncaught: {type(error).__name__}: {str(error)[:200]}"
    return "ok"


# --- command line ---------------------------------------------------------------------------
NASTY = ("-1", "0", "1", "3", "nan", "inf", "-inf", "1e309", "", " ", "99999999999999999999",
         "1G", "32M", "1.0000001", "/nonexistent-dir/out.json", "../../etc/passwd", "bogus",
         "128x-5", "128x1000000000", "1x128:int64", "inf2.xlarge", "trn1.32xlarge", ",",
         "model,bogus", "allr", "x:y")
COMMANDS = {
    "nccom-test": ("allr", "-r", "-N", "-b", "-e", "-i", "-f", "-d", "--instance", "--lnc",
                   "--algorithm", "--report-to-json-file", "-t", "-c"),
    "kernel run": ("--shapes", "--dtype", "--target", "--timing-only", "--profile", "--seed"),
    "bench": ("--models", "--instances", "--batch", "--seq", "--auto-cast", "--plot", "--lnc",
              "--tp", "--json"),
    "validate": ("--kinds", "--json"),
    "compile": ("--input-shape", "--instance", "-o", "--auto-cast", "--cores", "--tp", "--lnc"),
    "run": ("--seed", "--json"),
    "ls": ("--instance", "--json", "--lnc"),
}
argvs = st.sampled_from(sorted(COMMANDS)).flatmap(lambda command: st.tuples(
    st.just(command), st.lists(st.one_of(st.sampled_from(COMMANDS[command]),
                                         st.sampled_from(NASTY)), max_size=8)))


class ReachedWork(Exception):
    """The command accepted its arguments and started the work (stubbed out while fuzzing)."""


def _stub(*args, **kwargs):
    raise ReachedWork


@contextlib.contextmanager
def work_stubbed():
    """Replace the expensive entry points each command calls once its arguments are checked."""
    import trnsim
    from trnsim.collectives import nccom
    from trnsim.nki.jit import Kernel
    from trnsim.perf import bench, validate

    saved = [(trnsim, "trace"), (trnsim, "load"), (nccom, "run"), (Kernel, "run"),
             (bench, "run_matrix"), (validate, "validate")]
    originals = [getattr(owner, name) for owner, name in saved]
    for owner, name in saved:
        setattr(owner, name, _stub)
    try:
        yield
    finally:
        for (owner, name), original in zip(saved, originals, strict=True):
            setattr(owner, name, original)


def cli_case(command: str, args: list[str], kernel_target: str) -> str:
    """Run `trnsim COMMAND ARGS` with the work stubbed: "ok", "clean" or "uncaught: ..."."""
    from trnsim.cli import main

    argv = command.split() + ([kernel_target] if command == "kernel run" else [])
    argv += ["x:y"] if command == "compile" else []
    argv += ["/nonexistent-dir/m.trnsim"] if command == "run" else []
    argv += list(args)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            main(argv)
    except ReachedWork:
        return "ok"
    except SystemExit as stop:
        if stop.code in (0, None):
            return "ok"
        if stop.code == 2 and "Traceback" not in stderr.getvalue():
            return "clean"
        return f"uncaught: exit {stop.code}: {stderr.getvalue()[-200:]}"
    except TrnsimError:  # main turns these into exit 2; reaching here would be a bug
        return "uncaught: TrnsimError escaped main"
    except Exception as error:  # the outcome under test
        return f"uncaught: {type(error).__name__}: {str(error)[:200]}"
    return "ok"


KERNEL_SOURCE = '''
import trnsim.nki.language as nl
from trnsim import nki


@nki.jit
def copy(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out[0:128, 0:512], value=nl.load(a[0:128, 0:512]))
    return out
'''
