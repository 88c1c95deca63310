"""The versioned schema of a saved model, checked before any of it is used.

Each manifest field is declared once here with its type and bounds; an unknown key, a missing
one, a wrong type or a value out of bounds is an `ArtifactError` naming the file and the field.
Structures are checked against the fixed table of containers (`trnsim.compiler.structure`),
programs field by field before they are decoded, and then verified like a freshly compiled one.
Changing what an artifact stores means changing the tables here (and `ARTIFACT_FORMAT`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from trnsim.compiler.options import MODEL_TYPES, QUANTIZE_DTYPES
from trnsim.errors import TrnsimError
from trnsim.runtime.artifact_files import MEMBER_NAME, ArtifactError

# Format 2 added the whole-artifact checksum, the schema below and the structure type table;
# format 3 stores one ExecutionPlan (programs, cores, shared tensors, fabric) and the constants'
# specs, in place of format 2's modes (tensor_parallel, stages, lnc_shared).
ARTIFACT_FORMAT = 3

MAX_MANIFEST_BYTES = 16 << 20
MAX_PROGRAM_BYTES = 1 << 30
MAX_REPORT_BYTES = 16 << 20
MAX_CONSTANTS_BYTES = 1 << 40  # bounded by the file's own size too (read after fstat)
MAX_SAFETENSORS_HEADER_BYTES = 16 << 20
MAX_TENSOR_PARALLEL = 1024  # ranks of one model copy (a 64-chip UltraServer has 512 cores)
MAX_STAGES = 64  # neuron-cc pipelines span the cores of one inf1 instance (at most 64)
MAX_PROGRAMS = 1024  # distinct programs of one plan (per stage, per LNC core)
MAX_NODES = 1 << 17  # instances a plan's fabric spans (an UltraCluster: 100,000 chips)
MAX_CONSTANTS = 1 << 20  # constant keys (every rank's chunk of every sharded weight)
MAX_CORE_INDEX = 1 << 16
MAX_LIST = 1 << 20  # inputs, outputs, kernels, names ... of one model
MAX_TENSORS = 1 << 20
MAX_INSTRUCTIONS = 1 << 26
MAX_RANK = 8
MAX_DIM = 1 << 40
MAX_TENSOR_BYTES = 1 << 42  # 4 TiB: beyond any instance's HBM
MAX_TEXT = 4096  # a name, label or source line
MAX_STRUCTURE_NODES = 1 << 16
DIGEST = re.compile(r"[0-9a-f]{64}")
TORCH_DTYPES = frozenset(f"torch.{n}" for n in (
    "float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int64", "int32",
    "int16", "int8", "uint8", "bool", "complex64", "complex128"))


def _where(file: str, field: str) -> str:
    return f"{file} field {field!r}"


def fail(file: str, field: str, problem: str) -> ArtifactError:
    return ArtifactError(f"{_where(file, field)} {problem}")


# --- scalar checks ------------------------------------------------------------------------------
def text(value: Any, file: str, field: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise fail(file, field, f"must be a string of at most {MAX_TEXT} characters, not "
                                f"{_show(value)}")
    return value


def one_of(value: Any, file: str, field: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise fail(file, field, f"must be one of {', '.join(choices)}, not {_show(value)}")
    return value


def integer(value: Any, file: str, field: str, low: int, high: int, *,
            optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(file, field, f"must be an integer, not {_show(value)}")
    if not low <= value <= high:
        raise fail(file, field, f"is {value}, outside [{low}, {high}]")
    return value


def listing(value: Any, file: str, field: str, limit: int = MAX_LIST) -> list:
    if not isinstance(value, list):
        raise fail(file, field, f"must be a list, not {_show(value)}")
    if len(value) > limit:
        raise fail(file, field, f"has {len(value)} entries, over the limit of {limit}")
    return value


def record(value: Any, file: str, field: str, required: set[str], optional: set[str] = frozenset()
           ) -> dict:
    """A JSON object with exactly the `required` keys and some of the `optional` ones."""
    if not isinstance(value, dict):
        raise fail(file, field, f"must be an object, not {_show(value)}")
    unknown = sorted(set(value) - required - set(optional))
    if unknown:
        raise fail(file, f"{field}.{unknown[0]}", "is not a field this format has")
    missing = sorted(required - set(value))
    if missing:
        raise fail(file, f"{field}.{missing[0]}", "is missing")
    return value


def shape(value: Any, file: str, field: str, itemsize: int = 1) -> tuple[int, ...]:
    dims = listing(value, file, field, MAX_RANK)
    for i, d in enumerate(dims):
        integer(d, file, f"{field}[{i}]", 0, MAX_DIM)
    total = itemsize
    for d in dims:
        total *= d
    if total > MAX_TENSOR_BYTES:
        raise fail(file, field, f"{list(dims)} holds {total} bytes, over the limit of "
                                f"{MAX_TENSOR_BYTES}")
    return tuple(dims)


def dtype_name(value: Any, file: str, field: str):
    from trnsim.numerics import dtype as as_dtype

    text(value, file, field)
    try:
        return as_dtype(value)
    except TrnsimError as error:
        raise fail(file, field, f"is not a dtype trnsim knows ({error})") from None


def _show(value: Any) -> str:
    shown = repr(value)
    return f"{type(value).__name__} {shown[:60]}{'...' if len(shown) > 60 else ''}"


# --- manifest -----------------------------------------------------------------------------------
COMMON_FIELDS = {"format", "trnsim_version", "files", "checksum", "name"}
MODEL_FIELDS = {"instance", "options", "inputs", "outputs", "input_structure", "output_structure",
                "kernels", "placement", "plan", "constants", "sharded", "shards"}
PLAN_FIELDS = {"programs", "cores", "shared", "lnc", "fabric"}
CORE_FIELDS = {"program", "slot", "shard", "stage", "inputs", "outputs"}
SLOT_FIELDS = ("chip", "group", "rank", "lnc_index")
OPTION_FIELDS: dict[str, Callable[[Any, str, str], Any]] = {
    "instance": lambda v, f, k: text(v, f, k),
    "cores": lambda v, f, k: integer(v, f, k, 1, MAX_CORE_INDEX),
    "auto_cast": lambda v, f, k: text(v, f, k, optional=True),
    "auto_cast_type": lambda v, f, k: text(v, f, k),
    "optlevel": lambda v, f, k: integer(v, f, k, 1, 3),
    "lnc": lambda v, f, k: integer(v, f, k, 1, 2, optional=True),
    "tensor_parallel": lambda v, f, k: integer(v, f, k, 1, MAX_TENSOR_PARALLEL, optional=True),
    "pipeline_cores": lambda v, f, k: integer(v, f, k, 1, MAX_STAGES, optional=True),
    "model_type": lambda v, f, k: one_of(v, f, k, MODEL_TYPES),
    "quantize": lambda v, f, k: one_of(v, f, k, QUANTIZE_DTYPES),
}


def check_format(manifest: Any, file: str) -> None:
    """The version first: an older artifact gets a version error, not a list of schema errors."""
    if not isinstance(manifest, dict):
        raise ArtifactError(f"{file} must hold a JSON object, not {_show(manifest)}")
    version = manifest.get("format")
    if version != ARTIFACT_FORMAT:
        raise ArtifactError(f"{file} has artifact format {version!r}; this trnsim reads format "
                            f"{ARTIFACT_FORMAT} only (format 1 carries no whole-artifact "
                            f"checksum, format 2 no execution plan): recompile the model")


def check_manifest(manifest: Any, file: str) -> dict:
    """Every field of a model manifest against the schema."""
    check_format(manifest, file)
    record(manifest, file, "manifest", COMMON_FIELDS | MODEL_FIELDS)
    text(manifest["trnsim_version"], file, "trnsim_version")
    text(manifest["name"], file, "name")
    if not isinstance(manifest["checksum"], str) or not DIGEST.fullmatch(manifest["checksum"]):
        raise fail(file, "checksum", "must be a sha256 hex digest")
    files = manifest["files"]
    if not isinstance(files, dict):
        raise fail(file, "files", f"must be an object, not {_show(files)}")
    for name in ("program.json", "constants.safetensors"):
        if name not in files:
            raise fail(file, f"files.{name}", "is missing (every file carries a checksum)")
    if len(files) > 2 + MAX_PROGRAMS:
        raise fail(file, "files", f"lists {len(files)} files, over the limit of "
                                  f"{2 + MAX_PROGRAMS}")
    for name, digest in files.items():
        if not MEMBER_NAME.fullmatch(name) or name == "manifest.json":
            raise fail(file, f"files.{name}", "is not a file a trnsim artifact holds")
        if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
            raise fail(file, f"files.{name}", "must be a sha256 hex digest")
    _check_model_fields(manifest, file)
    return manifest


def _check_model_fields(m: dict, file: str) -> None:
    from trnsim import hardware

    try:
        spec = hardware.instance(text(m["instance"], file, "instance"))
    except TrnsimError as error:
        raise fail(file, "instance", str(error)) from None
    options = record(m["options"], file, "options", set(), set(OPTION_FIELDS))
    for key, check in OPTION_FIELDS.items():
        if key in options:
            check(options[key], file, f"options.{key}")
    for side in ("inputs", "outputs"):
        for i, s in enumerate(listing(m[side], file, side)):
            where = f"{side}[{i}]"
            record(s, file, where, {"name", "shape", "dtype"},
                   {"torch_dtype", "shard"} if side == "inputs" else {"torch_dtype"})
            if s.get("shard") is not None:
                _input_shard(s["shard"], len(s["shape"]), file, f"{where}.shard")
            text(s["name"], file, f"{where}.name")
            dt = dtype_name(s["dtype"], file, f"{where}.dtype")
            shape(s["shape"], file, f"{where}.shape", dt.itemsize)
            torch_dtype = text(s.get("torch_dtype"), file, f"{where}.torch_dtype", optional=True)
            if torch_dtype is not None and torch_dtype not in TORCH_DTYPES:
                raise fail(file, f"{where}.torch_dtype", f"{torch_dtype!r} is not one of "
                                                          f"{sorted(TORCH_DTYPES)}")
    for side, count in (("input_structure", len(m["inputs"])),
                        ("output_structure", len(m["outputs"]))):
        check_structure(m[side], file, side, count)
    for i, k in enumerate(listing(m["kernels"], file, "kernels")):
        record(k, file, f"kernels[{i}]", {"label", "op", "node", "source"}, {"flops"})
        for key in ("label", "op", "node"):
            text(k[key], file, f"kernels[{i}].{key}")
        text(k["source"], file, f"kernels[{i}].source", optional=True)
        integer(k.get("flops", 0), file, f"kernels[{i}].flops", 0, 1 << 62)
    cores = spec.logical_cores(m["options"].get("lnc"))
    for i, c in enumerate(listing(m["placement"], file, "placement", MAX_CORE_INDEX)):
        integer(c, file, f"placement[{i}]", 0, cores - 1)
    constants = m["constants"]
    if not isinstance(constants, dict) or len(constants) > MAX_CONSTANTS:
        raise fail(file, "constants", f"must be an object of at most {MAX_CONSTANTS} entries")
    for key, entry in constants.items():
        where = f"constants.{text(key, file, 'constants')}"
        record(entry, file, where, {"dtype", "shape"})
        shape(entry["shape"], file, f"{where}.shape",
              dtype_name(entry["dtype"], file, f"{where}.dtype").itemsize)
    shards = integer(m["shards"], file, "shards", 1, MAX_TENSOR_PARALLEL)
    for i, key in enumerate(listing(m["sharded"], file, "sharded")):
        if text(key, file, f"sharded[{i}]") not in constants:
            raise fail(file, f"sharded[{i}]", f"{key!r} is not one of the stored constants")
    _check_plan(m["plan"], m["files"], constants, shards, file)


def _check_plan(plan: Any, files: dict, constants: dict, shards: int, file: str) -> None:
    """The stored ExecutionPlan: each program a listed file, each core's program, slot, shard and
    stage in bounds, the fabric on a known instance."""
    from trnsim import hardware

    record(plan, file, "plan", PLAN_FIELDS)
    programs = listing(plan["programs"], file, "plan.programs", MAX_PROGRAMS)
    if not programs:
        raise fail(file, "plan.programs", "is empty (a plan runs at least one program)")
    for i, entry in enumerate(programs):
        where = f"plan.programs[{i}]"
        record(entry, file, where, {"file", "constants"})
        expected = "program.json" if i == 0 else f"program.p{i}.json"
        if entry["file"] != expected or expected not in files:
            raise fail(file, f"{where}.file", f"must be {expected!r}, a file the manifest lists")
        renamed = entry["constants"]
        if not isinstance(renamed, dict) or len(renamed) > MAX_CONSTANTS:
            raise fail(file, f"{where}.constants", "must be an object of constant names")
        for name, key in renamed.items():
            text(name, file, f"{where}.constants")
            if text(key, file, f"{where}.constants.{name}") not in constants:
                raise fail(file, f"{where}.constants.{name}", f"{key!r} is not a stored constant")
    cores = listing(plan["cores"], file, "plan.cores", MAX_CORE_INDEX)
    if not cores:
        raise fail(file, "plan.cores", "is empty (a plan runs on at least one core)")
    for i, core in enumerate(cores):
        where = f"plan.cores[{i}]"
        record(core, file, where, CORE_FIELDS)
        integer(core["program"], file, f"{where}.program", 0, len(programs) - 1)
        record(core["slot"], file, f"{where}.slot", set(SLOT_FIELDS))
        for key in SLOT_FIELDS:
            integer(core["slot"][key], file, f"{where}.slot.{key}", 0, MAX_CORE_INDEX * MAX_NODES)
        integer(core["shard"], file, f"{where}.shard", 0, shards - 1)
        integer(core["stage"], file, f"{where}.stage", 0, MAX_STAGES - 1)
        for side in ("inputs", "outputs"):
            for j, pair in enumerate(listing(core[side], file, f"{where}.{side}")):
                if not isinstance(pair, list) or len(pair) != 2:
                    raise fail(file, f"{where}.{side}[{j}]",
                               "must be a [model value, program tensor] pair")
                text(pair[0], file, f"{where}.{side}[{j}]")
                text(pair[1], file, f"{where}.{side}[{j}]")
    for i, name in enumerate(listing(plan["shared"], file, "plan.shared")):
        text(name, file, f"plan.shared[{i}]")
    integer(plan["lnc"], file, "plan.lnc", 1, 2, optional=True)
    fabric = plan["fabric"]
    if fabric is not None:
        record(fabric, file, "plan.fabric", {"instance", "lnc", "endpoints", "nodes"})
        try:
            hardware.instance(text(fabric["instance"], file, "plan.fabric.instance"))
        except TrnsimError as error:
            raise fail(file, "plan.fabric.instance", str(error)) from None
        integer(fabric["lnc"], file, "plan.fabric.lnc", 1, 2)
        nodes = integer(fabric["nodes"], file, "plan.fabric.nodes", 1, MAX_NODES)
        for i, e in enumerate(listing(fabric["endpoints"], file, "plan.fabric.endpoints",
                                      MAX_CORE_INDEX)):
            integer(e, file, f"plan.fabric.endpoints[{i}]", 0, MAX_CORE_INDEX * nodes)


def check_structure(data: Any, file: str, field: str, tensors: int) -> None:
    """A stored input/output nesting: known containers only, output types from the fixed table,
    as many tensor leaves as the model has tensors."""
    if data is None:
        return
    from trnsim.compiler.structure import KINDS, output_type

    nodes, leaves, stack = 0, 0, [(data, field)]
    while stack:
        node, where = stack.pop()
        nodes += 1
        if nodes > MAX_STRUCTURE_NODES:
            raise fail(file, field, f"has over {MAX_STRUCTURE_NODES} nodes")
        record(node, file, where, {"kind"}, {"children", "keys", "type", "value"})
        kind = node["kind"]
        if kind not in KINDS:
            raise fail(file, f"{where}.kind", f"is {_show(kind)}, not one of {list(KINDS)}")
        children = listing(node.get("children", []), file, f"{where}.children")
        keys = listing(node.get("keys", []), file, f"{where}.keys")
        for i, key in enumerate(keys):
            text(key, file, f"{where}.keys[{i}]")
        if kind in ("dict", "model_output") and len(keys) != len(children):
            raise fail(file, f"{where}.keys", f"has {len(keys)} names for {len(children)} values")
        if kind == "model_output":
            try:
                output_type(node.get("type"))
            except TrnsimError as error:
                raise fail(file, f"{where}.type", str(error)) from None
        elif "type" in node:
            raise fail(file, f"{where}.type", f"is not a field of a {kind} record")
        if kind == "const" and not isinstance(node.get("value"), (type(None), bool, int, float, str)):
            raise fail(file, f"{where}.value", "must be a JSON scalar")
        if kind in ("tensor", "const") and children:
            raise fail(file, f"{where}.children", f"a {kind} has no children")
        leaves += kind == "tensor"
        stack += [(c, f"{where}.children[{i}]") for i, c in enumerate(children)]
    if leaves != tensors:
        raise fail(file, field, f"holds {leaves} tensors, the model has {tensors}")


# --- program ------------------------------------------------------------------------------------
def check_program(data: Any, file: str) -> None:
    """A saved program's shape before decoding: known target, tensor kinds, dtypes and bounded
    shapes, known opcodes with only their own fields."""
    from trnsim import hardware
    from trnsim.isa.instruction import field_names
    from trnsim.isa.program import TENSOR_KINDS
    from trnsim.isa.serialize import FORMAT, opcode_table

    record(data, file, "program", {"format", "name", "target", "tensors", "instructions"},
           {"sbuf_peak", "psum_peak"})
    integer(data["format"], file, "format", FORMAT, FORMAT)
    text(data["name"], file, "name")
    try:
        hardware.core(text(data["target"], file, "target"))
    except TrnsimError as error:
        raise fail(file, "target", str(error)) from None
    for key in ("sbuf_peak", "psum_peak"):
        integer(data.get(key, 0), file, key, 0, MAX_TENSOR_BYTES)
    names = set()
    for i, t in enumerate(listing(data["tensors"], file, "tensors", MAX_TENSORS)):
        where = f"tensors[{i}]"
        record(t, file, where, {"name", "shape", "dtype", "kind"}, {"on_chip", "on_chip_from"})
        if text(t["name"], file, f"{where}.name") in names:
            raise fail(file, f"{where}.name", f"{t['name']!r} is declared twice")
        names.add(t["name"])
        shape(t["shape"], file, f"{where}.shape", dtype_name(t["dtype"], file,
                                                              f"{where}.dtype").itemsize)
        if t["kind"] not in TENSOR_KINDS:
            raise fail(file, f"{where}.kind", f"is {_show(t['kind'])}, not one of {TENSOR_KINDS}")
        if not isinstance(t.get("on_chip", False), bool):
            raise fail(file, f"{where}.on_chip", "must be true or false")
        integer(t.get("on_chip_from", 0), file, f"{where}.on_chip_from", 0, MAX_TENSOR_BYTES)
    opcodes = opcode_table()
    for i, ins in enumerate(listing(data["instructions"], file, "instructions", MAX_INSTRUCTIONS)):
        where = f"instructions[{i}]"
        record(ins, file, where, {"opcode", "fields"})
        cls = opcodes.get(ins["opcode"]) if isinstance(ins["opcode"], str) else None
        if cls is None:
            raise fail(file, f"{where}.opcode", f"{_show(ins['opcode'])} is not an opcode")
        if not isinstance(ins["fields"], dict):
            raise fail(file, f"{where}.fields", "must be an object")
        unknown = sorted(set(ins["fields"]) - set(field_names(cls)))
        if unknown:
            raise fail(file, f"{where}.fields.{unknown[0]}", f"is not a field of {ins['opcode']}")


def check_against_programs(manifest: dict, programs: list, file: str) -> None:
    """The manifest's names, shapes and constant specs agree with the programs they describe
    (a model's inputs and outputs may be any program's: a pipeline's stages differ)."""
    tensors = {}
    for program in reversed(programs):
        tensors.update(program.tensors)
    for side, kind in (("inputs", "input"), ("outputs", "output")):
        for i, s in enumerate(manifest[side]):
            decl = tensors.get(s["name"])
            if decl is None or decl.kind != kind:
                raise fail(file, f"{side}[{i}].name", f"{s['name']!r} is not an {kind} of the "
                                                      f"program")
            stored = tuple(s["shape"]) or (1,)  # a scalar lives in a one-element tensor
            if s.get("shard"):  # the program holds one rank's chunk of a sharded input
                axis, _, _, parts, padded = s["shard"]
                stored = (*stored[:axis], (padded or stored[axis]) // parts, *stored[axis + 1:])
            if stored != decl.shape or s["dtype"] != decl.dtype.name:
                raise fail(file, f"{side}[{i}]", f"says {s['dtype']}{s['shape']}, the program "
                                                 f"holds {decl.dtype.name}{list(decl.shape)}")
    for i, name in enumerate(manifest["plan"]["shared"]):
        if name not in tensors:
            raise fail(file, f"plan.shared[{i}]", f"{name!r} is not a tensor of the programs")
    for p, (entry, program) in enumerate(zip(manifest["plan"]["programs"], programs,
                                             strict=True)):
        for name in entry["constants"]:
            if name not in program.tensors or program.tensors[name].kind != "constant":
                raise fail(file, f"plan.programs[{p}].constants.{name}",
                           f"{name!r} is not a constant of {entry['file']}")


def _input_shard(value: Any, rank: int, file: str, where: str) -> None:
    """A sharded input's cut: [axis, degree, groups, parts, padded] (`sim.rank_chunk`)."""
    if not isinstance(value, list) or len(value) != 5 or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value[:4]) \
            or not (value[4] is None or (isinstance(value[4], int) and value[4] > 0)):
        raise fail(file, where, "expected [axis, degree, groups, parts, padded]")
    axis, degree, groups, parts, _ = value
    if not 0 <= axis < rank or degree < 1 or groups != 1 or not 1 <= parts <= degree \
            or degree % parts:
        raise fail(file, where, f"{value} is not a cut of a rank-{rank} input over its ranks")
