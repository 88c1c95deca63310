"""Weight-only int8 quantization: linear weights stored as int8 in HBM, dequantized on chip.

NxD Inference (``quantized=True, quantization_dtype="int8"``) and transformers-neuronx
(``QuantizationConfig(quant_dtype="s8", dequant_dtype="bf16")``) store every linear layer's
weight as int8 with a symmetric scale, and dequantize it to the inference dtype after it is
loaded: "int8 weight storage can be used to reduce memory bandwidth usage to improve model
performance" (transformers-neuronx developer guide, int8 weight storage support). Activations,
the KV cache and the embedding table keep their dtype, and so does a language model's head (the
vocabulary projection): transformers-neuronx quantizes the decoder layers' attention and MLP
weights and adds the LM head unquantized (``add_lm_head``, no ``allow_quantize``). trnsim
recognises a head by its shape, not its name: a weight whose output axis is as long as the
vocabulary of an embedding table the graph gathers from, and whose other axis is that table's
width (`vocabulary_projections`).

Here each ``k.matmul`` whose B operand is a floating-point weight (a 2-D constant) gets:

- B as int8: ``q = clip(round(w / s), -127, 127)``, with ``s = max|w| / 127`` per output
  column (``per_channel_symmetric`` in NxD Inference, transformers-neuronx's default
  ``vector_dynamic``), so every weight byte DMAed is one byte, not two;
- the scale as a new fp32 [n] operand, applied first in the fused epilogue at PSUM eviction:
  ``(x @ q) * s == x @ (q * s)`` column by column, so no bf16 copy of the weight is ever written;
  a bias (added to the accumulator before the epilogue in the kernel) moves into the epilogue
  after the scale.

The matmul kernel loads an int8 operand as int8 and converts it to the compute dtype in SBUF
(int8 values are exact in bf16), the dequantization the Neuron compiler emits.
"""

from __future__ import annotations

import numpy as np

from trnsim.compiler.fused import Step
from trnsim.compiler.ir import Constant, Graph, Node, Rewriter
from trnsim.numerics import dtype as as_dtype

INT8_MAX = 127  # symmetric: -127..127 (NxD Inference's int8 range for symmetric scales)


def quantize_weights(graph: Graph, quantize: str | None) -> Graph:
    """`graph` with its linear layers' weights stored as `quantize` ("int8", checked by
    `CompileOptions`; None: unchanged), as the module docstring says."""
    if quantize is None:
        return graph
    rw = Rewriter(graph)
    heads = vocabulary_projections(graph)
    for node in graph.nodes:
        b = node.inputs[1] if node.op == "k.matmul" else None
        if b is None or b.op != "constant" or b.rank != 2 or not b.dtype.is_float \
                or node.attrs["transpose_a"] or node.attrs["batch"] or id(node) in heads:
            rw.keep(node)
            continue
        rw.replace(node, _quantized(rw, graph, node))
    return rw.finish()


def vocabulary_projections(graph: Graph) -> set[int]:
    """Ids of the matmuls that project onto a vocabulary (language-model heads, tied or not): a
    2-D weight [vocab, width] (or its transpose, by ``transpose_b``) whose output axis has the
    rows of an embedding table [vocab, width] the graph gathers from, its other axis the
    table's width."""
    tables = {tuple(n.inputs[0].shape) for n in graph.nodes
              if n.op == "k.gather" and n.attrs.get("kind") == "embedding"
              and n.inputs and n.inputs[0].rank == 2}
    heads = set()
    for node in graph.nodes:
        if node.op != "k.matmul" or len(node.inputs) < 2 or node.inputs[1].rank != 2:
            continue
        rows, cols = node.inputs[1].shape
        out, width = (rows, cols) if node.attrs.get("transpose_b") else (cols, rows)
        if (out, width) in tables:
            heads.add(id(node))
    return heads


def _quantized(rw: Rewriter, graph: Graph, node: Node) -> Node:
    attrs = dict(node.attrs)
    weight = graph.constant(node.inputs[1])
    q, scale = int8_weight(weight, out_axis=0 if attrs["transpose_b"] else 1)
    source = node.inputs[1].source
    q_node = rw.new.add_data(q, name=f"{node.inputs[1].name}_int8", source=source)
    s_node = rw.new.add_data(scale, name=f"{node.inputs[1].name}_scale", source=source)
    ins = rw.operands(node)
    a, extras = ins[0], ins[3:] if attrs["bias"] else ins[2:]
    old = tuple(attrs["epilogue"] or ())
    product = old[0].dtype if old else node.dtype.name

    def moved(arg):  # operand indices once the bias leaves position 2
        if isinstance(arg, str) and arg.startswith("in") and attrs["bias"]:
            return f"in{int(arg[2:]) - 1}"
        return arg

    operands = [a, q_node, *extras]
    steps = [Step("mul", ("acc", f"in{len(operands)}"), (), product)]
    operands.append(s_node)
    if attrs["bias"]:
        steps.append(Step("add", ("s0", f"in{len(operands)}"), (), product))
        operands.append(ins[2])
    shift = len(steps)

    def renamed(arg):
        if arg == "acc":
            return f"s{shift - 1}"
        if isinstance(arg, str) and arg.startswith("s") and arg[1:].isdigit():
            return f"s{int(arg[1:]) + shift}"
        return moved(arg)

    steps += [Step(s.op, tuple(renamed(x) for x in s.args), s.attrs, s.dtype) for s in old]
    attrs.update(bias=False, epilogue=tuple(steps))
    return rw.emit("k.matmul", operands, attrs, source=node.source, name=node.name)


def int8_weight(weight: Constant, out_axis: int) -> tuple[Constant, Constant]:
    """(int8 weight, fp32 scale per index of `out_axis`) of a 2-D weight, symmetric per channel.

    A weight without values (on the meta device: a zero-stride view) stays one: its int8 image
    and unit scales are zero-stride too, so timing a large model allocates nothing."""
    data = weight.data
    n = data.shape[out_axis]
    if data.size and not any(data.strides):  # meta weights: shapes only
        q = np.broadcast_to(np.zeros((), np.int8), data.shape)
        return (Constant(q, as_dtype("int8"), f"{weight.origin}:int8"),
                Constant(np.broadcast_to(np.ones((), np.float32), (n,)), as_dtype("float32"),
                         f"{weight.origin}:scale"))
    w = np.asarray(weight.value(), dtype=np.float32)
    amax = np.abs(w).max(axis=1 - out_axis) if w.size else np.zeros(n, np.float32)
    scale = np.where(amax > 0, amax / INT8_MAX, 1.0).astype(np.float32)
    shaped = scale[:, None] if out_axis == 0 else scale[None, :]
    q = np.clip(np.rint(w / shaped), -INT8_MAX, INT8_MAX).astype(np.int8)
    return (Constant(q, as_dtype("int8"), f"{weight.origin}:int8"),
            Constant(scale, as_dtype("float32"), f"{weight.origin}:scale"))
