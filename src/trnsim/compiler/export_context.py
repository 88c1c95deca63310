"""The context torch.export runs in while trnsim captures a model: the model in inference form,
its meta weights as zero-stride stand-ins, torch's logging held back, and export's intermediate
graph modules lazy. Each is undone when the capture ends (`trnsim.compiler.capture`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def lazy_graph_modules() -> Iterator[None]:
    """torch.fx graph modules made inside generate their Python source only when run or read.

    Export's passes rebuild and re-assign the graph module many times (Llama-2-7B: 24 code
    generations, each a Python ``compile`` of the whole forward); capture reads only the final
    graph, so all but the ExportedProgram's own module (a plain GraphModule) skip it. The graph
    itself, its nodes and their metadata are the same either way. The switch is private to
    torch.fx: a torch without it exports the same graph, generating code each time."""
    import contextlib

    import torch.fx._lazy_graph_module as lazy

    use_lazy = getattr(lazy, "_use_lazy_graph_module", None)
    with use_lazy(True) if use_lazy is not None else contextlib.nullcontext():
        yield


def meta_tensors(model: Any) -> dict[str, str]:
    """State-dict name -> "parameter" / "buffer" of the model's tensors on the meta device."""
    found: dict[str, str] = {}
    for kind, named in (("parameter", "named_parameters"), ("buffer", "named_buffers")):
        for name, tensor in getattr(model, named, lambda **_: ())(remove_duplicate=False):
            if getattr(tensor, "is_meta", False):
                found[name] = kind
    return found


@contextmanager
def meta_as_zeros(model: Any) -> Iterator[None]:
    """Meta tensors (no values) as zero-stride CPU zeros for the export, then put back.

    Export traces real devices: a meta weight meeting a CPU input (ViT's CLS token concatenated
    to its patch embeddings) is a device mismatch. A zero-stride stand-in has the shape and
    dtype, takes no memory, and `tensor_to_numpy` keeps it that way."""
    import torch

    swapped: list[tuple[Any, str, str, Any]] = []  # (module, "_parameters"/"_buffers", name, old)
    stand_ins: dict[int, Any] = {}  # tied weights share one stand-in
    for module in getattr(model, "modules", lambda: ())():
        for table in ("_parameters", "_buffers"):
            for name, tensor in list(getattr(module, table).items()):
                if tensor is None or not tensor.is_meta:
                    continue
                if id(tensor) not in stand_ins:
                    zeros = torch.zeros((), dtype=tensor.dtype).expand(tensor.shape)
                    stand_ins[id(tensor)] = (torch.nn.Parameter(zeros, requires_grad=False)
                                             if table == "_parameters" else zeros)
                swapped.append((module, table, name, tensor))
                getattr(module, table)[name] = stand_ins[id(tensor)]
    try:
        yield
    finally:
        for module, table, name, tensor in swapped:
            getattr(module, table)[name] = tensor


@contextmanager
def quiet_torch() -> Iterator[Held]:
    """torch logs and prints a failed export's internals (fake-tensor tracebacks at ERROR, the
    partial graph on stderr) before trnsim's one-line explanation. While exporting they are
    held back: replayed if export succeeds, kept in the CaptureError's detail (``--debug``) if
    it fails. Symbolic-shape warnings are not logged at all."""
    import contextlib
    import logging

    logger = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    level = logger.level
    logger.setLevel(logging.ERROR)
    held = Held()
    handlers = {h for lg in _torch_loggers() for h in lg.handlers}
    for handler in handlers:
        handler.addFilter(held)
    failed = False
    try:
        with contextlib.redirect_stderr(held.stderr):
            yield held
    except BaseException:
        failed = True
        raise
    finally:
        for handler in handlers:
            handler.removeFilter(held)
        logger.setLevel(level)
        if not failed:
            held.replay()


class Held:
    """A logging filter that keeps torch's records, and a buffer for what torch prints."""

    def __init__(self) -> None:
        import io

        self.records: dict[int, Any] = {}
        self.stderr = io.StringIO()

    def filter(self, record: Any) -> bool:
        if not record.name.startswith("torch"):
            return True
        self.records[id(record)] = record
        return False

    def text(self) -> str:
        import logging

        lines = [logging.Formatter("%(levelname)s %(name)s: %(message)s").format(r)
                 for r in self.records.values()]
        return "\n".join([*lines, self.stderr.getvalue()]).strip()

    def replay(self) -> None:
        import logging
        import sys

        for record in self.records.values():
            logging.getLogger(record.name).handle(record)
        if self.stderr.getvalue():
            sys.stderr.write(self.stderr.getvalue())


def _torch_loggers() -> list[Any]:
    """The root logger and every torch logger that has handlers of its own."""
    import logging

    loggers = [logging.getLogger()]
    loggers += [lg for name, lg in logging.root.manager.loggerDict.items()
                if name.startswith("torch") and isinstance(lg, logging.Logger) and lg.handlers]
    return loggers


@contextmanager
def inference_mode(model: Any) -> Iterator[None]:
    """eval() and, for Hugging Face models, use_cache=False; restored afterwards. Each submodule
    gets its own mode back: ``train()`` on the root would switch on the dropout of an eval-mode
    model wrapped in a train-mode module (the user's eager model would then change its answers)."""
    modules = list(model.modules()) if hasattr(model, "modules") else []
    modes = [m.training for m in modules]
    config = getattr(model, "config", None)
    had_cache = config is not None and hasattr(config, "use_cache")
    old_cache = getattr(config, "use_cache", None) if had_cache else None
    if hasattr(model, "eval"):
        model.eval()
    if had_cache:
        config.use_cache = False
    try:
        yield
    finally:
        if had_cache:
            config.use_cache = old_cache
        for module, mode in zip(modules, modes, strict=True):
            module.training = mode
