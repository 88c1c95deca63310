"""How fast the simulator simulates: prints one JSON object with four figures (and their parts).

1. timing-only throughput (instructions simulated per second, `simulate(mode="timing")` end to
   end: verification, scheduling, profile) on a 4096x8192x8192 bf16 tiled GEMM (~67K
   instructions) as a compiler would emit it. Also the worst case, the same program with the
   planner's reuse of equal instructions switched off, so every instruction pays `check` and
   `cost` (the isa's Python) and its own planning. Target: >= 200,000 instructions/s.
2. functional overhead per instruction: a program of small instructions (Vector, Scalar, GpSimd,
   DMA on [128, 8] tiles) run functionally, minus the same instructions' numpy semantics run on
   a trivial state (preallocated arrays, no byte addressing, no timing). Target: <= 20 us.
3. memory: peak RSS of a functional 1024x2048x2048 GEMM run in a fresh process, against the
   simulated SBUF + PSUM + touched HBM. Target: within 2x.
4. real programs (issue 27): BERT-large (batch 1, seq 128, inf2.xlarge) and one Llama-2-7B
   decoder layer (with its embedding and LM head; seq --llama-seq, trn1.2xlarge), built from
   their configs with empty weights and captured once; then, separately, instructions per second
   of lowering (`real_lowering`: `trnsim.compiler.lowering.lower`) and of timing simulation
   (`real_simulation`): a freshly lowered program's first run (it is checked and planned) and a
   repeat run of the same program (plans reused, as a model's loaded-throughput run reuses its
   latency run's; the first program of each model is also reported alone, `_cold`: later fresh
   programs reuse its instructions' check and cost), with the compiled scheduler loop
   (`trnsim.sim.compiled`, loaded once at the start: `compiled_loop`), and the repeat run with
   the Python loop for comparison. Medians of --repeats runs, in CPU seconds of this process
   (the machine is shared; wall seconds are reported too). Targets: simulation >= 1,000,000
   and lowering >= 500,000 instructions/s.
5. a training step (issue 27): `trnsim train`'s GPT-2 with --train-layers decoder layers (seq
   128, AdamW, trn1.2xlarge, shapes only: timing needs no values) run for two steps on the lazy
   device (`trnsim.perf.training.run_training`) with an empty compile cache; each distinct graph
   the executor compiled (the first step's, which creates the optimizer's state, and the steady
   step's) is then translated, passed through the compiler's pipeline, lowered and simulated
   again here, the figures as in 4 (lowering, first and repeat simulation), plus the whole
   two-step run's seconds.

All figures are taken with the compiled loop loaded when numba is installed (``.[fast]``).

    PYTHONPATH=src python benchmarks/sim_speed.py [--only real|training] [--repeats 3]
        [--llama-seq 512] [--train-layers 2]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# tests/sim/synthetic.py and tests/kernels/harness.py (helpers shared with the tests) live in the
# repository, not the installed package: make it importable however this script is started
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import json
import os
import statistics
import subprocess
import time

import numpy as np
from tests.sim.synthetic import tiled_matmul

from trnsim.isa import Activation, DmaCopy, TensorCopy, TensorScalar, TensorTensor
from trnsim.numerics import cast, to_compute
from trnsim.sim import compiled, simulate
from trnsim.sim.plan import Planner, planned


def _best_rate(program, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        simulate(program, mode="timing")
        times.append(time.perf_counter() - start)
    return len(program.instructions) / min(times)


def timing_throughput() -> dict:
    program = tiled_matmul(4096, 8192, 8192)
    rate = _best_rate(program)
    reuse = Planner.key
    Planner.key = lambda self, ins: object()  # every instruction a new key: nothing reused
    try:
        no_reuse = _best_rate(program, repeats=1)
    finally:
        Planner.key = reuse
    return {"program": program.name, "instructions": len(program.instructions),
            "instructions_per_s": round(rate), "no_plan_reuse_instructions_per_s": round(no_reuse)}


def _small_program(count: int):
    from trnsim.isa import ProgramBuilder

    b = ProgramBuilder("small_ops", "v2")
    x = b.input("x", (128, 8), "float32")
    out = b.output("out", (128, 8), "float32")
    tiles = [b.tile((128, 8), "float32") for _ in range(4)]
    low = b.tile((128, 8), "bfloat16")
    b.emit(DmaCopy(dst=tiles[0], src=x.block()))
    body = [TensorTensor(dst=tiles[1], in0=tiles[0], in1=tiles[0], op="add"),
            Activation(dst=tiles[2], src=tiles[1], func="exp"),
            TensorScalar(dst=tiles[3], src=tiles[2], op0="multiply", operand0=0.5, engine="gpsimd"),
            TensorCopy(dst=low, src=tiles[3]),
            TensorCopy(dst=tiles[0], src=low, engine="scalar"),
            DmaCopy(dst=out.block(), src=tiles[0])]
    while len(b.program.instructions) < count:
        b.emit(*body)
    return b.build()


class _ArrayState:
    """The numpy work alone: every access pattern owns a preallocated array."""

    def __init__(self, core, program):
        self.core = core
        self.arrays = {}
        self.scratch = {}
        for ins in program.instructions:
            for ap in (*ins.reads(), *ins.writes()):
                self.arrays.setdefault(ap, np.ones(ap.shape, ap.dtype.np_dtype))

    def read(self, ap):
        return self.arrays[ap]

    def read_compute(self, ap):
        return to_compute(self.arrays[ap], ap.dtype)

    def write(self, ap, values):
        values = np.asarray(values)
        if values.dtype != ap.dtype.np_dtype:
            values = cast(values, ap.dtype)
        self.arrays[ap][...] = values

    def accumulate(self, ap, values):
        self.arrays[ap] += values

    def engine_state(self, engine):
        return self.scratch.setdefault(engine, {})

    def random_uniform(self, shape):
        return np.zeros(shape, np.float32)


def functional_overhead(count: int = 30000) -> dict:
    program = _small_program(count)
    inputs = {"x": np.ones((128, 8), np.float32)}
    n = len(program.instructions)
    functional, timing, semantics = [], [], []
    for _ in range(3):
        start = time.perf_counter()
        simulate(program, inputs)
        functional.append((time.perf_counter() - start) / n)
        start = time.perf_counter()
        simulate(program, mode="timing")
        timing.append((time.perf_counter() - start) / n)
        state = _ArrayState(program.target, program)
        start = time.perf_counter()
        for ins in program.instructions:
            ins.execute(state)
        semantics.append((time.perf_counter() - start) / n)
    f, t, s = min(functional), min(timing), min(semantics)
    return {"instructions": n, "tile": [128, 8],
            "functional_us_per_instruction": round(f * 1e6, 2),
            "timing_only_us_per_instruction": round(t * 1e6, 2),
            "semantics_alone_us_per_instruction": round(s * 1e6, 2),
            "overhead_us_per_instruction": round((f - s) * 1e6, 2)}


_MEMORY_CHILD = """
import json
import sys
sys.path.insert(0, %r)
import numpy as np
from trnsim.sim import compiled, simulate
from trnsim.sim.plan import Planner
from tests.sim.synthetic import tiled_matmul

