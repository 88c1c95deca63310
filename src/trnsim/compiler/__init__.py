"""The compiler: PyTorch model -> torch.export -> graph IR -> passes -> Programs -> ExecutionPlan.

    plan = compile(model, example_inputs, CompileOptions())  # the one entry point
    plan = compile_graph(graph, CompileOptions())   # the same from a captured graph (training)
    graph = capture(model, example_inputs)          # trnsim.compiler.capture
    kernels = run_pipeline(graph, CompileOptions())  # trnsim.compiler.passes.PIPELINE
    report = analyze(model, example_inputs)          # torch_neuronx.analyze's dict

Importing this package does not import torch; `capture` and `analyze` import it when called.
The IR is in `ir` (nodes, graphs) with its operators in `ops` (primitives) and `fused` (the
kernel-level vocabulary: the contract with trnsim.kernels); `interpret` is the reference
semantics of both. Lowering kernel-level graphs to Programs lives in ``compiler/lowering*``.
"""

from trnsim.compiler import aten_conv_backward as _aten_conv_backward  # noqa: F401 (registers)
from trnsim.compiler import aten_training as _aten_training  # noqa: F401 (registers)
from trnsim.compiler.analyze import analyze
from trnsim.compiler.aten import supported_ops
from trnsim.compiler.capture import capture
from trnsim.compiler.compile import compile, compile_graph
from trnsim.compiler.errors import (
    CaptureError,
    InputShapeError,
    IRError,
    ModelTooLargeError,
    UnsupportedOp,
    UnsupportedOperatorError,
    ZeroSizeTensorError,
)
from trnsim.compiler.interpret import evaluate
from trnsim.compiler.ir import Constant, Graph, Node
from trnsim.compiler.options import CompileOptions, options_from_env, parse_cc_flags
from trnsim.compiler.passes import PIPELINE, run_pipeline
from trnsim.compiler.signature import check_inputs
from trnsim.compiler.structure import Structure

__all__ = [
    "PIPELINE",
    "CaptureError",
    "CompileOptions",
    "Constant",
    "Graph",
    "IRError",
    "InputShapeError",
    "ModelTooLargeError",
    "Node",
    "Structure",
    "UnsupportedOp",
    "UnsupportedOperatorError",
    "ZeroSizeTensorError",
    "analyze",
    "capture",
    "check_inputs",
    "compile",
    "compile_graph",
    "evaluate",
    "options_from_env",
    "parse_cc_flags",
    "run_pipeline",
    "supported_ops",
]
