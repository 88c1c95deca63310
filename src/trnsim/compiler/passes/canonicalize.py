"""Shape and view canonicalisation, and recognition of composite activations.

View chains (``view -> view``, ``permute -> permute``, ``expand -> expand``, ``slice -> slice``)
collapse into one view, so the layout pass sees each tensor's final access pattern and the
fusion patterns see through at most one view. Activations that models spell out in elementwise
arithmetic (GPT-2's tanh GELU, SiLU as ``x * sigmoid(x)``) become one ``gelu``/``silu`` node:
the Scalar engine evaluates each in one activation instruction. A global average pool becomes
the mean it is, so both capture paths (direct and decomposed) reach the same kernels.
"""

from __future__ import annotations

import math

from trnsim.compiler.ir import Graph, Node, Rewriter
from trnsim.compiler.ops import kind
from trnsim.compiler.passes.match import is_number, is_transpose_last2, operand_pairs


def fold_views(graph: Graph) -> Graph:
    """Collapse chains of the same view op and drop views that change nothing."""
    rw = Rewriter(graph)
    for node in graph.nodes:
        ins = rw.operands(node)
        x = ins[0] if ins else None
        if x is None or node.op not in ("reshape", "permute", "expand", "slice"):
            rw.keep(node)
            continue
        if node.op == "reshape":
            src = x.inputs[0] if x.op == "reshape" else x
            new = src if src.shape == node.shape else rw.emit(
                "reshape", [src], {"shape": node.shape}, source=node.source)
        elif node.op == "permute":
            dims = tuple(node.attrs["dims"])
            src = x
            if x.op == "permute":
                inner = tuple(x.attrs["dims"])
                dims, src = tuple(inner[d] for d in dims), x.inputs[0]
            new = src if dims == tuple(range(len(dims))) else rw.emit(
                "permute", [src], {"dims": dims}, source=node.source)
        elif node.op == "expand":
            src = x.inputs[0] if x.op == "expand" else x
            new = src if src.shape == node.shape else rw.emit(
                "expand", [src], {"shape": node.shape}, source=node.source)
        else:
            new = _fold_slice(rw, node, x)
        rw.replace(node, new)
    return rw.finish()


def _fold_slice(rw: Rewriter, node: Node, x: Node) -> Node:
    a = node.attrs
    if a["start"] == 0 and a["end"] == x.shape[a["axis"]] and a["step"] == 1:
        return x
    if x.op == "slice" and x.attrs["axis"] == a["axis"]:
        b = x.attrs
        start = b["start"] + a["start"] * b["step"]
        step = b["step"] * a["step"]
        length = node.shape[a["axis"]]
        end = start + (length - 1) * step + 1 if length else start
        return rw.emit("slice", [x.inputs[0]], {"axis": a["axis"], "start": start, "end": end,
                                                "step": step}, source=node.source)
    return rw.emit("slice", [x], dict(a), source=node.source)


def global_pools_to_means(graph: Graph) -> Graph:
    """adaptive_avg_pool2d to 1x1 is a mean over H and W (what core ATen decomposes it to)."""
    rw = Rewriter(graph)
    for node in graph.nodes:
        if node.op == "adaptive_avg_pool2d" and tuple(node.attrs["output_size"]) == (1, 1):
            x = rw.get(node.inputs[0])
            axes = (x.rank - 2, x.rank - 1)
            rw.replace(node, rw.emit("mean", [x], {"axes": axes, "keepdim": True},
                                     source=node.source))
        else:
            rw.keep(node)
    return rw.finish()


def recognize_activations(graph: Graph) -> Graph:
    """tanh-approximated GELU and SiLU written as arithmetic -> one activation node."""
    rw = Rewriter(graph)
    for node in graph.nodes:
        x = _match_gelu_tanh(node, graph)
        op, attrs = ("gelu", {"approximate": "tanh"}) if x is not None else (None, None)
        if x is None:
            x = _match_silu(node)
            op, attrs = ("silu", {}) if x is not None else (None, None)
        if x is not None and x.shape == node.shape and op is not None:
            rw.replace(node, rw.emit(op, [rw.get(x)], attrs, source=node.source))
        else:
            rw.keep(node)
    return rw.finish()


