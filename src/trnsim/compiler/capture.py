"""Capture a PyTorch model: torch.export -> core ATen -> trnsim graph IR.

The steps, each explained where it happens:

1. Put the model in inference form for the duration of the capture (``eval()``, Hugging Face
   ``use_cache=False``): torch-neuronx traces inference, and a KV cache output is not a tensor.
2. ``torch.export.export(strict=False)``: non-strict export runs the model's Python as is, which
   is what Hugging Face models need. A failure (data-dependent control flow, a shape error in the
   model) becomes a `CaptureError` that names what was rejected and the model's line. Export's
   intermediate graph modules are lazy: no Python source is generated for graphs nobody runs.
3. Translate torch.export's graph directly when every operator in it has a translation (the
   common case: `trnsim.compiler.aten_composite`), else ``run_decompositions`` to core ATen,
   keeping ``scaled_dot_product_attention`` whole: it is the attention kernel's natural
   boundary, and decomposing it only to fuse it back is waste. (The decomposition re-traces the
   model: 3 of BERT-large's 5 s of capture.)
4. Translate node by node (`trnsim.compiler.aten`). Every unsupported operator is collected with
   its source line; if there are any, one `UnsupportedOperatorError` lists them all.

Weights are not copied: constants hold numpy views of the parameters' storage (bf16 parameters
are viewed through ml_dtypes). Only int64/float64 buffers are narrowed (copied) to 32 bits.
"""

from __future__ import annotations

import functools
import os
import re
import time
import traceback
import warnings
from typing import Any

import numpy as np

from trnsim.compiler.aten import IGNORED, TRANSLATIONS, Translator, ir_dtype
from trnsim.compiler.aten_composite import INPLACE
from trnsim.compiler.errors import CaptureError, IRError, UnsupportedOp, UnsupportedOperatorError
from trnsim.compiler.export_context import (
    inference_mode,
    lazy_graph_modules,
    meta_as_zeros,
    meta_tensors,
    quiet_torch,
)
from trnsim.compiler.ir import Graph, Node
from trnsim.compiler.structure import from_treespec
from trnsim.errors import TrnsimError

# ATen ops kept whole through decomposition (each maps to one trnsim kernel).
KEEP_WHOLE = ("scaled_dot_product_attention.default",)


def capture(model: Any, example_inputs: Any, kwargs: dict[str, Any] | None = None, *,
            name: str | None = None, decompose: bool | None = None) -> Graph:
    """Export `model` on `example_inputs` (a tensor, a tuple of them, or a dict of keyword
    arguments) and translate it into a verified trnsim `Graph` with fixed shapes.

    decompose: None translates torch.export's graph directly when trnsim knows every operator
    in it (`trnsim.compiler.aten_composite`) and decomposes to core ATen otherwise; True always
    decomposes; False never does (unsupported operators then raise).
    """
    args, kwargs = normalize_inputs(example_inputs, kwargs)
    timings: dict[str, float] = {}
    without_values = meta_tensors(model)
    exported = export(model, args, kwargs, timings, decompose=False)
    title = name or type(model).__name__
    graph = None
    start = time.perf_counter()
    if decompose is not True and (decompose is False or translatable(exported)):
        try:
            graph = translate(exported, title, (args, kwargs))
            graph.meta["capture_path"] = "direct"
        except (UnsupportedOperatorError, IRError):
            if decompose is False:
                raise
    if graph is None:
        exported = decompose_to_core(exported, timings)
        start = time.perf_counter()
        graph = translate(exported, title, (args, kwargs))
        graph.meta["capture_path"] = "core_aten"
    timings["translate_s"] = time.perf_counter() - start
    graph.meta["capture_times"] = timings
    if without_values:
        graph.meta["meta_tensors"] = without_values
    graph.meta["model"] = f"{type(model).__module__}.{type(model).__qualname__}"
    check_zero_size(graph)
    return graph.verify()


_SHAPE_ONLY = ("input", "constant", "scalar", "full", "arange", "output")


