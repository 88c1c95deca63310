"""`trnsim train`: a zoo model's training step on the simulated device, without a script.

The step is what a torch-xla script runs (forward, loss, backward, optimizer, `mark_step`),
on the lazy device (`trnsim.runtime.xla`), so it is compiled and timed exactly as a user's
script is. Data parallel degree N is the timing mode: one rank runs, and each gradient
all-reduce is timed for N ranks on the instance's fabric (ranks of data parallelism are
identical, so one rank's step is every rank's). Weights are random and real (the device computes
values on CPU): pass `--layers` to time a shallower copy of a large model quickly, or
`--shapes-only` to time the whole model without values (`TRNSIM_XLA_VALUES=shapes`: the model
is built on the meta device and every tensor is a shape and a dtype, so host memory holds the
graphs, not the weights; no loss is computed).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

from trnsim.errors import InvalidArgumentError, UnknownNameError


@dataclass(frozen=True)
class TrainEntry:
    name: str
    cls: str  # transformers class with its training head
    config_cls: str
    config: dict
    kind: str  # "lm" (token ids -> labels) or "image" (pixels -> class)
    default_seq: int = 128

    def build(self, layers: int | None = None):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        import transformers

        torch.manual_seed(0)
        config = dict(self.config)
        if layers is not None:
            key = "n_layer" if "n_layer" in config else "num_hidden_layers"
            config[key] = layers
        model = getattr(transformers, self.cls)(getattr(transformers, self.config_cls)(**config))
        return model.train()

    def batch(self, micro_batch: int, seq: int, step: int) -> dict:
        import torch

        generator = torch.Generator().manual_seed(step)
        if self.kind == "image":
            return {"pixel_values": torch.randn(micro_batch, 3, 224, 224, generator=generator),
                    "labels": torch.randint(0, 1000, (micro_batch,), generator=generator)}
        vocab = self.config.get("vocab_size", 30522)
        ids = torch.randint(0, vocab, (micro_batch, seq), generator=generator)
        return {"input_ids": ids, "labels": ids}


_BERT_LARGE = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                   intermediate_size=4096, vocab_size=30522, max_position_embeddings=512)
TRAIN_ZOO: dict[str, TrainEntry] = {e.name: e for e in (
    TrainEntry("bert-large-pretrain", "BertForMaskedLM", "BertConfig", _BERT_LARGE, "lm"),
    TrainEntry("gpt2", "GPT2LMHeadModel", "GPT2Config",
               dict(n_embd=768, n_layer=12, n_head=12, vocab_size=50257, n_positions=1024), "lm"),
    TrainEntry("llama-3.2-1b", "LlamaForCausalLM", "LlamaConfig",
               dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                    num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                    tie_word_embeddings=True), "lm"),
    TrainEntry("vit-base-finetune", "ViTForImageClassification", "ViTConfig",
               dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                    intermediate_size=3072, image_size=224, patch_size=16, num_labels=1000),
               "image"),
)}
OPTIMIZERS = ("adamw", "sgd")


def train_entry(name: str) -> TrainEntry:
    try:
        return TRAIN_ZOO[name.strip().lower()]
    except KeyError:
        raise UnknownNameError("training model", name, TRAIN_ZOO) from None


def run_training(model: str, *, instance: str = "trn1.2xlarge", micro_batch: int = 1,
                 grad_accum: int = 1, seq: int | None = None, dtype: str = "fp32",
                 stochastic_rounding: bool | None = None, dp: int = 1, optimizer: str = "adamw",
                 steps: int = 3, layers: int | None = None,
                 progress: Callable[[int], None] | None = None, trace: str | None = None,
                 tensorboard: str | None = None, shapes_only: bool = False):
    """Train `model` for `steps` optimizer steps; returns the last step's `StepReport`.
    `trace`: also write the Perfetto trace of the last step to this file. `tensorboard`: log
    loss, step time, throughput and MFU of every step to TensorBoard event files in this
    directory (`trnsim.runtime.xla.tensorboard`). `shapes_only`: time the step without values
    (module docstring)."""
    from trnsim import hardware

    entry = train_entry(model)
    spec = hardware.instance(instance)
    if dtype not in ("fp32", "bf16"):
        raise InvalidArgumentError(f"dtype {dtype!r}: use fp32 or bf16 (XLA_USE_BF16)")
    if optimizer not in OPTIMIZERS:
        raise UnknownNameError("optimizer", optimizer, OPTIMIZERS)
    for what, value in (("micro_batch", micro_batch), ("grad_accum", grad_accum),
                        ("dp", dp), ("steps", steps)):
        if value < 1:
            raise InvalidArgumentError(f"{what} must be at least 1, got {value}")
    if shapes_only and tensorboard is not None:
        raise InvalidArgumentError("--tensorboard logs each step's loss, which --shapes-only "
                                   "does not compute (no values)")
    cores = spec.logical_cores()
    if dp > cores * 512:
        raise InvalidArgumentError(f"dp {dp} is more NeuronCores than 512 {spec.name} hold")
    os.environ["TRNSIM_INSTANCE"] = spec.name
    os.environ["TRNSIM_XLA_SIMULATED_WORLD"] = str(dp)
    if dtype == "bf16":
        os.environ["XLA_USE_BF16"] = "1"
    if stochastic_rounding is not None:
        os.environ["NEURON_RT_STOCHASTIC_ROUNDING_EN"] = "1" if stochastic_rounding else "0"
    from trnsim.runtime.xla import api

    writer = _tensorboard_writer(tensorboard)  # TensorBoard missing: an error before any work
    with _values_mode(shapes_only), _graph_traces(trace is not None) as trace_dir:
        api.register_device()
        api.install()
        from trnsim.runtime.xla.report import step_report, write_step_trace

        try:
            _train_steps(entry, micro_batch, grad_accum, seq or entry.default_seq, optimizer,
                         steps, layers, progress, writer, shapes_only)
        finally:
            if writer is not None:
                from trnsim.runtime.xla.tensorboard import unregister

                unregister(writer)
                writer.close()
        if trace_dir is not None:
            write_step_trace(trace, trace_dir)
        return step_report(samples_per_step=micro_batch * grad_accum)


@contextmanager
def _values_mode(shapes_only: bool):
    """`shapes_only` for this run alone: the device's mode and TRNSIM_XLA_VALUES are restored
    after it, so a later run in the same process computes values again."""
    if not shapes_only:
        yield
        return
    from trnsim.runtime.xla.device import DEVICE, VALUES_ENV

    before, mode = os.environ.get(VALUES_ENV), DEVICE.shapes_only
    os.environ[VALUES_ENV] = "shapes"
    DEVICE.shapes_only = True  # the device was made on import, before the variable was set
    try:
        yield
    finally:
        DEVICE.shapes_only = mode
        if before is None:
            os.environ.pop(VALUES_ENV, None)
        else:
            os.environ[VALUES_ENV] = before


def _train_steps(entry: TrainEntry, micro_batch: int, grad_accum: int, seq: int, optimizer: str,
                 steps: int, layers: int | None, progress, writer,
                 shapes_only: bool = False) -> None:
    import torch
    import torch_xla.core.xla_model as xm

    with torch.device("meta") if shapes_only else nullcontext():
        net = entry.build(layers)  # shapes only: no weight is ever allocated
    device = xm.xla_device()
    net.to(device)
    opt = (torch.optim.AdamW(net.parameters(), lr=1e-4) if optimizer == "adamw" else
           torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9))
    if writer is not None:
        from trnsim.runtime.xla.tensorboard import LOSS_TAG, register, step_count

        register(writer, micro_batch * grad_accum)
    for step in range(steps):
        for micro in range(grad_accum):
            batch = {k: v.to(device) for k, v in
                     entry.batch(micro_batch, seq, step * grad_accum + micro).items()}
            loss = net(**batch).loss / grad_accum
            loss.backward()
        xm.optimizer_step(opt)
        opt.zero_grad()
        xm.mark_step()
        if writer is not None:  # the step ran: reading its loss cuts no graph
            writer.add_scalar(LOSS_TAG, loss.item() * grad_accum, step_count())
        if progress is not None:
            progress(step)


@contextmanager
def _graph_traces(wanted: bool):
    """While training, a temporary directory each compiled graph's trace is written to (the
    executor's profile directory), removed afterwards; None when no trace is wanted."""
    if not wanted:
        yield None
        return
    from trnsim.runtime.xla.executor import PROFILE_ENV

    directory = tempfile.mkdtemp(prefix="trnsim-train-trace-")
    os.environ[PROFILE_ENV] = directory
    try:
        yield directory
    finally:
        os.environ.pop(PROFILE_ENV, None)
        shutil.rmtree(directory, ignore_errors=True)


def _tensorboard_writer(directory: str | None):
    """TensorBoard's own writer on `directory` (registered for trnsim's step figures once the
    device is installed)."""
    if directory is None:
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise InvalidArgumentError("--tensorboard needs TensorBoard: pip install "
                                   "'trnsim[tensorboard]'") from None
    return SummaryWriter(log_dir=directory)