def rss(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024

m, k, n = 1024, 2048, 2048
program = tiled_matmul(m, k, n)
rng = np.random.default_rng(0)
inputs = {name: rng.standard_normal(program.tensors[name].shape, np.float32).astype(
              program.tensors[name].dtype.np_dtype) for name in ("at", "b")}
before = rss("VmRSS")
result = simulate(program, inputs)
core = program.target
hbm = sum(t.nbytes for t in program.tensors.values())
onchip = core.sbuf_bytes + core.psum_bytes
print(json.dumps({"rss_before_run": before, "peak_rss": rss("VmHWM"), "simulated_bytes": hbm + onchip,
                  "simulated_hbm_bytes": hbm, "simulated_onchip_bytes": onchip,
                  "instructions": len(program.instructions)}))
"""


def memory() -> dict:
    child = _MEMORY_CHILD % str(Path(__file__).resolve().parents[1])
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True)
    figures = json.loads(out.stdout)
    simulated = figures["simulated_bytes"]
    figures["peak_rss_over_simulated"] = round(figures["peak_rss"] / simulated, 3)
    figures["run_growth_over_simulated"] = round((figures["peak_rss"] - figures["rss_before_run"])
                                                 / simulated, 3)
    return figures


def _real_model(name: str, llama_seq: int):
    """(model, inputs, instance) of a real-program case, with empty weights (timing needs none)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from trnsim.compiler.empty_weights import empty_weights
    from trnsim.perf.zoo import ZOO

    if name == "bert-large":
        entry = ZOO["bert-large-uncased"]
        with empty_weights():
            return entry.build(), entry.inputs(1, 128), "inf2.xlarge"
    from trnsim.perf.zoo import causal_lm_builder, config_path, read_config

    entry = ZOO["llama-2-7b"]
    # the zoo's shipped Llama-2-7B config.json, with one decoder layer
    config = {**read_config(config_path("llama-2-7b")), "num_hidden_layers": 1}
    with empty_weights():
        model = causal_lm_builder(config)()
    return model, entry.inputs(1, llama_seq), "trn1.2xlarge"


def _clocks(call):
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def _real_kernels(name: str, llama_seq: int):
    """(kernel graph after the compiler's passes, chip) of a real-program case, captured once."""
    from trnsim import hardware
    from trnsim.compiler import capture, run_pipeline
    from trnsim.compiler.options import CompileOptions

    key = (name, llama_seq)
    if key not in _KERNELS:
        model, inputs, instance = _real_model(name, llama_seq)
        kernels = run_pipeline(capture(model, (), inputs), CompileOptions(instance=instance),
                               verify=False)
        _KERNELS[key] = (kernels, hardware.instance(instance).chip, instance)
    return _KERNELS[key]


_KERNELS: dict = {}


def _rate(n: int, samples: list[tuple[float, float]]) -> dict:
    cpu = statistics.median(s[0] for s in samples)
    wall = statistics.median(s[1] for s in samples)
    return {"instructions_per_cpu_s": round(n / cpu), "instructions_per_wall_s": round(n / wall),
            "median_cpu_s": round(cpu, 4), "median_wall_s": round(wall, 4)}


def _case(name: str, llama_seq: int, instance: str) -> dict:
    return {"instance": instance,
            **({"seq": llama_seq, "layers": 1} if name != "bert-large" else {"batch": 1, "seq": 128})}


def real_lowering(name: str, repeats: int = 3, llama_seq: int = 512) -> dict:
    """Lowering speed (`trnsim.compiler.lowering.lower`) on one real model's kernel graph."""
    from trnsim.compiler.lowering import lower

    kernels, chip, instance = _real_kernels(name, llama_seq)
    samples = []
    for _ in range(repeats):
        lowered, wall, cpu = _clocks(lambda: lower(kernels, chip.core))
        samples.append((cpu, wall))
    n = len(lowered.program.instructions)
    return {**_case(name, llama_seq, instance), "instructions": n, "lowering": _rate(n, samples)}


def real_simulation(name: str, repeats: int = 3, llama_seq: int = 512) -> dict:
    """Timing-simulation speed (`simulate(mode="timing")`, what `sim.run_plan` runs for each
    core) on one real model's program: a freshly lowered program's first run (checked and
    planned: the cost of distinct work) and a repeat run of the same program (plans reused, as a
    model's loaded-throughput run reuses its latency run's), with the compiled loop loaded
    (`trnsim.sim.compiled`; its one-off load is `compiled_loop_load_cpu_s`), and the repeat run
    with the Python loop for comparison. Lowering is not timed here (`real_lowering`)."""
    from trnsim.compiler.lowering import lower

    kernels, chip, instance = _real_kernels(name, llama_seq)
    first, repeat, python = [], [], []
    for _ in range(repeats):
        program = lower(kernels, chip.core).program
        result, wall, cpu = _clocks(lambda program=program: simulate(program, mode="timing", chip=chip))
        first.append((cpu, wall))
        again, wall, cpu = _clocks(lambda program=program: simulate(program, mode="timing", chip=chip))
        repeat.append((cpu, wall))
        with _loop("python"):
            slow, wall, cpu = _clocks(lambda program=program: simulate(program, mode="timing", chip=chip))
        python.append((cpu, wall))
        if not (result.total_ns == again.total_ns == slow.total_ns):
            raise SystemExit(f"{name}: the runs disagree on the latency")
    n = len(program.instructions)
    planner, _ = planned(program, chip.core)
    patterns = {planner.pattern(planner.key(ins)) for ins in program.instructions}
    return {**_case(name, llama_seq, instance), "instructions": n,
            # plans are made per distinct instruction, their costs per pattern (`Planner.pattern`)
            "distinct_instructions": len(planner.distinct), "patterns": len(patterns),
            "predicted_latency_ns": result.profile.total_ns,
            # the first program of this model in the process: nothing of it planned before
            # (later fresh programs reuse its instructions' check and cost: `InstructionFacts`)
            "simulation_first_run_cold": _rate(n, first[:1]),
            "simulation_first_run": _rate(n, first), "simulation_repeat_run": _rate(n, repeat),
            "simulation_repeat_run_python_loop": _rate(n, python)}


class _loop:
    """TRNSIM_SIM_LOOP set for a block."""

    def __init__(self, value: str) -> None:
        self.value = value

    def __enter__(self):
        self.saved = os.environ.get(compiled.LOOP_ENV)
        os.environ[compiled.LOOP_ENV] = self.value

    def __exit__(self, *exc):
        if self.saved is None:
            os.environ.pop(compiled.LOOP_ENV, None)
        else:
            os.environ[compiled.LOOP_ENV] = self.saved


def compiled_loop_load() -> dict:
    """CPU seconds to import numba and load (or, the first time, compile) the compiled loop:
    its first run, on a small GEMM."""
    program = tiled_matmul(128, 256, 1024)

    def first_run():
        with _loop("compiled"):
            simulate(program, mode="timing")

    _, wall, cpu = _clocks(first_run)
    return {"available": compiled.kernel() is not None, "load_cpu_s": round(cpu, 3),
            "load_wall_s": round(wall, 3)}


def _step_graph(graph, instance, repeats: int) -> dict:
    """One compiled training graph: translation and passes, then lowering and timing simulation
    (first and repeat run) --repeats times."""
    from trnsim.compiler import run_pipeline
    from trnsim.compiler.lowering import lower
    from trnsim.compiler.options import options_from_env
    from trnsim.runtime.xla.translate import to_ir

    options = options_from_env(instance=instance, cores=1, lnc=1)
    kernels, _, passes_cpu = _clocks(lambda: run_pipeline(to_ir(graph), options, verify=False))
    chip = instance.chip
    lowering, first, repeat = [], [], []
    for _ in range(repeats):
        lowered, wall, cpu = _clocks(lambda: lower(kernels, chip.core))
        lowering.append((cpu, wall))
        program = lowered.program
        _, wall, cpu = _clocks(lambda program=program: simulate(program, mode="timing", chip=chip))
        first.append((cpu, wall))
        again, wall, cpu = _clocks(lambda program=program: simulate(program, mode="timing",
                                                                    chip=chip))
        repeat.append((cpu, wall))
    n = len(program.instructions)
    return {"why": graph.why, "lazy_nodes": len(graph.nodes), "instructions": n,
            "predicted_ns": again.profile.total_ns,
            "translate_and_passes_cpu_s": round(passes_cpu, 3), "lowering": _rate(n, lowering),
            "simulation_first_run": _rate(n, first), "simulation_repeat_run": _rate(n, repeat)}


def training_step(layers: int = 2, repeats: int = 3) -> dict:
    """Issue 27's training step: `trnsim train --model gpt2 --layers N --shapes-only --steps 2`
    in-process with an empty compile cache, recording the graphs its executor compiles; then
    each distinct graph's pipeline, lowering and timing simulation measured as `real_*` do."""
    import tempfile

    from trnsim.perf.training import run_training
    from trnsim.runtime.xla import executor

    graphs: dict = {}
    compile_graph = executor.simulate_graph

    def recording(graph, instance):
        graphs.setdefault(graph.key, (graph, instance))
        return compile_graph(graph, instance)

    saved = os.environ.get("TRNSIM_CACHE_DIR")
    executor.simulate_graph = recording
    try:
        with tempfile.TemporaryDirectory() as cache:
            os.environ["TRNSIM_CACHE_DIR"] = cache
            report, wall, cpu = _clocks(lambda: run_training(
                "gpt2", layers=layers, steps=2, shapes_only=True))
    finally:
        executor.simulate_graph = compile_graph
        if saved is None:
            os.environ.pop("TRNSIM_CACHE_DIR", None)
        else:
            os.environ["TRNSIM_CACHE_DIR"] = saved
    out = {"model": "gpt2", "layers": layers, "seq": 128, "optimizer": "adamw",
           "instance": "trn1.2xlarge", "steps": 2, "run_training_cpu_s": round(cpu, 3),
           "run_training_wall_s": round(wall, 3), "step_ms": round(report.step_ms, 3),
           "graphs": {}}
    for key, (graph, instance) in graphs.items():
        out["graphs"][key] = _step_graph(graph, instance, repeats)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("synthetic", "real", "training"), default=None)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--llama-seq", type=int, default=512)
    parser.add_argument("--train-layers", type=int, default=2)
    args = parser.parse_args()
    out: dict = {"compiled_loop": compiled_loop_load()}
    if args.only in (None, "synthetic"):
        timing = timing_throughput()
        functional = functional_overhead()
        mem = memory()
        out.update({
            "timing_only_instructions_per_s": timing["instructions_per_s"],
            "functional_overhead_us_per_instruction": functional["overhead_us_per_instruction"],
            "peak_rss_over_simulated_memory": mem["run_growth_over_simulated"],
            "details": {"timing": timing, "functional": functional, "memory": mem,
                        "method": "times are the best of 3 runs"}})
    if args.only in (None, "real"):
        names = ("bert-large", "llama-2-7b-layer")
        simulation = {name: real_simulation(name, args.repeats, args.llama_seq) for name in names}
        lowering = {name: real_lowering(name, args.repeats, args.llama_seq) for name in names}
        out["real_programs"] = {"simulation": simulation, "lowering": lowering}
        out["real_simulation_instructions_per_cpu_s"] = min(
            r["simulation_first_run"]["instructions_per_cpu_s"] for r in simulation.values())
        out["real_simulation_cold_instructions_per_cpu_s"] = min(
            r["simulation_first_run_cold"]["instructions_per_cpu_s"] for r in simulation.values())
        out["real_simulation_repeat_instructions_per_cpu_s"] = min(
            r["simulation_repeat_run"]["instructions_per_cpu_s"] for r in simulation.values())
        out["real_lowering_instructions_per_cpu_s"] = min(
            r["lowering"]["instructions_per_cpu_s"] for r in lowering.values())
    if args.only in (None, "training"):
        step = training_step(args.train_layers, args.repeats)
        out["training_step"] = step
        graphs = step["graphs"].values()
        out["training_lowering_instructions_per_cpu_s"] = min(
            g["lowering"]["instructions_per_cpu_s"] for g in graphs)
        out["training_simulation_instructions_per_cpu_s"] = min(
            g["simulation_first_run"]["instructions_per_cpu_s"] for g in graphs)
    out["load_average"] = os.getloadavg()
    out["targets"] = {"timing_only_instructions_per_s": ">= 200000",
                      "functional_overhead_us_per_instruction": "<= 20",
                      "peak_rss_over_simulated_memory": "<= 2 (RSS growth during the run)",
                      "real_simulation_instructions_per_cpu_s": ">= 1000000 (issue 27)",
                      "real_simulation_repeat_instructions_per_cpu_s": ">= 1000000 (issue 27)",
                      "real_lowering_instructions_per_cpu_s": ">= 500000 (issue 27)",
                      "training_simulation_instructions_per_cpu_s": ">= 1000000 (issue 27)",
                      "training_lowering_instructions_per_cpu_s": ">= 500000 (issue 27)"}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
