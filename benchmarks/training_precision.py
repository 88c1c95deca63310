"""fp32 vs bf16 (round-to-nearest-even) vs bf16 with stochastic rounding, on a training run.

    python benchmarks/training_precision.py [--steps 100] [--plot precision.png]

Trains a small GPT-2-shaped model (2 layers, width 64, built from a config with random weights)
on a synthetic next-token task (each sequence counts up modulo the vocabulary from a random
start) with plain SGD, as an unmodified torch-xla script under `python -m trnsim.run`, three
times: fp32; XLA_USE_BF16=1 with NEURON_RT_STOCHASTIC_ROUNDING_EN=0 (every write rounded to
nearest even); XLA_USE_BF16=1 with stochastic rounding (the runtime's default with that flag,
NEURON_RT_STOCHASTIC_ROUNDING_SEED=0). The numbers come from trnsim's numerics (every bf16
write rounded by `trnsim.numerics.cast`); timing is off (TRNSIM_XLA_TIMING=off): this measures
what the rounding does to learning, not speed. Prints the final losses (mean of the last 10
steps) as JSON; `--plot` writes the loss curves (PNG).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

RUNS = {"fp32": {}, "bf16_rne": {"XLA_USE_BF16": "1", "NEURON_RT_STOCHASTIC_ROUNDING_EN": "0"},
        "bf16_sr": {"XLA_USE_BF16": "1", "NEURON_RT_STOCHASTIC_ROUNDING_EN": "1",
                    "NEURON_RT_STOCHASTIC_ROUNDING_SEED": "0"}}
VOCAB, SEQ, BATCH, LR = 64, 32, 8, 0.05


def worker(steps: int) -> None:
    import torch
    import torch_xla.core.xla_model as xm
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=2,
                                     n_positions=SEQ, bos_token_id=0, eos_token_id=0,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config)
    device = xm.xla_device()
    model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    generator = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        start = torch.randint(0, VOCAB, (BATCH, 1), generator=generator)
        ids = (start + torch.arange(SEQ)) % VOCAB
        ids = ids.to(device)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        xm.mark_step()
        losses.append(loss.item())
    print("RESULT " + json.dumps(losses))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--plot", type=Path)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.steps)
        return
    src = Path(__file__).resolve().parents[1] / "src"
    curves = {}
    for name, env in RUNS.items():
        environ = {k: v for k, v in os.environ.items()
                   if k not in ("XLA_USE_BF16", "XLA_DOWNCAST_BF16",
                                "NEURON_RT_STOCHASTIC_ROUNDING_EN")}
        environ.update(env, TRNSIM_XLA_TIMING="off",
                       PYTHONPATH=os.pathsep.join([str(src), environ.get("PYTHONPATH", "")]))
        done = subprocess.run([sys.executable, "-m", "trnsim.run", __file__, "--worker",
                               "--steps", str(args.steps)], env=environ, capture_output=True,
                              text=True, check=False)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if done.returncode or not lines:
            raise SystemExit(f"{name} run failed:\n{done.stderr[-2000:]}")
        curves[name] = json.loads(lines[-1][7:])
    final = {name: sum(c[-10:]) / len(c[-10:]) for name, c in curves.items()}
    print(json.dumps({"steps": args.steps, "final_loss_mean_last_10": final,
                      "initial_loss": {n: c[0] for n, c in curves.items()}}, indent=2))
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        for name, c in curves.items():
            ax.plot(range(1, len(c) + 1), c, label=name)
        ax.set_xlabel("step")
        ax.set_ylabel("training loss")
        ax.set_title("small GPT-2, SGD: fp32 vs bf16 RNE vs bf16 stochastic rounding")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)


if __name__ == "__main__":
    main()