def _match_gelu_tanh(node: Node, graph: Graph) -> Node | None:
    """0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))), in any operand order."""
    if node.op != "mul":
        return None
    for half_x, one_plus in operand_pairs(node):
        x = _mul_by(half_x, 0.5, graph)
        if x is None or one_plus.op != "add":
            continue
        for t, one in operand_pairs(one_plus):
            if t.op != "tanh" or not is_number(one, graph, 1.0):
                continue
            inner = _mul_by(t.inputs[0], math.sqrt(2.0 / math.pi), graph, tol=1e-4)
            if inner is not None and inner.op == "add" and _is_cubic_term(inner, x, graph):
                return x
    return None


def _mul_by(node: Node, value: float, graph: Graph, tol: float = 1e-6) -> Node | None:
    """x if node is x * value (either order), else None."""
    if node.op != "mul":
        return None
    for x, c in operand_pairs(node):
        if is_number(c, graph, value, tol):
            return x
    return None


def _is_cubic_term(add: Node, x: Node, graph: Graph) -> bool:
    for a, term in operand_pairs(add):
        if a is not x:
            continue
        cube = _mul_by(term, 0.044715, graph, tol=1e-4)
        if cube is None:
            continue
        if cube.op == "pow" and cube.inputs[0] is x and is_number(cube.inputs[1], graph, 3.0):
            return True
        if cube.op == "mul" and x in cube.inputs:  # x * x * x
            other = cube.inputs[1] if cube.inputs[0] is x else cube.inputs[0]
            if other.op == "mul" and other.inputs == (x, x):
                return True
    return False


def _match_silu(node: Node) -> Node | None:
    if node.op != "mul":
        return None
    for x, s in operand_pairs(node):
        if s.op == "sigmoid" and s.inputs[0] is x:
            return x
    return None


def transpose_products(graph: Graph) -> Graph:
    """(A @ B)^T -> B^T @ A^T when the product is read only transposed: autograd's weight
    gradient of a linear layer is ``mm(x^T, dy)^T``. TensorE takes either operand transposed for
    free (fuse_matmul folds the transposes into the kernel), so the product is computed in the
    layout its reader wants instead of being transposed afterwards (XLA's algebraic simplifier
    rewrites transpose(dot) the same way)."""
    users = graph.users()
    outputs = {id(o) for o in graph.outputs}
    rw = Rewriter(graph)
    for node in graph.nodes:
        x = node.inputs[0] if node.inputs else None
        if (is_transpose_last2(node) and x is not None and x.op == "matmul"
                and id(x) not in outputs and users[x] == [node]
                and x.inputs[0].rank == x.inputs[1].rank == node.rank):
            a, b = (rw.get(i) for i in x.inputs)
            dims = tuple(node.attrs["dims"])
            bt = rw.emit("permute", [b], {"dims": dims}, source=x.source)
            at = rw.emit("permute", [a], {"dims": dims}, source=x.source)
            rw.replace(node, rw.emit("matmul", [bt, at], dict(x.attrs), source=x.source))
        else:
            rw.keep(node)
    return rw.finish()


def elementwise_before_transpose(graph: Graph) -> Graph:
    """op(x^T, numbers) -> op(x, numbers)^T: an element-wise op whose one tensor operand is a
    transposing view (its last axis moved) runs on the view's base, and the view moves after
    it. scaled_dot_product_attention scales k^T (``k.transpose(-2, -1) * sqrt(scale)``); read
    by an element-wise kernel, a transposing view is materialised first (a transpose per
    [128, d] block), while TensorE reads the scaled k's transpose in place (XLA's algebraic
    simplifier sinks transposes below element-wise ops the same way)."""
    rw = Rewriter(graph)
    users = graph.users()
    outputs = {id(o) for o in graph.outputs}
    for node in graph.nodes:
        tensors = [i for i, x in enumerate(node.inputs) if x.shape != ()]
        x = node.inputs[tensors[0]] if len(tensors) == 1 else None
        if (kind(node.op) == "elementwise" and x is not None and x.op == "permute"
                and x.shape == node.shape and x.attrs["dims"][-1] != x.rank - 1
                and _read_by_tensor_engine(node, users, outputs)):
            ins = list(rw.operands(node))
            ins[tensors[0]] = rw.get(x.inputs[0])
            base = rw.emit(node.op, ins, dict(node.attrs), source=node.source)
            rw.replace(node, rw.emit("permute", [base], {"dims": tuple(x.attrs["dims"])},
                                     source=node.source))
        else:
            rw.keep(node)
    return rw.finish()


