"""Compile options and the neuronx-cc flags trnsim honours (``NEURON_CC_FLAGS``).

trnsim.trace's keyword arguments and the flags a torch-neuronx user already sets mean the same
thing here. Precedence: explicit keyword arguments > NEURON_CC_FLAGS > the compiler's defaults:
neuronx-cc's ``--auto-cast matmult --auto-cast-type bf16 -O2`` on Trainium and Inferentia2, and
neuron-cc's ``--fast-math all`` (every fp32 operator cast to bf16) on Inferentia (inf1), whose
``--fast-math`` / ``--fp32-cast`` values are read too. ``--model-type`` defaults to
``transformer``, what torch-neuronx has passed for every model since Neuron 2.14
(release-notes/components/pytorch.rst, 09/15/2023); neuronx-cc's own default, ``generic``, does
not fuse attention (`MODEL_TYPES`). neuron-cc (Inferentia, NeuronCore-v1) has no
``--model-type`` (compiler/neuron-cc/command-line-reference) and no fused attention: its models
are always ``generic``, and a ``transformer`` asked of it is listed as ignored. Flags trnsim
does not model are listed in `CompileOptions.ignored_flags` (and shown to the user), never
silently dropped; a malformed value of a flag trnsim does model is an error. Optimisation
levels (``-O1``/``-O2``/``-O3``, ``--optlevel N``, ``trace(optlevel=N)``) are checked and listed
there too: trnsim's compiler has one pass pipeline (`trnsim.compiler.passes.PIPELINE`), so no
level changes what it produces.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from typing import Any

from trnsim.errors import InvalidArgumentError

AUTO_CAST_MODES = ("none", "matmult", "all")
# neuronx-cc's --auto-cast-type names and the trnsim dtype each one means.
AUTO_CAST_TYPES = {"bf16": "bfloat16", "fp16": "float16", "tf32": "tfloat32",
                   "fp8_e4m3": "float8_e4m3"}
OPT_LEVELS = (1, 2, 3)
# neuronx-cc --model-type values and what each changes in trnsim's pipeline: ``transformer``
# fuses attention (QK^T, scale, mask, softmax, PV in one kernel); ``generic`` (neuronx-cc's own
# default, compiler/neuronx-cc/api-reference-guide) does not: the scores are a tensor between
# separate matmul and softmax kernels. ``unet-inference`` is generic for everything trnsim models.
MODEL_TYPES = ("generic", "transformer", "unet-inference")
DEFAULT_MODEL_TYPE = "transformer"  # torch-neuronx's default flag since Neuron 2.14
MODEL_TYPE_DEFAULT_SINCE_SDK = (2, 14)
FLAGS_ENV = "NEURON_CC_FLAGS"
# Weight storage dtypes of weight-only quantization (trnsim.compiler.passes.quantize).
QUANTIZE_DTYPES = ("int8",)

# Flags neuronx-cc accepts that change nothing trnsim simulates (yet); kept, reported, ignored.
_KNOWN_IGNORED = ("--distribution-strategy", "--enable-mixed-precision-accumulation",
                  "--disable-mixed-precision-accumulation", "--enable-fast-context-switch",
                  "--enable-fast-loading-neuron-binaries", "--output", "--logfile", "--verbose",
                  "--target", "--framework", "--enable-saturate-infinity", "--retry_failed_compilation")


@dataclass(frozen=True)
class CompileOptions:
    """Everything that changes what the compiler produces (part of the compile-cache key)."""

    instance: str = "inf2.xlarge"  # a name, or an InstanceSpec (the name is kept, the spec travels)
    cores: int = 1
    auto_cast: str | None = None  # None: the instance's compiler's default (`default_auto_cast`)
    auto_cast_type: str = "bf16"
    model_type: str | None = None  # None: the instance's compiler's default (`default_model_type`)
    lnc: int | None = None
    # ranks each model copy is split over (tensor parallelism); None: 1 if the model fits one
    # core's share of HBM, else the fewest of `cores` that hold it (see passes.memory)
    tensor_parallel: int | None = None
    # neuron-cc's --neuroncore-pipeline-cores (Inferentia only): stages over that many cores
    pipeline_cores: int | None = None
    # weight-only quantization ("int8": linear weights stored int8, dequantized on chip, as NxD
    # Inference's quantization_dtype and transformers-neuronx's QuantizationConfig); None: off
    quantize: str | None = None
    dump_after: tuple[str, ...] = ()
    ignored_flags: tuple[str, ...] = field(default=(), compare=False)
    # the resolved `hardware.InstanceSpec` of `instance`: looked up once, read by every pass
    spec: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.instance, str):  # given an InstanceSpec
            object.__setattr__(self, "spec", self.instance)
            object.__setattr__(self, "instance", self.instance.name)
        elif self.spec is None or self.spec.name != self.instance:
            from trnsim.hardware import instance as lookup

            object.__setattr__(self, "spec", lookup(self.instance))
        if self.auto_cast is None:
            object.__setattr__(self, "auto_cast", default_auto_cast(self.spec))
        if self.auto_cast not in AUTO_CAST_MODES:
            raise InvalidArgumentError(f"auto_cast={self.auto_cast!r}: expected one of "
                                       f"{', '.join(AUTO_CAST_MODES)}")
        if self.auto_cast_type not in AUTO_CAST_TYPES:
            raise InvalidArgumentError(f"auto_cast_type={self.auto_cast_type!r}: expected one of "
                                       f"{', '.join(AUTO_CAST_TYPES)}")
        if self.model_type is not None and self.model_type not in MODEL_TYPES:
            raise InvalidArgumentError(f"model_type={self.model_type!r}: expected one of "
                                       f"{', '.join(MODEL_TYPES)}")
        if self.model_type is None:
            object.__setattr__(self, "model_type", default_model_type(self.spec))
        elif self.model_type != "generic" and self.spec.chip.core.version == 1:
            object.__setattr__(self, "ignored_flags", (
                *self.ignored_flags, f"--model-type={self.model_type} (neuron-cc has none)"))
            object.__setattr__(self, "model_type", "generic")
        if not isinstance(self.cores, int) or self.cores < 1:
            raise InvalidArgumentError(f"cores={self.cores!r}: expected a positive integer")
        if self.lnc not in (None, 1, 2):
            raise InvalidArgumentError(f"lnc={self.lnc!r}: expected 1 or 2")
        if self.pipeline_cores is not None and (not isinstance(self.pipeline_cores, int)
                                                or self.pipeline_cores < 1):
            raise InvalidArgumentError(f"pipeline_cores={self.pipeline_cores!r}: expected a "
                                       f"positive integer")
        if self.quantize is not None and self.quantize not in QUANTIZE_DTYPES:
            raise InvalidArgumentError(f"quantize={self.quantize!r}: weight-only quantization "
                                       f"supports {', '.join(QUANTIZE_DTYPES)}")
        tp = self.tensor_parallel
        if tp is not None and (not isinstance(tp, int) or tp < 1 or self.cores % tp):
            raise InvalidArgumentError(f"tensor_parallel={tp!r}: expected a positive integer that "
                                       f"divides cores={self.cores} (cores = copies x ranks)")

    @property
    def fuses_attention(self) -> bool:
        return self.model_type == "transformer"

    @property
    def cast_dtype(self) -> str | None:
        """The trnsim dtype auto-cast converts fp32 to, or None when auto-cast is off."""
        return None if self.auto_cast == "none" else AUTO_CAST_TYPES[self.auto_cast_type]

    def key(self) -> dict[str, Any]:
        """The fields that change the compiled result (for cache keys and reports)."""
        return {"instance": self.instance, "cores": self.cores, "auto_cast": self.auto_cast,
                "auto_cast_type": self.auto_cast_type, "lnc": self.lnc,
                "model_type": self.model_type,
                "tensor_parallel": self.tensor_parallel, "pipeline_cores": self.pipeline_cores,
                **({"quantize": self.quantize} if self.quantize else {})}


def default_model_type(spec) -> str:
    """The --model-type the instance's compiler uses when not told (`spec`: an InstanceSpec):
    ``transformer`` as torch-neuronx passes it to neuronx-cc (module doc); ``generic`` for
    neuron-cc on NeuronCore-v1, which has no fused-attention mode."""
    return "generic" if spec.chip.core.version == 1 else DEFAULT_MODEL_TYPE


def default_auto_cast(spec) -> str:
    """What the instance's compiler casts when not told (`spec`: an InstanceSpec): torch-neuron's
    neuron-cc (Inferentia, NeuronCore-v1) defaults to ``--fast-math all``, "cast all FP32
    operators to BF16" (compiler/neuron-cc/command-line-reference); neuronx-cc as torch-neuronx
    runs it casts the matmuls (``--auto-cast matmult``)."""
    return "all" if spec.chip.core.version == 1 else "matmult"


# neuron-cc's casting values (--fast-math takes several, e.g. "fp32-cast-matmult no-fast-relayout";
# --fp32-cast one) as (auto_cast, auto_cast_type); None: a transpose choice trnsim does not model
_NEURON_CC_CASTS: dict[str, tuple[str, str] | None] = {
    "all": ("all", "bf16"), "none": ("none", "bf16"),
    "fp32-cast-all": ("all", "bf16"), "fp32-cast-all-fp16": ("all", "fp16"),
    "fp32-cast-matmult": ("matmult", "bf16"), "fp32-cast-matmult-bf16": ("matmult", "bf16"),
    "fp32-cast-matmult-fp16": ("matmult", "fp16"), "fast-relayout": None,
    "no-fast-relayout": None}
_FP32_CAST = {"all": ("all", "bf16"), "matmult": ("matmult", "bf16"),
              "matmult-bf16": ("matmult", "bf16"), "matmult-fp16": ("matmult", "fp16"),
              "all-fp16": ("all", "fp16")}


def parse_cc_flags(text: str) -> dict[str, Any]:
    """Parse a NEURON_CC_FLAGS string into CompileOptions fields (only the flags trnsim models).

    Accepts ``--auto-cast X`` and ``--auto-cast=X``, ``--auto-cast-type X``, ``-O1``/``-O 2``/
    ``--optlevel 3``/``--optlevel=3`` (checked, then ignored: see the module doc), ``-lnc 2``/
    ``--lnc=2``/``--logical-nc-config 2``, and neuron-cc's (Inferentia)
    ``--neuroncore-pipeline-cores N``, ``--fast-math V [V...]`` and ``--fp32-cast V``
    (--fp32-cast wins over --fast-math, as in neuron-cc). Returns
    the recognised fields plus ``ignored_flags`` (a tuple of the flags that have no effect here).
    """
    try:
        tokens = shlex.split(text or "")
    except ValueError as exc:
        raise InvalidArgumentError(f"{FLAGS_ENV}={text!r}: {exc}") from None
    fields: dict[str, Any] = {}
    ignored: list[str] = []
    fast_math: dict[str, str] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        flag, eq, inline = token.partition("=")
        if flag.startswith("-O") and len(flag) > 2 and not eq:  # -O1 / -O2 / -O3: checked, no effect
            _optlevel(flag[2:], token)
            ignored.append(token)
            i += 1
            continue
        if flag == "--fast-math":
            values = [inline] if eq else []
            while not eq and i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
                values.append(tokens[i + 1])
                i += 1
            i += 1
            fast_math = _fast_math(values, ignored)
            continue
        name = _CANONICAL.get(flag)
        if name is None:
            ignored.append(token)
            if flag in _KNOWN_IGNORED and not eq and i + 1 < len(tokens) \
                    and not tokens[i + 1].startswith("-"):
                ignored.append(tokens[i + 1])
                i += 1
            i += 1
            continue
        if eq:
            value = inline
        elif i + 1 < len(tokens):
            value = tokens[i + 1]
            i += 1
        else:
            raise InvalidArgumentError(f"{FLAGS_ENV}: {flag} needs a value")
        i += 1
        if name == "auto_cast":
            fields[name] = _choice(value, AUTO_CAST_MODES, flag)
        elif name == "auto_cast_type":
            fields[name] = _choice(value, tuple(AUTO_CAST_TYPES), flag)
        elif name == "optlevel":
            _optlevel(value, f"{flag} {value}")
            ignored.append(f"{flag} {value}" if not eq else token)
        elif name == "model_type":
            fields[name] = _choice(value, MODEL_TYPES, flag)
        elif name == "lnc":
            fields[name] = _int_choice(value, (1, 2), flag)
        elif name == "pipeline_cores":
            fields[name] = _positive(value, flag)
        elif name == "fp32_cast":
            fields["auto_cast"], fields["auto_cast_type"] = _FP32_CAST[
                _choice(value, tuple(_FP32_CAST), flag)]
    for key, value in fast_math.items():
        fields.setdefault(key, value)
    fields["ignored_flags"] = tuple(ignored)
    return fields


def _fast_math(values: list[str], ignored: list[str]) -> dict[str, str]:
    if not values:
        raise InvalidArgumentError(f"{FLAGS_ENV}: --fast-math needs a value")
    out: dict[str, str] = {}
    for value in values:
        cast = _NEURON_CC_CASTS[_choice(value, tuple(_NEURON_CC_CASTS), "--fast-math")]
        if cast is None:
            ignored.append(f"--fast-math {value}")
        else:
            out["auto_cast"], out["auto_cast_type"] = cast
    return out


_CANONICAL = {"--auto-cast": "auto_cast", "--auto-cast-type": "auto_cast_type",
              "-O": "optlevel", "--optlevel": "optlevel", "-lnc": "lnc", "--lnc": "lnc",
              "--logical-nc-config": "lnc", "--neuroncore-pipeline-cores": "pipeline_cores",
              "--fp32-cast": "fp32_cast", "--model-type": "model_type"}


def _choice(value: str, allowed: tuple[str, ...], flag: str) -> str:
    v = value.strip().lower()
    if v not in allowed:
        raise InvalidArgumentError(f"{FLAGS_ENV}: {flag} {value!r}: expected one of "
                                   f"{', '.join(allowed)}")
    return v


def _int_choice(value: str, allowed: tuple[int, ...], flag: str) -> int:
    try:
        v = int(value)
    except ValueError:
        v = -1
    if v not in allowed:
        raise InvalidArgumentError(f"{FLAGS_ENV}: {flag} {value!r}: expected one of "
                                   f"{', '.join(map(str, allowed))}")
    return v


def _positive(value: str, flag: str) -> int:
    try:
        v = int(value)
    except ValueError:
        v = 0
    if v < 1:
        raise InvalidArgumentError(f"{FLAGS_ENV}: {flag} {value!r}: expected a positive integer")
    return v


def _optlevel(value: str, token: str) -> int:
    try:
        level = int(value)
    except ValueError:
        level = -1
    if level not in OPT_LEVELS:
        raise InvalidArgumentError(f"{FLAGS_ENV}: {token!r}: optimisation level must be 1, 2 or 3")
    return level


def options_from_env(env: dict[str, str] | None = None, **explicit: Any) -> CompileOptions:
    """CompileOptions from NEURON_CC_FLAGS, overridden by explicit (non-None) keyword arguments."""
    env = os.environ if env is None else env
    fields = parse_cc_flags(env.get(FLAGS_ENV, ""))
    optlevel = explicit.pop("optlevel", None)
    if optlevel is not None:  # torch_neuronx's keyword: checked, no effect (module doc)
        _optlevel(str(optlevel), f"optlevel={optlevel!r}")
        fields["ignored_flags"] = (*fields["ignored_flags"], f"optlevel={optlevel}")
    unknown = set(explicit) - set(CompileOptions.__dataclass_fields__)
    if unknown:
        raise InvalidArgumentError(f"unknown compile option(s): {', '.join(sorted(unknown))}")
    fields.update({k: v for k, v in explicit.items() if v is not None})
    if "dump_after" in fields and isinstance(fields["dump_after"], str):
        fields["dump_after"] = (fields["dump_after"],)
    return CompileOptions(**fields)
