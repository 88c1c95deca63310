"""`trnsim bench`: the Inferentia2-vs-Inferentia1 table, predicted, beside the published values.

Each case compiles a model (built from its configuration by `trnsim.perf.zoo`) for its batch and
sequence length on one NeuronCore of the instance, cast as that instance's compiler does by
default, as the published runs were (fp32 model; neuronx-cc casts the matmuls to bf16, neuron-cc
on inf1 every fp32 operator: `trnsim.compiler.options.default_auto_cast`), and reports latency
(device time, and end to end through the framework: the host's dispatch and the inputs' and
outputs' copies over PCIe added, which is what published latencies measure and are compared
with), throughput with one copy per NeuronCore, and cost per inference.

Timing does not depend on weight values, so timing-only cases build models with their parameters
on the meta device (`trnsim.empty_weights`: no memory, no initialisation); `check_numerics`
builds them properly and compares with eager PyTorch.
The compile cache keeps programs and reports; on top of it a case's result is cached under a key
made of the model's structure (its zoo configuration and the transformers and torch versions that
build it), its input signature (batch, sequence length, decode), the compile options and
environment, and trnsim's source, so a warm case neither builds, captures nor lowers the model
(nor imports torch). `TRNSIM_CACHE_DIR=off` turns both off.

``decode=True`` times a causal LM per generated token instead (`trnsim.decode_step`): one new
token per sequence after ``seq`` cached tokens, so throughput is tokens/s and cost per inference
is cost per token.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

from trnsim import hardware
from trnsim.perf.zoo import zoo_model

DEFAULT_MODELS = ("bert-large-uncased", "electra-large-discriminator")
DEFAULT_INSTANCES = ("inf1.xlarge", "inf2.xlarge")
DEFAULT_BATCHES = (1, 10)


@dataclass
class BenchResult:
    model: str
    batch: int
    seq: int | None  # None: a vision model (its input is an image); decode: the cached context
    instance: str
    auto_cast: str  # what the compile used (the instance compiler's default unless asked)
    latency_ms: float
    loaded_latency_ms: float
    throughput_per_s: float
    cost_per_inference_usd: float | None
    copies: int
    bound: dict
    published_ms: float | None = None
    error_pct: float | None = None
    cache_hit: bool = False
    seconds: float = 0.0
    numerics: dict = field(default_factory=dict)
    decode: bool = False  # one generated token per sequence, not the whole input
    tensor_parallel: int = 1  # NeuronCores each copy is split over
    trace: str | None = None  # the Perfetto trace of one inference, when asked for
    # latency_ms is device time; end to end adds the host's share of a framework call (dispatch,
    # input and output copies over PCIe: `trnsim.runtime.host_time`), as published latencies do
    end_to_end_ms: float | None = None
    host: dict = field(default_factory=dict)

    @property
    def compared_ms(self) -> float:
        """What a published (end-to-end) latency is compared with."""
        return self.latency_ms if self.end_to_end_ms is None else self.end_to_end_ms

    def to_dict(self) -> dict:
        return asdict(self)


def comparison_rows(results: list[BenchResult], instances: tuple[str, ...]) -> list[dict]:
    """One row per (model, batch, seq): each instance's result (or None) and the last
    instance's speed-up over the first (first latency / last latency)."""
    cases: dict[tuple, dict[str, BenchResult]] = {}
    for r in results:
        cases.setdefault((r.model, r.batch, r.seq, r.decode), {})[r.instance] = r
    rows = []
    for (model, batch, seq, decode), by_instance in cases.items():
        first, last = by_instance.get(instances[0]), by_instance.get(instances[-1])
        speedup = (first.latency_ms / last.latency_ms
                   if len(instances) > 1 and first and last and last.latency_ms > 0 else None)
        rows.append({"model": model, "batch": batch, "seq": seq, "decode": decode,
                     "speedup": speedup,
                     "by_instance": {i: by_instance.get(i) for i in instances}})
    return rows


def published_latency(model: str, instance: str, batch: int, seq: int) -> float | None:
    """The calibration set's latency (ms) for this case, if it has one."""
    from trnsim.perf.validate import default_csv, read_rows

    for row in read_rows(default_csv()):
        if (row["kind"] == "model" and row["name"] == model and row["instance"] == instance
                and str(row.get("batch")) == str(batch) and str(row.get("seq")) == str(seq)
                and row["metric"].startswith("latency") and row["unit"] == "ms"):
            return float(row["value"])
    return None


def build_model(name: str, *, initialise: bool):
    """Build zoo model `name` (random weights if `initialise`, else on the meta device). The
    collector is paused meanwhile (`trnsim.sim.collector`): the imports and the model's modules
    are long-lived objects that every collection triggered while they are made would walk.
    Optional imports no build calls are deferred (`trnsim.perf.zoo_imports`)."""
    from trnsim.perf.zoo_imports import deferred_imports
    from trnsim.sim.collector import collector_paused

    entry = zoo_model(name)
    with collector_paused(promote=True), deferred_imports():
        if initialise:
            return entry.build()
        from trnsim.compiler.empty_weights import empty_weights

        with empty_weights():
            return entry.build()


