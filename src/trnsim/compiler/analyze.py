"""`analyze`: which operators of a model trnsim supports, as torch_neuronx.analyze reports it.

The dict has torch_neuronx.analyze's keys, so scripts written for it keep working:
``support_percentage``, ``supported_operators`` (ATen op -> count) and
``unsupported_operators`` (one record per call: kind, failureAt, call, opGraph). Operators are
counted as the model calls them (``aten::linear``, ``aten::layer_norm``: torch.export's graph
before decomposition); one is unsupported if any core-ATen operator it decomposes into has no
trnsim translation. Nothing is compiled or simulated.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from trnsim.compiler.capture import (
    aten_kind,
    code_of,
    decompose_to_core,
    export,
    normalize_inputs,
    source_of,
    translate,
)
from trnsim.compiler.errors import UnsupportedOp
from trnsim.compiler.export_context import inference_mode

FAILURE_AT = "Lowering to trnsim IR"
_SKIP = ("getitem", "_assert", "sym_constrain")


def analyze(model: Any, example_inputs: Any, kwargs: dict[str, Any] | None = None
            ) -> dict[str, Any]:
    """Report supported and unsupported operators of `model` on `example_inputs`."""
    from trnsim import __version__

    args, kwargs = normalize_inputs(example_inputs, kwargs)
    exported = export(model, args, kwargs, decompose=False)
    calls = {n.name: n for n in exported.graph.nodes
             if n.op == "call_function" and not any(s in str(n.target) for s in _SKIP)}
    with inference_mode(model):
        decomposed = decompose_to_core(exported)
    failures: dict[str, list[tuple[Any, UnsupportedOp]]] = {}

    def record(fx: Any, op: UnsupportedOp) -> None:
        failures.setdefault(_root_name(fx, calls), []).append((fx, op))

    translate(decomposed, type(model).__name__, (args, kwargs), on_unsupported=record)
    counts: Counter[str] = Counter()
    unsupported: list[dict[str, Any]] = []
    for name, fx in calls.items():
        kind = aten_kind(str(fx.target))
        if name in failures:
            unsupported.append(_record(kind, fx, failures[name]))
        else:
            counts[kind] += 1
    total = sum(counts.values()) + len(unsupported)
    share = 100.0 * sum(counts.values()) / total if total else 100.0
    return {
        "torch_neuronx_version": f"trnsim-{__version__}",
        "neuronx_cc_version": f"trnsim-{__version__}",
        "support_percentage": f"{share:.2f}%",
        "supported_operators": dict(sorted(counts.items())),
        "unsupported_operators": unsupported,
    }


def _root_name(fx: Any, calls: dict[str, Any]) -> str:
    """The pre-decomposition node a decomposed node came from (torch's from_node provenance)."""
    sources = fx.meta.get("from_node") or []
    name = fx.name
    while sources:
        src = sources[0]
        name = src.name
        sources = getattr(src, "from_node", None) or []
    return name if name in calls else fx.name


def _record(kind: str, fx: Any, failed: list[tuple[Any, UnsupportedOp]]) -> dict[str, Any]:
    where = source_of(fx) or "<unknown>"
    code = code_of(fx)
    core = sorted({op.kind + ("" if op.reason == "no trnsim lowering" else f" ({op.reason})")
                   for _, op in failed})
    args = ", ".join(str(a) for a in fx.args)
    return {
        "kind": kind,
        "failureAt": FAILURE_AT,
        "call": f"{where}: {code}" if code else where,
        "opGraph": f"%{fx.name} = {fx.target}({args}); unsupported core ATen: {', '.join(core)}",
    }
