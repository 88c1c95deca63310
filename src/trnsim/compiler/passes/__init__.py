"""The compiler's passes, in order, each with the one-line reason it exists.

Every pass is ``Graph -> Graph`` and never mutates its input. `run_pipeline` runs them in this
order and prints the IR after the passes named in ``dump_after`` (``trnsim ... --dump-after
fuse_attention``). It verifies the graph it returns (`Graph.verify`, a pure check that re-derives
every node's type); ``TRNSIM_PASSES=check`` (the tests' setting) or ``verify=True`` verifies the
graph before the first pass and after each, naming the pass that broke it (``result``, the
default, verifies the result only; another value is an error); ``verify=False`` verifies
nothing. Verifying after each pass costs about a third of the pipeline on a large model.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from trnsim.compiler.fused import check_kernel_level
from trnsim.compiler.ir import Graph
from trnsim.compiler.options import CompileOptions
from trnsim.compiler.passes.autocast import auto_cast
from trnsim.compiler.passes.canonicalize import canonicalize
from trnsim.compiler.passes.expand_attention import expand_attention
from trnsim.compiler.passes.fold import fold
from trnsim.compiler.passes.fuse_attention import fuse_attention
from trnsim.compiler.passes.fuse_elementwise import fuse_elementwise
from trnsim.compiler.passes.fuse_matmul import fuse_matmul
from trnsim.compiler.passes.fuse_norms import fuse_norms
from trnsim.compiler.passes.layout import choose_layout
from trnsim.compiler.passes.memory import plan_memory, tensor_parallel_degree
from trnsim.compiler.passes.quantize import quantize_weights
from trnsim.compiler.passes.schedule import schedule
from trnsim.compiler.passes.tensor_parallel import tensor_parallel
from trnsim.errors import InvalidArgumentError, UnknownNameError


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[Graph, CompileOptions], Graph]
    reason: str


PIPELINE: tuple[Pass, ...] = (
    Pass("fold", lambda g, o: fold(g),
         "masks, position ids and causal triangles are constants once shapes are fixed"),
    Pass("canonicalize", lambda g, o: canonicalize(g),
         "one view per tensor and one node per activation, so patterns match one spelling"),
    Pass("expand_attention", lambda g, o: g if o.fuses_attention else expand_attention(g),
         "--model-type generic: attention as PyTorch's separate operators, scores in between"),
    Pass("auto_cast", lambda g, o: auto_cast(g, o.auto_cast, o.auto_cast_type),
         "neuronx-cc's --auto-cast: bf16/fp16/tf32/fp8 TensorE operands, fp32 accumulation"),
    Pass("fuse_attention", lambda g, o: fuse_attention(g) if o.fuses_attention else g,
         "QK^T, scale, mask, softmax and PV in one kernel keep scores out of HBM "
         "(--model-type transformer; generic leaves them separate kernels)"),
    Pass("fuse_matmul", lambda g, o: fuse_matmul(g),
         "bias, activation and residual run during PSUM eviction, not as separate kernels"),
    Pass("fuse_norms", lambda g, o: fuse_norms(g),
         "a LayerNorm/RMSNorm/softmax reads its rows once and computes statistics in fp32"),
    Pass("fuse_elementwise", lambda g, o: fuse_elementwise(g),
         "chains of elementwise ops read and write HBM once; every op is now a kernel"),
    Pass("quantize_weights", lambda g, o: quantize_weights(g, o.quantize),
         "weight-only int8 (when asked): half the weight bytes in HBM and over DMA"),
    Pass("tensor_parallel", lambda g, o: tensor_parallel(g, tensor_parallel_degree(g, o)),
         "split large weights over several cores when one core's HBM cannot hold the model"),
    Pass("layout", lambda g, o: choose_layout(g, o.spec.chip.core),
         "pick TensorE's stationary operand and read views through DMA access patterns"),
    Pass("plan_memory", lambda g, o: plan_memory(g, o.spec, 1, o.lnc),
         "weights resident, activations share HBM by lifetime; refuse models that cannot fit"),
    Pass("schedule", lambda g, o: schedule(g),
         "load the next kernel's weights while the current one computes"),
)

PASS_NAMES = tuple(p.name for p in PIPELINE)
CHECK_ENV = "TRNSIM_PASSES"  # "check": verify the graph after every pass (module doc)
CHECK_MODES = ("result", "check")  # its values: the result only (the default), every pass


def verify_each_pass() -> bool:
    """Whether `TRNSIM_PASSES` asks for the graph verified after every pass (module doc)."""
    value = os.environ.get(CHECK_ENV, "result").strip().lower() or "result"
    if value not in CHECK_MODES:
        raise InvalidArgumentError(f"{CHECK_ENV}={value!r} is not one of {', '.join(CHECK_MODES)}")
    return value == "check"


def run_pipeline(graph: Graph, options: CompileOptions | None = None, *,
                 dump_after: Sequence[str] = (), dump: Callable[[str], None] = print,
                 verify: bool | None = None, stop_after: str | None = None,
                 start_after: str | None = None) -> Graph:
    """Run `PIPELINE` on `graph`; returns the kernel-level graph (with its memory plan).
    `stop_after` / `start_after` run only the passes up to / after the one named; `verify`:
    after every pass (True), the result only (None, unless ``TRNSIM_PASSES=check``), never."""
    options = options or CompileOptions()
    wanted = set(dump_after) | set(options.dump_after)
    for name in [*wanted, *(n for n in (stop_after, start_after) if n)]:
        if name not in PASS_NAMES:
            raise UnknownNameError("compiler pass", name, PASS_NAMES)
    each = verify if verify is not None else verify_each_pass()
    if each:
        graph.verify()
    times: dict[str, float] = {}
    first = PASS_NAMES.index(start_after) + 1 if start_after else 0
    for p in PIPELINE[first:]:
        start = time.perf_counter()
        graph = p.run(graph, options)
        times[p.name] = time.perf_counter() - start
        if each:
            graph.verify()
        if p.name == "fuse_elementwise":
            check_kernel_level(graph)
        if p.name in wanted:
            dump(f"# after {p.name}: {p.reason}\n{graph.pretty()}")
        if p.name == stop_after:
            break
    if verify is None and not each:
        graph.verify()
    graph.meta["pass_times"] = times
    return graph


def describe() -> str:
    """The pipeline as text: one line per pass with its reason."""
    width = max(len(n) for n in PASS_NAMES)
    return "\n".join(f"{p.name:<{width}}  {p.reason}" for p in PIPELINE)