def check_zero_size(graph) -> None:
    """Refuse, by name, an operator that is not element-wise on a tensor with no elements that
    an output depends on (an empty slice that `cat` drops, as Phi-3's partial rotary makes when
    the rotary dimension is the whole head, computes nothing)."""
    from trnsim.compiler.errors import ZeroSizeTensorError
    from trnsim.compiler.ops import ELEMENTWISE

    live: set[int] = {id(o) for o in graph.outputs}
    for node in reversed(graph.nodes):
        if id(node) in live:
            live.update(id(i) for i in node.inputs)
    for node in graph.nodes:
        if node.op in ELEMENTWISE or node.op in _SHAPE_ONLY or id(node) not in live:
            continue
        for value in (node, *node.inputs):
            if 0 in value.shape:
                raise ZeroSizeTensorError(node.name, node.op, value.shape, source=node.source)


def translatable(exported: Any) -> bool:
    """Every operator has a translation, and in-place ops mutate values no other node reads
    except before the mutation into a new tensor (the sum in `x /= x.sum()` sees the old value
    either way; a view taken before it would see the new one)."""
    order = {fx: i for i, fx in enumerate(exported.graph.nodes)}

    def computes_new(user: Any) -> bool:
        schema = getattr(user.target, "_schema", None)
        return schema is not None and all(r.alias_info is None for r in schema.returns)

    for fx in exported.graph.nodes:
        if fx.op != "call_function":
            continue
        target = str(fx.target)
        if target in IGNORED or "getitem" in target:
            continue
        if target not in TRANSLATIONS:
            return False
        if target in INPLACE and any(order[user] > order[fx] or not computes_new(user)
                                     for user in getattr(fx.args[0], "users", {}) if user is not fx):
            return False
    return True


