"""Training on the simulated device: torch-xla's lazy device, served to unmodified scripts.

    python -m trnsim.run train.py          # `import torch_xla` is served by `api`
    torchrun --nproc_per_node=4 -m trnsim.run train.py

`lazy` records ATen calls on "xla" tensors (a `__torch_dispatch__` subclass; why, in its
docstring), `device` cuts graphs at `mark_step` and host reads, `graph` keys them,
`executor` compiles each distinct graph once (memory + disk cache) through `translate` (the
one adapter to trnsim's compiler) and times it on the instruction-level simulator;
`collective` reduces across data-parallel ranks; `report` builds the step report.
Numbers: PyTorch computes every value on CPU as the ops are recorded (fp32 exactly as eager;
bf16 with trnsim's rounding, see `precision`); the simulator gives the time.
"""