def run_case(name: str, batch: int, seq: int | None, instance: str, *, auto_cast: str | None = None,
             auto_cast_type: str = "bf16", check_numerics: bool = False, model=None,
             decode: bool = False, lnc: int | None = None,
             tensor_parallel: int = 1, model_type: str | None = None,
             build: Callable[[], object] | None = None, trace_dir: str | None = None
             ) -> BenchResult:
    """Compile and time one (model, batch, seq, instance) case through `trnsim.trace`; with a
    warm compile cache only the capture runs (the program and its report are cached).
    `decode`: one generated token per sequence after `seq` cached tokens. `lnc`: the logical
    NeuronCore size on instances that have them (Trainium2/3), else ignored.
    `tensor_parallel`: NeuronCores each copy's weights are split over (a model too large for
    one core), as neuronx-distributed's tp_degree. `build`: makes the zoo model when the case is
    not cached (default: `build_model`); a `model` given is used as is and never cached.
    `trace_dir`: write the case's Perfetto trace there (the case is compiled, not read from the
    result cache, which keeps figures, not timelines)."""
    start = time.perf_counter()
    entry = zoo_model(name)
    seq = None if entry.family == "vision" else (seq or entry.default_seq)
    spec = hardware.instance(instance)
    key = None
    if not check_numerics and model is None and trace_dir is None:
        key = result_key(name, batch, seq, spec.name, auto_cast=auto_cast,
                         auto_cast_type=auto_cast_type, decode=decode, lnc=lnc,
                         tensor_parallel=tensor_parallel, model_type=model_type)
        cached = cached_result(key)
        if cached is not None:
            cached.seconds = time.perf_counter() - start
            return cached
    from trnsim.runtime import trace  # after the result cache: a hit never loads the simulator

    if model is None:
        model = build() if build is not None else build_model(name, initialise=check_numerics)
    if decode:
        model, inputs = entry.decode_inputs(model, batch, seq)
    else:
        inputs = entry.inputs(batch, seq)
    compiled = trace(model, (), kwargs=inputs, instance=spec, auto_cast=auto_cast,
                     auto_cast_type=auto_cast_type,
                     lnc=lnc if lnc in spec.chip.lnc_options else None,
                     tensor_parallel=tensor_parallel if tensor_parallel > 1 else None,
                     model_type=model_type)
    report = compiled.report()
    result = BenchResult(model=name, batch=batch, seq=seq, instance=spec.name,
                         auto_cast=compiled.options["auto_cast"],
                         latency_ms=report.latency_ms, loaded_latency_ms=report.loaded_latency_ms,
                         throughput_per_s=report.throughput_per_s,
                         cost_per_inference_usd=report.cost_per_inference_usd,
                         copies=report.copies, bound=report.bound,
                         cache_hit=bool(compiled.meta.get("cache_hit")), decode=decode,
                         tensor_parallel=tensor_parallel, end_to_end_ms=report.end_to_end_ms,
                         host=report.host)
    published = None if decode else published_latency(name, spec.name, batch, seq)
    if published is not None:
        result.published_ms = published
        result.error_pct = 100.0 * (result.compared_ms - published) / published
    if check_numerics:
        result.numerics = _numerics(compiled, model, inputs)
    if trace_dir is not None:
        name_part = name.replace("/", "_")
        where = f"-s{seq}" if seq else ""
        result.trace = compiled.profile(Path(trace_dir) / (
            f"{name_part}-{spec.name}-b{batch}{where}{'-decode' if decode else ''}.json"))
    result.seconds = time.perf_counter() - start
    if key is not None:
        _store_result(key, result)
    return result


# --- result cache: a warm case skips model building, capture and lowering ---------------------
_ENVIRONMENT_PREFIXES = ("NEURON_", "TRNSIM_")  # compile flags, visible cores, trnsim switches
_SOURCE_DIGEST: list[str] = []