def _read_by_tensor_engine(node: Node, users: dict[Node, list[Node]], outputs: set[int]) -> bool:
    """Every reader of `node` is a matmul, directly or through views (which TensorE reads in
    any layout); a transposed result read by anything else would be materialised anyway."""
    if id(node) in outputs or not users[node]:
        return False
    return all(u.op == "matmul" or (u.op in ("reshape", "permute", "expand", "slice")
                                    and _read_by_tensor_engine(u, users, outputs))
               for u in users[node])


def unmerged_batch_axes(graph: Graph) -> Graph:
    """bmm(A.reshape(b*h, m, k), B.reshape(b*h, k, n)) -> matmul(A, B).reshape(b*h, m, n) when
    an operand's reshape only merges batch axes (possibly read transposed: the backward's
    ``bmm(grad, v.reshape(b*h, s, d).transpose(1, 2))``). Attention's per-head products read
    q, k and v as [b, h, s, d] views of [b, s, h*d] projections, whose b and h axes do not merge
    into one strided axis: merged, each operand would be copied into a dense [b*h, s, d] tensor
    first; unmerged, the matmul kernel reads the view in place (TensorE takes either layout)."""
    rw = Rewriter(graph)
    for node in graph.nodes:
        lead = _merged_batch(node)
        if lead is None:
            rw.keep(node)
            continue
        ins = [_unmerged(rw, i, lead) for i in node.inputs]
        product = rw.emit("matmul", ins, dict(node.attrs), source=node.source)
        rw.replace(node, rw.emit("reshape", [product], {"shape": node.shape},
                                 source=node.source))
    return rw.finish()


_SWAP_LAST2 = (0, 2, 1)


def _merged_batch(node: Node) -> tuple[int, ...] | None:
    """The batch axes a rank-3 matmul's operand was merged from (by a reshape of a rank >= 4
    tensor whose last two axes it keeps), when every operand has that batch; else None."""
    if node.op != "matmul" or node.rank != 3 or any(i.rank != 3 for i in node.inputs):
        return None
    for x in node.inputs:
        if x.op == "permute" and tuple(x.attrs["dims"]) == _SWAP_LAST2:
            x = x.inputs[0]
        if x.op == "reshape" and x.inputs[0].rank >= 4 and \
                x.inputs[0].shape[-2:] == x.shape[-2:]:
            lead = tuple(x.inputs[0].shape[:-2])
            if all(i.shape[0] == node.shape[0] == math.prod(lead) for i in node.inputs):
                return lead
    return None


def _unmerged(rw: Rewriter, x: Node, lead: tuple[int, ...]) -> Node:
    """Operand `x` [batch, r, c] as [*lead, r, c]: a transpose of its last two axes stays one."""
    if x.op == "permute" and tuple(x.attrs["dims"]) == _SWAP_LAST2:
        inner = _unmerged(rw, x.inputs[0], lead)
        n = len(lead)
        return rw.emit("permute", [inner], {"dims": (*range(n), n + 1, n)}, source=x.source)
    return rw.emit("reshape", [rw.get(x)], {"shape": (*lead, *x.shape[-2:])}, source=x.source)


def canonicalize(graph: Graph) -> Graph:
    return fold_views(transpose_products(recognize_activations(global_pools_to_means(
        unmerged_batch_axes(elementwise_before_transpose(fold_views(graph)))))))
