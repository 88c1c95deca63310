"""CompiledModel.save / trnsim.load, on top of `trnsim.runtime.artifact`."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from trnsim.runtime.artifact import ArtifactError, rank_key, read, read_program, write
from trnsim.runtime.model import CompiledModel, InputSpec, OutputSpec


def save_model(model: CompiledModel, path) -> Path:
    """One artifact; a pipelined model's stages 1.. are artifacts in ``stage<i>/`` beside it; an
    LNC=2 model's second physical core's program is ``program.core1.json`` in it."""
    from trnsim.isa.serialize import program_to_data

    stages = []
    for index, stage in enumerate(model.stages):
        program = stage.program
        stages.append({"inputs": stage.inputs, "outputs": stage.outputs})
        if index:
            write(Path(path) / f"stage{index}", {"name": f"{model.name} stage {index}"},
                  program_to_data(program), _constants(program))
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
    return write(path, manifest, program_to_data(model.program), constants, more_programs=more)


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
    """Load a model saved with CompiledModel.save (no model code needed)."""
    from trnsim.compiler.lowering import KernelCall
    from trnsim.compiler.structure import Structure
    from trnsim.isa.serialize import program_from_data

    manifest, program_data, constants, _ = read(path)
    try:
        program = program_from_data(program_data, constants)
        inputs = [InputSpec(**{**s, "shape": tuple(s["shape"])}) for s in manifest["inputs"]]
        outputs = [OutputSpec(**{**s, "shape": tuple(s["shape"])}) for s in manifest["outputs"]]
        structures = [Structure.from_json(manifest[k]) if manifest.get(k) else None
                      for k in ("input_structure", "output_structure")]
        kernels = [KernelCall(**k) for k in manifest.get("kernels", [])]
        stages = _load_stages(path, program, manifest.get("stages", []))
        shared = manifest.get("lnc_shared")
        ranks = int(manifest.get("tensor_parallel", 1))
        for name in manifest.get("sharded", []):
            chunks = [constants[name]] + [constants[rank_key(name, r)] for r in range(1, ranks)]
            program.tensors[name].data = _RankArrays(chunks)
        partner = None
        if shared is not None:
            partner = program_from_data(read_program(path, "core1"), constants)
            for name in manifest.get("sharded", []):
                partner.tensors[name].data = program.tensors[name].data  # every rank's chunks
    except (KeyError, TypeError, ValueError) as error:
        raise ArtifactError(f"{path}: manifest or program is malformed ({error})") from None
    return CompiledModel(name=manifest["name"], program_source=program, inputs=inputs, outputs=outputs,
                         instance=manifest["instance"], options=manifest["options"],
                         input_structure=structures[0], output_structure=structures[1],
                         kernels=kernels, placement=manifest.get("placement", []),
                         tensor_parallel=ranks, stages=stages, partner_source=partner,
                         shared=tuple(shared or ()))


def _load_stages(path, first, described: list[dict]) -> list:
    from trnsim.isa.serialize import program_from_data
    from trnsim.runtime.pipeline import PipelineStage

    stages = []
    for index, stage in enumerate(described):
        if index:
            _, data, constants, _ = read(Path(path) / f"stage{index}")
            program = program_from_data(data, constants)
        else:
            program = first
        stages.append(PipelineStage(program, [tuple(x) for x in stage["inputs"]],
                                    [tuple(x) for x in stage["outputs"]]))
    return stages