def result_key(name: str, batch: int, seq: int | None, instance: str, **options) -> str | None:
    """What decides a zoo case's result: the model's structure (its configuration and the
    libraries that build and capture it), its inputs' signature, the options, the environment
    and trnsim's own source. None when the zoo entry does not spell out its configuration."""
    entry = zoo_model(name)
    config = getattr(entry.build, "config", None)
    if config is None:
        return None
    versions = {}
    for package in ("torch", "transformers"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    environment = {k: v for k, v in os.environ.items()
                   if k.startswith(_ENVIRONMENT_PREFIXES) and k != "TRNSIM_CACHE_DIR"}
    from trnsim.hardware.spec import fingerprint

    # the whole instance spec (host, chip, core): a what-if variant of any figure is another case
    payload = json.dumps({"model": [entry.name, entry.family, list(entry.build.classes), config],
                          "inputs": [batch, seq], "instance": instance,
                          "spec": fingerprint(hardware.instance(instance)), "options": options,
                          "environment": environment, "versions": versions,
                          "trnsim": _source_digest()}, sort_keys=True, default=repr)
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def _source_digest() -> str:
    """A digest of every trnsim source and data file (any of them may change a result)."""
    if not _SOURCE_DIGEST:
        from trnsim import __version__

        root = Path(__file__).resolve().parents[1]
        h = hashlib.sha256(__version__.encode())
        for path in sorted(p for p in root.rglob("*") if p.is_file()
                           and p.suffix not in (".pyc", ".pyo") and "__pycache__" not in p.parts):
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
        _SOURCE_DIGEST.append(h.hexdigest()[:16])
    return _SOURCE_DIGEST[0]


def _result_path(key: str) -> Path | None:
    from trnsim.compiler.cache import cache_dir  # not runtime.compile: it loads the simulator

    root = cache_dir()
    return root / f"bench-{key}.json" if root is not None else None


def cached_result(key: str | None) -> BenchResult | None:
    """The cached result of a case (`result_key`), or None on a miss or an unreadable entry."""
    path = _result_path(key) if key is not None else None
    if path is None or not path.exists():
        return None
    try:
        result = BenchResult(**json.loads(path.read_text()))
    except (OSError, TypeError, ValueError):
        return None
    result.cache_hit = True
    return result


def _store_result(key: str, result: BenchResult) -> None:
    from trnsim.compiler.cache import write_json

    path = _result_path(key)
    if path is not None:
        write_json(path, {**result.to_dict(), "cache_hit": False, "seconds": 0.0})


def _numerics(compiled, model, inputs) -> dict:
    import torch
    import torch.utils._pytree as pytree

    with torch.no_grad():
        eager = model(**inputs)
    out = compiled(**inputs)
    ref = [t.float() for t in pytree.tree_leaves(eager) if isinstance(t, torch.Tensor)]
    got = [t.float() for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
    worst = max(float((g - r).abs().max() / max(float(r.abs().max()), 1e-6))
                for g, r in zip(got, ref, strict=True))
    cosine = min(float(torch.nn.functional.cosine_similarity(g.flatten(), r.flatten(), dim=0))
                 for g, r in zip(got, ref, strict=True))
    return {"max_abs_error_over_output_scale": worst, "min_cosine_similarity": cosine}


def model_latency_ms(name: str, instance: str, batch: int, seq: int | None,
                     auto_cast: str | None = None, auto_cast_type: str = "bf16",
                     model_type: str | None = None, end_to_end: bool = True) -> float:
    """One call's latency: end to end through the framework (default), or device time."""
    result = run_case(name, batch, seq, instance, auto_cast=auto_cast,
                      auto_cast_type=auto_cast_type, model_type=model_type)
    return result.compared_ms if end_to_end else result.latency_ms


def run_matrix(models=DEFAULT_MODELS, instances=DEFAULT_INSTANCES, batches=DEFAULT_BATCHES,
               seqs: dict[str, int] | int | None = None, *, auto_cast: str | None = None,
               auto_cast_type: str = "bf16", check_numerics: bool = False, decode: bool = False,
               progress: Callable[[str], None] | None = None,
               lnc: int | None = None, tensor_parallel: int = 1,
               model_type: str | None = None, trace_dir: str | None = None
               ) -> list[BenchResult]:
    results = []
    entries = [zoo_model(name) for name in models]
    if decode:  # refuse an encoder before compiling anything
        for entry in entries:
            entry.require_causal_lm()
    for name, entry in zip(models, entries, strict=True):
        seq = seqs.get(name, entry.default_seq) if isinstance(seqs, dict) else (seqs or entry.default_seq)
        models_built: list = []

        def built(name=name, models_built=models_built):
            """The case's model, built once for all its cases, and only if one is not cached."""
            if not models_built:
                models_built.append(build_model(name, initialise=check_numerics))
            return models_built[0]
        for batch in batches:
            for instance in instances:
                if progress:
                    where = f" context {seq}" if decode else f" seq {seq}"
                    progress(f"{name} batch {batch}" + (where if entry.family != "vision" else "")
                             + (" decode" if decode else "") + f" on {instance}")
                results.append(run_case(name, batch, seq, instance, auto_cast=auto_cast,
                                        auto_cast_type=auto_cast_type,
                                        check_numerics=check_numerics, build=built,
                                        decode=decode, lnc=lnc,
                                        tensor_parallel=tensor_parallel,
                                        model_type=model_type, trace_dir=trace_dir))
    return results
