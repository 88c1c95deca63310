"""Running a neuron-cc NeuronCore Pipeline (Inferentia): one program per stage, one core each.

A request runs through the stages in order; each stage reads the values it needs from device
memory, where the earlier stage wrote them (so the hand-over costs what that DMA traffic costs;
inf1's core-to-core path is undocumented). Latency is the sum of the stages run one after
another on an otherwise idle chip. Throughput is what streaming gives: every stage works on a
different request at once, the stages of a chip share its DRAM bandwidth (simulated together),
and a copy completes a request every slowest-stage time.

A stage whose weights fit in its core's on-chip memory next to its kernels' working tiles
(and the intermediates kept there) keeps them there (neuron-cc "caches the model parameters in
each core's on-chip memory"): they are marked `TensorDecl.on_chip` like kept intermediates, so
reading them draws no DRAM bandwidth and a load in their own layout moves nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from trnsim.isa import Program


@dataclass
class PipelineStage:
    program_source: Program | Callable[[], Program]
    inputs: list[tuple[str, str]]  # (model value name, the stage program's HBM tensor)
    outputs: list[tuple[str, str]]

    @property
    def program(self) -> Program:
        if not isinstance(self.program_source, Program):
            self.program_source = self.program_source()
        return self.program_source


def cache_weights(program: Program, core) -> Program:
    """Keep the program's constants on chip if they all fit in the SBUF its kernels and kept
    intermediates leave free (program.sbuf_peak_bytes_per_partition), spread like them."""
    from trnsim.compiler.lowering.onchip import footprint

    names = [name for name, t in program.tensors.items() if t.kind == "constant"]
    need = sum(footprint(program.tensors[n].nbytes, core.partitions) for n in names)
    if names and need <= core.sbuf_usable_bytes_per_partition - program.sbuf_peak_bytes_per_partition:
        for name in names:
            program.tensors[name] = dataclasses.replace(program.tensors[name], on_chip=True)
        program.sbuf_peak_bytes_per_partition += need
    return program


def weights_on_chip(program: Program) -> bool:
    return any(t.on_chip for t in program.tensors.values() if t.kind == "constant")


def run_stages(stages: list[PipelineStage], arrays: dict, chip) -> dict:
    """Functional run: the model's input values in, every value the stages hand over out."""
    from trnsim.sim import simulate

    values = dict(arrays)
    for stage in stages:
        given = {hbm: values[value] for value, hbm in stage.inputs}
        result = simulate(stage.program, given, mode="functional", chip=chip)
        values.update({value: result.outputs[hbm] for value, hbm in stage.outputs})
    return values


def stage_timings(stages: list[PipelineStage], chip) -> list:
    """Each stage's profile run alone (a request passing through)."""
    from trnsim.sim import simulate

    return [simulate(s.program, None, mode="timing", chip=chip).profile for s in stages]


def streaming_timings(stages: list[PipelineStage], chip) -> list:
    """Each stage's profile with the other stages of its chip running at the same time."""
    from trnsim.sim import simulate_cores

    per_chip = chip.logical_cores()
    profiles = []
    for first in range(0, len(stages), per_chip):
        group = [s.program for s in stages[first:first + per_chip]]
        profiles += [r.profile for r in simulate_cores(group, None, mode="timing", chip=chip)]
    return profiles
