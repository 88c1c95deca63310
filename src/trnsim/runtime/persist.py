"""CompiledModel.save / trnsim.load: an `ExecutionPlan` as an artifact (`trnsim.runtime.artifact`).

The manifest's ``plan`` lists the distinct programs (``program.json``, then
``program.p<i>.json``) and every planned core (its program, slot, weight shard, stage and the
values it reads and writes). Constants are stored once by name in ``constants.safetensors`` (a
program whose constant of the same name holds other data stores it as ``name@p<i>``); a
tensor-parallel model's sharded weights are stored once per rank (``name@rank<r>``).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from trnsim.runtime import artifact_schema as schema
from trnsim.runtime.artifact import Artifact, ArtifactError, rank_key, write
from trnsim.runtime.model import CompiledModel
from trnsim.sim.execution_plan import (
    ExecutionPlan,
    PlanFabric,
    PlannedCore,
    TensorSpec,
    shard_program,
)
from trnsim.sim.sync import CoreSlot


def save_model(model: CompiledModel, path) -> Path:
    from trnsim.isa.serialize import program_to_data

    plan = model.plan
    programs = [plan.program(i) for i in range(len(plan.programs))]
    shards = 1 + max(core.shard for core in plan.cores)
    constants: dict = {}
    specs: dict[str, dict] = {}  # constant key -> dtype and shape (the program's declaration)
    owners: dict[str, object] = {}  # constant key -> the data object stored under it
    described, sharded = [], []
    for index, program in enumerate(programs):
        renamed = {}
        for decl in program.tensors.values():
            if decl.kind != "constant":
                continue
            key = decl.name
            if key in owners and owners[key] is not decl.data:
                key = renamed[decl.name] = f"{decl.name}@p{index}"
            if key in owners:
                continue
            owners[key] = decl.data
            constants[key] = decl.values()
            specs[key] = {"dtype": decl.dtype.name, "shape": list(decl.shape)}
            if shards > 1 and getattr(decl.data, "sharded", False):
                sharded.append(key)
                for rank in range(1, shards):
                    constants[rank_key(key, rank)] = \
                        shard_program(program, rank).tensors[decl.name].values()
                    specs[rank_key(key, rank)] = specs[key]
        described.append({"file": "program.json" if index == 0 else f"program.p{index}.json",
                          "constants": renamed})
    manifest = {
        "name": plan.name, "instance": plan.instance, "options": model.options,
        "inputs": [_spec(s) for s in plan.inputs], "outputs": [_spec(s) for s in plan.outputs],
        "input_structure": plan.input_structure.to_json() if plan.input_structure else None,
        "output_structure": plan.output_structure.to_json() if plan.output_structure else None,
        "kernels": [vars(k) for k in plan.kernels], "placement": plan.placement,
        "plan": {"programs": described,
                 "cores": [{"program": c.program, "slot": asdict(c.slot), "shard": c.shard,
                            "stage": c.stage, "inputs": [list(b) for b in c.inputs],
                            "outputs": [list(b) for b in c.outputs]} for c in plan.cores],
                 "shared": list(plan.shared), "lnc": plan.lnc,
                 "fabric": asdict(plan.fabric) if plan.fabric is not None else None},
        "constants": specs,
        "sharded": sharded, "shards": shards,
    }
    more = {f"p{i}": program_to_data(p) for i, p in enumerate(programs) if i}
    return write(path, manifest, program_to_data(programs[0]), constants, more_programs=more)


class _RankArrays:
    """A loaded sharded constant: every rank's chunk (`shard_program` asks `for_rank`)."""

    sharded = True

    def __init__(self, chunks: list, rank: int = 0) -> None:
        self.chunks, self.rank = chunks, rank

    def __call__(self):
        return self.chunks[self.rank]

    def for_rank(self, rank: int) -> _RankArrays:
        return _RankArrays(self.chunks, rank)


def load_model(path) -> CompiledModel:
    """Load a model saved with CompiledModel.save (no model code needed; data only: every field
    is checked by `artifact_schema` before it is used)."""
    from trnsim.compiler.lowering import KernelCall
    from trnsim.compiler.structure import Structure

    artifact = Artifact(path)
    manifest, file = artifact.manifest, artifact.manifest_file
    layout, specs = manifest["plan"], manifest["constants"]
    constants = artifact.constants()
    shards, sharded = manifest["shards"], set(manifest["sharded"])
    programs = []
    for entry in layout["programs"]:
        data = artifact.program_data(entry["file"])
        renamed = entry["constants"]
        names = {}
        for t in data["tensors"]:
            if t["kind"] != "constant":
                continue
            key = names[t["name"]] = renamed.get(t["name"], t["name"])
            spec = specs.get(key)
            if spec is None or spec["dtype"] != t["dtype"] or spec["shape"] != t["shape"]:
                raise schema.fail(file, f"constants.{key}", f"does not declare {entry['file']}'s "
                                                            f"constant {t['name']!r} "
                                                            f"({t['dtype']}{t['shape']})")
            if key in sharded:
                for r in range(1, shards):
                    if specs.get(rank_key(key, r)) != spec:
                        raise schema.fail(file, f"constants.{rank_key(key, r)}",
                                          f"must declare rank {r}'s chunk of {key!r}")
        program = artifact.program(entry["file"], {n: constants[k] for n, k in names.items()})
        for name, key in names.items():
            if key in sharded:
                chunks = [constants[key]] + [constants[rank_key(key, r)] for r in range(1, shards)]
                program.tensors[name].data = _RankArrays(chunks)
        programs.append(program)
    schema.check_against_programs(manifest, programs, file)
    try:
        cores = [PlannedCore(program=c["program"], slot=CoreSlot(**c["slot"]), shard=c["shard"],
                             stage=c["stage"], inputs=tuple(tuple(b) for b in c["inputs"]),
                             outputs=tuple(tuple(b) for b in c["outputs"]))
                 for c in layout["cores"]]
        fabric = layout["fabric"]
        fabric = PlanFabric(fabric["instance"], fabric["lnc"], tuple(fabric["endpoints"]),
                            fabric["nodes"]) if fabric else None
        inputs = [TensorSpec(**{**s, "shape": tuple(s["shape"]),
                                **({"shard": tuple(s["shard"])} if s.get("shard") else {})})
                  for s in manifest["inputs"]]
        outputs = [TensorSpec(**{**s, "shape": tuple(s["shape"])}) for s in manifest["outputs"]]
        structures = [Structure.from_json(manifest[k]) if manifest.get(k) else None
                      for k in ("input_structure", "output_structure")]
        kernels = [KernelCall(**k) for k in manifest["kernels"]]
    except (KeyError, TypeError, ValueError) as error:  # the schema has checked each field
        raise ArtifactError(f"{file}: manifest is malformed ({error})") from None
    plan = ExecutionPlan(name=manifest["name"], instance=manifest["instance"], programs=programs,
                         cores=cores, inputs=inputs, outputs=outputs,
                         shared=tuple(layout["shared"]), fabric=fabric, lnc=layout["lnc"],
                         input_structure=structures[0], output_structure=structures[1],
                         kernels=kernels, placement=manifest["placement"])
    return CompiledModel(plan, manifest["options"])


def _spec(spec: TensorSpec) -> dict:
    """A model input or output as the manifest stores it (no cut for an unsharded one)."""
    record = asdict(spec)
    if record["shard"] is None:
        del record["shard"]
    return record
