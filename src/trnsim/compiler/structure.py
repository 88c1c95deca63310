"""The nesting of a model's inputs and outputs: tuples, lists, dicts, Hugging Face ModelOutputs.

torch.export flattens (args, kwargs) and the model's return value into lists of tensors; a
`Structure` remembers the nesting so a compiled model can accept the same call and give back the
same kind of object as the eager model (``outputs.last_hidden_state`` keeps working). It is plain
data: it turns into JSON and back (for artifacts), never into a pickle. A Hugging Face output
class is stored by name and, when read back, looked up in a fixed table (the ModelOutput classes
of ``transformers.modeling_outputs``): a file never names a module to import. A traced model
keeps the class object itself; one outside the table is saved as the ``ModelOutput`` base (same
fields, same attribute and key access).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from trnsim.errors import InvalidArgumentError, UnsupportedError

KINDS = ("tensor", "const", "tuple", "list", "dict", "model_output")


@dataclass(frozen=True)
class Structure:
    """One level of nesting; leaves are "tensor" (one flat tensor) or "const" (a fixed value)."""

    kind: str
    children: tuple[Structure, ...] = ()
    keys: tuple[str, ...] = ()  # dict / model_output field names, in order
    type_path: str | None = None  # model_output: "module.QualName"
    value: Any = None  # const: a JSON scalar (None, bool, int, float, str)
    cls: Any = field(default=None, compare=False, repr=False)  # model_output: the traced class

    # --- counting and rebuilding ----------------------------------------------------------
    def tensor_count(self) -> int:
        if self.kind == "tensor":
            return 1
        return sum(c.tensor_count() for c in self.children)

    def rebuild(self, tensors: list[Any]) -> Any:
        """Nest a flat list of values (one per "tensor" leaf) the way the model returned them."""
        it = iter(tensors)
        result = self._build(it)
        if next(it, _END) is not _END:
            raise InvalidArgumentError(f"{len(tensors)} values for a structure of "
                                       f"{self.tensor_count()} tensors")
        return result

    def _build(self, it: Iterator[Any]) -> Any:
        if self.kind == "tensor":
            value = next(it, _END)
            if value is _END:
                raise InvalidArgumentError("too few values to rebuild the output structure")
            return value
        if self.kind == "const":
            return self.value
        items = [c._build(it) for c in self.children]
        if self.kind == "tuple":
            return tuple(items)
        if self.kind == "list":
            return items
        if self.kind == "dict":
            return dict(zip(self.keys, items, strict=True))
        cls = self.cls or output_type(self.type_path or "")
        return cls(**dict(zip(self.keys, items, strict=True)))

    def flatten(self, value: Any) -> list[Any]:
        """The "tensor" leaves of `value`, which must nest like this structure."""
        out: list[Any] = []
        self._flatten(value, out, "input")
        return out

    def _flatten(self, value: Any, out: list[Any], path: str) -> None:
        if self.kind == "tensor":
            out.append(value)
            return
        if self.kind == "const":
            if value != self.value:
                raise InvalidArgumentError(f"{path} was {self.value!r} at trace time, now "
                                           f"{value!r}; non-tensor arguments are fixed when tracing")
            return
        if self.kind in ("dict", "model_output"):
            if not hasattr(value, "keys") or list(value.keys()) != list(self.keys):
                got = list(value.keys()) if hasattr(value, "keys") else type(value).__name__
                raise InvalidArgumentError(f"{path}: traced with keys {list(self.keys)}, got {got}")
            for k, c in zip(self.keys, self.children, strict=True):
                c._flatten(value[k], out, f"{path}[{k!r}]")
            return
        if not isinstance(value, (tuple, list)) or len(value) != len(self.children):
            n = len(value) if isinstance(value, (tuple, list)) else type(value).__name__
            raise InvalidArgumentError(f"{path}: traced with {len(self.children)} items, got {n}")
        for i, (v, c) in enumerate(zip(value, self.children, strict=True)):
            c._flatten(v, out, f"{path}[{i}]")

    # --- JSON ---------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind}
        if self.children:
            data["children"] = [c.to_json() for c in self.children]
        if self.keys:
            data["keys"] = list(self.keys)
        if self.type_path:
            data["type"] = _stored_type(self.type_path)
        if self.kind == "const":
            data["value"] = self.value
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Structure:
        unknown = set(data) - {"kind", "children", "keys", "type", "value"}
        if unknown or data.get("kind") not in KINDS:
            raise InvalidArgumentError(f"bad structure record {data!r}")
        if data["kind"] == "model_output":
            output_type(data.get("type") or "")  # refuses a name outside the fixed table
        return cls(data["kind"], tuple(cls.from_json(c) for c in data.get("children", ())),
                   tuple(data.get("keys", ())), data.get("type"), data.get("value"))

    def describe(self) -> str:
        if self.kind == "tensor":
            return "*"
        if self.kind == "const":
            return repr(self.value)
        inner = ", ".join(
            (f"{k}={c.describe()}" if self.keys else c.describe())
            for k, c in zip(self.keys or [""] * len(self.children), self.children, strict=True))
        name = {"tuple": "", "list": "list", "dict": "dict"}.get(self.kind)
        if name is None:
            name = (self.type_path or "").rsplit(".", 1)[-1]
        return f"{name}({inner})"


_END = object()
_SCALARS = (type(None), bool, int, float, str)


_OUTPUT_MODULE = "transformers.modeling_outputs"


def output_types() -> dict[str, type]:
    """The fixed table of output classes a saved model may name: every ModelOutput class defined
    in ``transformers.modeling_outputs`` (and the base), by class name."""
    global _OUTPUT_TYPES
    if _OUTPUT_TYPES is None:
        try:
            from transformers import modeling_outputs
        except ImportError:
            return {}
        base = modeling_outputs.ModelOutput
        _OUTPUT_TYPES = {name: value for name, value in vars(modeling_outputs).items()
                         if isinstance(value, type) and issubclass(value, base)
                         and (value is base or value.__module__ == _OUTPUT_MODULE)}
    return _OUTPUT_TYPES


_OUTPUT_TYPES: dict[str, type] | None = None


def _stored_type(path: str) -> str:
    """What a saved model records for a traced output class: its own name when the table holds
    it, else the ModelOutput base."""
    module, _, name = path.rpartition(".")
    if module == _OUTPUT_MODULE and name in output_types():
        return path
    return f"{_OUTPUT_MODULE}.ModelOutput"


def output_type(path: str) -> type:
    """The class a stored ``transformers.modeling_outputs.<Name>`` stands for, from the fixed
    table; any other name is refused (nothing named by a file is ever imported)."""
    module, _, name = str(path).rpartition(".")
    table = output_types()
    if module != _OUTPUT_MODULE or name not in table:
        hint = "" if table else " (transformers is not installed)"
        raise InvalidArgumentError(f"output type {path!r} is not one trnsim rebuilds: expected "
                                   f"{_OUTPUT_MODULE}.<a ModelOutput class>{hint}")
    return table[name]


def from_treespec(spec: Any, leaves: list[Any] | None = None) -> Structure:
    """Convert a torch pytree TreeSpec. `leaves` (flat values) turn non-tensor leaves to consts."""
    it = iter(leaves) if leaves is not None else None
    return _convert(spec, it)


def _convert(spec: Any, leaves: Iterator[Any] | None) -> Structure:
    if spec.is_leaf():
        if leaves is None:
            return Structure("tensor")
        value = next(leaves)
        if _is_tensorish(value):
            return Structure("tensor")
        if not isinstance(value, _SCALARS):
            raise UnsupportedError(f"a model input or output of type {type(value).__name__} "
                                   "(only tensors, numbers, strings and None are supported)")
        return Structure("const", value=value)
    kids = spec.children() if hasattr(spec, "children") else spec.children_specs
    children = tuple(_convert(c, leaves) for c in kids)
    t = spec.type
    if t is tuple:
        return Structure("tuple", children)
    if t is list:
        return Structure("list", children)
    if t is dict:
        return Structure("dict", children, tuple(str(k) for k in spec.context))
    if _is_model_output(t):
        keys = tuple(str(k) for k in spec.context)
        return Structure("model_output", children, keys, f"{t.__module__}.{t.__qualname__}", cls=t)
    raise UnsupportedError(f"a model input or output nested in {t.__qualname__} (supported: "
                           "tuple, list, dict and transformers ModelOutput)")


def _is_model_output(t: type) -> bool:
    return any(b.__name__ == "ModelOutput" and b.__module__.startswith("transformers")
               for b in getattr(t, "__mro__", ()))


def _is_tensorish(value: Any) -> bool:
    return type(value).__name__ in ("Tensor", "Node", "Parameter", "FakeTensor") or \
        (hasattr(value, "shape") and hasattr(value, "dtype"))
