"""A small Llama-shaped model trained data parallel (timing mode: one rank simulated, its
gradient all-reduce timed for $TRNSIM_XLA_SIMULATED_WORLD ranks), run by `python -m
trnsim.run`; prints the last step's report."""

import json
import os

import torch
import torch_xla.core.xla_model as xm
import transformers

config = json.loads(os.environ["MODEL_CONFIG"])
micro, seq = int(os.environ["MICRO_BATCH"]), int(os.environ["SEQ"])
torch.manual_seed(0)
model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**config)).train()
device = xm.xla_device()
model.to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(2):
    ids = torch.randint(0, config["vocab_size"], (micro, seq),
                        generator=torch.Generator().manual_seed(step)).to(device)
    model(input_ids=ids, labels=ids).loss.backward()
    xm.optimizer_step(optimizer)
    optimizer.zero_grad()
    xm.mark_step()
from trnsim.runtime.xla.report import step_report  # noqa: E402

print("RESULT " + json.dumps(step_report(samples_per_step=micro).to_dict()))
