"""CompiledModel.save / trnsim.load, on top of `trnsim.runtime.artifact`."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from trnsim.runtime.artifact import Artifact, ArtifactError, rank_key, write
from trnsim.runtime.artifact_schema import check_against_programs
from trnsim.runtime.model import CompiledModel, InputSpec, OutputSpec


def save_model(model: CompiledModel, path) -> Path:
    """One artifact; a pipelined model's stages 1.. are artifacts in ``stage<i>/`` beside it; an
    LNC=2 model's second physical core's program is ``program.core1.json`` in it."""
    from trnsim.isa.serialize import program_to_data

    stages, stage_manifests = [], []
    for index, stage in enumerate(model.stages):
        program = stage.program
        stages.append({"inputs": stage.inputs, "outputs": stage.outputs})
        if index:
            write(Path(path) / f"stage{index}", {"name": f"{model.name} stage {index}"},
                  program_to_data(program), _constants(program))
            stage_manifests.append(f"stage{index}/manifest.json")
    constants = _constants(model.program)
    sharded = sorted(t.name for t in model.program.tensors.values()
                     if t.kind == "constant" and getattr(t.data, "sharded", False))
    for rank, program in enumerate(model.rank_programs()[1:], start=1):
        constants.update({rank_key(name, rank): program.tensors[name].values() for name in sharded})
    manifest = {
        "name": model.name, "instance": model.instance, "options": model.options,
        "inputs": [asdict(s) for s in model.inputs], "outputs": [asdict(s) for s in model.outputs],
        "input_structure": model.input_structure.to_json() if model.input_structure else None,
        "output_structure": model.output_structure.to_json() if model.output_structure else None,
        "kernels": [vars(k) for k in model.kernels], "placement": model.placement,
        "tensor_parallel": model.tensor_parallel, "sharded": sharded, "stages": stages,
        "lnc_shared": list(model.shared) if model.partner_source is not None else None,
    }
    more = ({"core1": program_to_data(model.physical_programs()[1])}
            if model.partner_source is not None else None)
    return write(path, manifest, program_to_data(model.program), constants, more_programs=more,
                 stage_manifests=stage_manifests)


def _constants(program) -> dict:
    return {t.name: t.values() for t in program.tensors.values() if t.kind == "constant"}


class _RankArrays:
    """A loaded sharded constant: every rank's chunk (`rank_program` asks `for_rank`)."""

    sharded = True

    def __init__(self, chunks: list, rank: int = 0) -> None:
        self.chunks, self.rank = chunks, rank

    def __call__(self):
        return self.chunks[self.rank]

    def for_rank(self, rank: int) -> _RankArrays:
        return _RankArrays(self.chunks, rank)


def load_model(path) -> CompiledModel:
    """Load a model saved with CompiledModel.save (no model code needed; data only: every
    field is checked by `artifact_schema` before it is used)."""
    from trnsim.compiler.lowering import KernelCall
    from trnsim.compiler.structure import Structure

    artifact = Artifact(path)
    manifest, file = artifact.manifest, artifact.manifest_file
    constants = artifact.constants()
    program = artifact.program("program.json", constants)
    try:
        inputs = [InputSpec(**{**s, "shape": tuple(s["shape"])}) for s in manifest["inputs"]]
        outputs = [OutputSpec(**{**s, "shape": tuple(s["shape"])}) for s in manifest["outputs"]]
        structures = [Structure.from_json(manifest[k]) if manifest.get(k) else None
                      for k in ("input_structure", "output_structure")]
        kernels = [KernelCall(**k) for k in manifest["kernels"]]
    except (KeyError, TypeError, ValueError) as error:  # the schema has checked each field
        raise ArtifactError(f"{file}: manifest is malformed ({error})") from None
    stages = _load_stages(artifact, program, manifest["stages"])
    check_against_programs(manifest, [s.program for s in stages] or [program], file)
    shared = manifest["lnc_shared"]
    ranks = manifest["tensor_parallel"]
    for name in manifest["sharded"]:
        chunks = [constants[name]] + [constants[rank_key(name, r)] for r in range(1, ranks)]
        program.tensors[name].data = _RankArrays(chunks)
    partner = None
    if shared is not None:
        partner = artifact.program("program.core1.json", constants)
        for name in manifest["sharded"]:
            partner.tensors[name].data = program.tensors[name].data  # every rank's chunks
    return CompiledModel(name=manifest["name"], program_source=program, inputs=inputs,
                         outputs=outputs, instance=manifest["instance"],
                         options=manifest["options"], input_structure=structures[0],
                         output_structure=structures[1], kernels=kernels,
                         placement=manifest["placement"], tensor_parallel=ranks, stages=stages,
                         partner_source=partner, shared=tuple(shared or ()))


def _load_stages(artifact: Artifact, first, described: list[dict]) -> list:
    from trnsim.runtime.pipeline import PipelineStage

    stages = []
    for index, stage in enumerate(described):
        if index:
            from trnsim.runtime.artifact_schema import MAX_MANIFEST_BYTES

            listed = artifact.member(f"stage{index}/manifest.json", MAX_MANIFEST_BYTES)
            inner = Artifact(artifact.root / f"stage{index}", stage=True, manifest_bytes=listed)
            program = inner.program("program.json", inner.constants())
        else:
            program = first
        stages.append(PipelineStage(program, [tuple(x) for x in stage["inputs"]],
                                    [tuple(x) for x in stage["outputs"]]))
    return stages