def normalize_inputs(example_inputs: Any, kwargs: dict[str, Any] | None = None
                     ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if isinstance(example_inputs, dict) and kwargs is None:
        return (), dict(example_inputs)
    if isinstance(example_inputs, (tuple, list)):
        return tuple(example_inputs), dict(kwargs or {})
    return (example_inputs,), dict(kwargs or {})


def export(model: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
           timings: dict[str, float] | None = None, *, decompose: bool = True) -> Any:
    """torch.export in inference mode (+ decomposition to core ATen minus `KEEP_WHOLE`)."""
    import torch

    timings = {} if timings is None else timings
    with inference_mode(model), meta_as_zeros(model), torch.no_grad(), \
            warnings.catch_warnings(), quiet_torch() as held:
        warnings.simplefilter("ignore", FutureWarning)  # torch-internal deprecation noise
        start = time.perf_counter()
        try:
            with lazy_graph_modules():
                exported = torch.export.export(model, args, kwargs, strict=False)
        except TrnsimError:
            raise
        except Exception as exc:  # torch raises many types; each becomes one explanation
            error = explain_export_failure(exc)
            error.detail = "\n\n".join(t for t in (error.detail, held.text()) if t)
            raise error from exc
        timings["export_s"] = time.perf_counter() - start
    return decompose_to_core(exported, timings) if decompose else exported


def decompose_to_core(exported: Any, timings: dict[str, float] | None = None) -> Any:
    """run_decompositions with the default core-ATen table, keeping `KEEP_WHOLE` ops whole."""
    import torch

    start = time.perf_counter()
    table = torch.export.default_decompositions()
    for name in KEEP_WHOLE:
        op, overload = name.split(".")
        table.pop(getattr(getattr(torch.ops.aten, op), overload), None)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        try:
            with lazy_graph_modules():
                result = exported.run_decompositions(table)
        except Exception as exc:
            raise explain_export_failure(exc) from exc
    if timings is not None:
        timings["decompose_s"] = time.perf_counter() - start
    return result


# --- translation ----------------------------------------------------------------------------
def translate(exported: Any, name: str, example: tuple[tuple[Any, ...], dict[str, Any]], *,
              on_unsupported: Any = None) -> Graph:
    """Build the IR graph from a decomposed ExportedProgram.

    Unsupported operators raise one `UnsupportedOperatorError` listing all of them, unless
    `on_unsupported(fx_node, UnsupportedOp)` is given (analyze): then the graph is partial.
    """
    import torch.utils._pytree as pytree

    graph = Graph(name)
    cx = Translator(graph)
    values: dict[str, Any] = {}
    unsupported: list[UnsupportedOp] = []
    _add_placeholders(exported, graph, values)
    for fx in exported.graph.nodes:
        if fx.op != "call_function":
            continue
        target = str(fx.target)
        if target in IGNORED:
            continue
        cx.source = source_of(fx)
        cx.expected = fx.meta.get("val")
        cx.current_target = target
        if "getitem" in target:
            before = len(unsupported)
            values[fx.name] = _getitem(values[fx.args[0].name], fx, unsupported, cx.source)
            if on_unsupported is not None and len(unsupported) > before:
                on_unsupported(fx, unsupported[-1])
            continue
        args, kwargs = _map_args(fx.args, values), _map_args(fx.kwargs, values)
        fn = TRANSLATIONS.get(target)
        if fn is None or _poisoned(args, kwargs):
            if fn is None:
                unsupported.append(UnsupportedOp(aten_kind(target), cx.source,
                                                 code=code_of(fx)))
                if on_unsupported is not None:
                    on_unsupported(fx, unsupported[-1])
            values[fx.name] = _poison(cx.expected)
            continue
        try:
            result = fn(cx, *args, **kwargs)
        except TrnsimError as exc:  # a supported op used in an unsupported way
            unsupported.append(UnsupportedOp(aten_kind(target), cx.source, exc.message,
                                             code_of(fx)))
            if on_unsupported is not None:
                on_unsupported(fx, unsupported[-1])
            result = _poison(cx.expected)
        _check_against_torch(result, cx.expected, fx)
        values[fx.name] = result
    if unsupported:
        if on_unsupported is not None:
            return graph
        raise UnsupportedOperatorError(unsupported)
    out_fx = next(n for n in exported.graph.nodes if n.op == "output")
    flat = _user_outputs(exported, list(out_fx.args[0]))
    leaves = [values[a.name] if hasattr(a, "name") else a for a in flat]
    graph.outputs = [v for v in leaves if isinstance(v, Node)]
    graph.output_structure = from_treespec(exported.call_spec.out_spec, leaves)
    flat_in, _ = pytree.tree_flatten(example)
    graph.input_structure = from_treespec(exported.call_spec.in_spec, flat_in)
    graph.meta["output_torch_dtypes"] = [str(v.meta["val"].dtype) for v in flat
                                         if hasattr(v, "meta") and "val" in v.meta]
    return graph


def _user_outputs(exported: Any, flat: list) -> list:
    """The model's own outputs. Export also lists the new values of inputs and buffers the
    model updates in place (a KV cache written at one position): the program updates them in
    its HBM copy of the input, as the device would, and does not hand them back (the caller's
    tensors are not modified, as with torch_neuronx.trace)."""
    from torch.export.graph_signature import OutputKind

    kinds = [spec.kind for spec in exported.graph_signature.output_specs]
    if len(kinds) != len(flat):
        return flat
    return [value for value, kind in zip(flat, kinds, strict=True)
            if kind in (OutputKind.USER_OUTPUT, OutputKind.LOSS_OUTPUT)]


def _add_placeholders(exported: Any, graph: Graph, values: dict[str, Any]) -> None:
    from torch.export.graph_signature import InputKind, TensorArgument

    state = exported.state_dict
    consts = exported.constants
    index = 0
    fx_by_name = {n.name: n for n in exported.graph.nodes if n.op == "placeholder"}
    for spec in exported.graph_signature.input_specs:
        fx = fx_by_name.get(spec.arg.name)
        if spec.kind == InputKind.USER_INPUT:
            if not isinstance(spec.arg, TensorArgument):
                continue  # a Python constant argument: specialised into the graph by export
            val = fx.meta["val"]
            values[fx.name] = graph.add(
                "input", (), {"index": index, "name": fx.name, "shape": tuple(val.shape),
                              "dtype": ir_dtype(val.dtype).name, "torch_dtype": str(val.dtype)},
                name=fx.name)
            index += 1
            continue
        tensor = state[spec.target] if spec.target in state else consts[spec.target]
        kind = "parameter" if spec.kind == InputKind.PARAMETER else "buffer"
        values[fx.name] = graph.add_constant(tensor_to_numpy(tensor), name=_short(spec.target),
                                             origin=f"{kind}:{spec.target}")


def _short(target: str) -> str:
    return re.sub(r"[^0-9A-Za-z_]", "_", target)


def tensor_to_numpy(tensor: Any) -> np.ndarray:
    """A numpy view of a CPU tensor's storage (no copy), narrowed to 32 bits where needed."""
    import ml_dtypes
    import torch

    t = tensor.detach()
    if t.device.type == "meta":  # no values: a zero-stride stand-in of the right shape and dtype
        # (timing needs shapes only; `CompiledModel` refuses to compute with it)
        return np.broadcast_to(np.zeros((), _meta_numpy_dtype(t.dtype)), tuple(t.shape))
    if t.numel() > 1 and all(s == 0 for s in t.stride()):  # one value everywhere (`meta_as_zeros`)
        one = tensor_to_numpy(t.as_strided((), ()).clone())
        return np.broadcast_to(one, tuple(t.shape))
    if t.device.type != "cpu":
        t = t.cpu()
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    if t.dtype in (torch.int64, torch.uint64):
        return _narrow_int64(t.numpy())
    if t.dtype == torch.float64:
        return t.numpy().astype(np.float32)
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        np_type = ml_dtypes.float8_e4m3fn if t.dtype == torch.float8_e4m3fn else ml_dtypes.float8_e5m2
        return t.contiguous().view(torch.uint8).numpy().view(np_type)
    return t.contiguous().numpy()


def _narrow_int64(values: np.ndarray) -> np.ndarray:
    """int64 as int32, the widest integer a NeuronCore holds (as neuronx-cc narrows it); a value
    that does not fit is refused, never clipped or wrapped into a different number."""
    from trnsim.errors import LimitExceededError

    info = np.iinfo(np.int32)
    if values.size and (values.min() < info.min or values.max() > info.max):
        bad = values.max() if values.max() > info.max else values.min()
        raise LimitExceededError("int64 value", int(bad), f"the int32 range [{info.min}, "
                                 f"{info.max}]", context="a NeuronCore has no 64-bit integers: "
                                 "trnsim computes int64 tensors as int32")
    return values.astype(np.int32)


def _meta_numpy_dtype(dtype: Any) -> Any:
    import torch

    return tensor_to_numpy(torch.zeros((), dtype=dtype)).dtype


def _map_args(value: Any, values: dict[str, Any]) -> Any:
    if hasattr(value, "op") and hasattr(value, "name") and hasattr(value, "meta"):
        return values[value.name]
    if isinstance(value, (list, tuple)):
        return type(value)(_map_args(v, values) for v in value)
    if isinstance(value, dict):
        return {k: _map_args(v, values) for k, v in value.items()}
    return value


class _Poison(Node):
    """Stands in for the result of an unsupported op so capture can go on finding the others."""


def _poison(val: Any) -> Any:
    from trnsim.numerics import dtype as _dt

    if isinstance(val, (tuple, list)):
        return tuple(_poison(v) for v in val)
    if val is None or not hasattr(val, "shape"):
        return None
    try:
        dt = ir_dtype(val.dtype)
    except TrnsimError:
        dt = _dt("float32")
    # a data-dependent size (nonzero, unique, masked_select) has no value: 1 stands in for it,
    # the poison only carries capture on to the next unsupported op
    shape = tuple(s if isinstance(s, int) else _concrete_or_one(s) for s in val.shape)
    return _Poison("unsupported", "unsupported", (), {}, shape, dt)


def _concrete_or_one(size: Any) -> int:
    try:
        return int(size)
    except Exception:  # GuardOnDataDependentSymNode: torch cannot name an unbacked size
        return 1


def _poisoned(*trees: Any) -> bool:
    for tree in trees:
        items = tree.values() if isinstance(tree, dict) else tree
        for v in items:
            if isinstance(v, _Poison) or (isinstance(v, (list, tuple)) and _poisoned(v)):
                return True
    return False


def _getitem(container: Any, fx: Any, unsupported: list[UnsupportedOp], source: str | None
             ) -> Any:
    item = container[fx.args[1]]
    if item is None and fx.users:
        parent = fx.args[0]
        unsupported.append(UnsupportedOp(aten_kind(str(parent.target)), source,
                                         f"output {fx.args[1]} is not supported", code_of(fx)))
        return _poison(fx.meta.get("val"))
    return item


def _check_against_torch(result: Any, expected: Any, fx: Any) -> None:
    """Every translated value must have PyTorch's shape and (narrowed) dtype."""
    if isinstance(result, (tuple, list)):
        for r, e in zip(result, expected, strict=False):
            _check_against_torch(r, e, fx)
        return
    if not isinstance(result, Node) or isinstance(result, _Poison) or expected is None:
        return
    want_shape = tuple(int(s) for s in expected.shape)
    want_dtype = ir_dtype(expected.dtype)
    if result.shape != want_shape or result.dtype != want_dtype:
        raise IRError(f"translating {fx.target} ({fx.name}) gave {result.type_str()}, PyTorch says "
                      f"{want_dtype.name}[{','.join(map(str, want_shape))}]")


def aten_kind(target: str) -> str:
    """"aten.adaptive_max_pool2d.default" -> "aten::adaptive_max_pool2d" (torch-neuronx style)."""
    parts = target.split(".")
    if len(parts) >= 3:
        return f"{parts[0]}::{parts[1]}"
    return target.replace(".", "::", 1)


# --- source locations -----------------------------------------------------------------------
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')


@functools.cache
def _library_dirs() -> tuple[str, ...]:
    """torch's and trnsim's directories (fixed for the process: asked once per FX node)."""
    import torch

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return (os.path.dirname(os.path.abspath(torch.__file__)) + os.sep, here + os.sep)


def _frames(stack_trace: str | None) -> list[tuple[str, int, str, str]]:
    if not stack_trace:
        return []
    return [(f, int(line), fn, code.strip()) for f, line, fn, code in _FRAME.findall(stack_trace)]


def _user_frame(frames: list[tuple[str, int, str, str]]) -> tuple[str, int, str, str] | None:
    skip = _library_dirs()
    user = [f for f in frames if not os.path.abspath(f[0]).startswith(skip)]
    return user[-1] if user else None


def source_of(fx: Any) -> str | None:
    """The model's own ``file:line`` for an FX node (the innermost frame outside torch)."""
    frame = _user_frame(_frames(fx.meta.get("stack_trace")))
    return f"{short_path(frame[0])}:{frame[1]}" if frame else None


def code_of(fx: Any) -> str | None:
    frame = _user_frame(_frames(fx.meta.get("stack_trace")))
    return frame[3] if frame else None


def short_path(path: str) -> str:
    """Paths inside site-packages print from the package down; others relative to cwd if inside."""
    marker = "site-packages" + os.sep
    if marker in path:
        return path.split(marker, 1)[1]
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


# --- export failures ------------------------------------------------------------------------
_RAISED_AT = re.compile(r'The following call raised this error:\s*\n\s*File "([^"]+)", line (\d+)')


def explain_export_failure(exc: BaseException) -> CaptureError:
    """Turn whatever torch.export raised into one line + a hint + the model's line."""
    text = str(exc)
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    source = None
    raised = _RAISED_AT.search(text)
    if raised:
        source = f"{short_path(raised.group(1))}:{raised.group(2)}"
    else:
        frames = [(f.filename, f.lineno or 0, f.name, f.line or "")
                  for f in traceback.extract_tb(exc.__traceback__)]
        frame = _user_frame(frames)
        if frame:
            source = f"{short_path(frame[0])}:{frame[1]}"
    name = type(exc).__name__
    if "GuardOnDataDependent" in name or "data-dependent" in text or "data dependent" in text:
        return CaptureError(
            "data-dependent control flow (a Python if/loop/size that depends on tensor values)",
            "Neuron compiles one fixed graph: use torch.where/torch.cond instead of the branch, or "
            "make the value a constant", source=source, detail=text)
    if "cache_utils" in text and "not a known type" in text:
        return CaptureError("the model returns a Hugging Face KV-cache object (past_key_values), "
                            "which a compiled graph cannot output",
                            "trace with use_cache=False (model.config.use_cache = False), as "
                            "torch_neuronx.trace needs too", source=source, detail=text)
    if "Unsupported" in name or "UserError" in name:
        return CaptureError(f"{first[:200]}", "simplify that Python construct or move it out of "
                            "forward()", source=source, detail=text)
    return CaptureError(f"the model raised {name}: {first[:200]}",
                        "check that the model runs eagerly on example_inputs "
                        "(model(*example_inputs))", source=source, detail=text)
