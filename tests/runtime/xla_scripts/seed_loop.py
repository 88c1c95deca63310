"""Run under `python -m trnsim.run seed_loop.py bert|gpt2`: the Trn1 launch material's loop,
unmodified, on a small model; prints JSON (losses, eager fp32 losses on CPU, gradients against
eager fp32, caches). Under TRNSIM_XLA_VALUES=simulated every graph's values (the losses, the
gradients, the updated weights) are the simulator's, computed by trnsim's compiled kernels."""

import copy
import json
import sys

import torch
import transformers

kind = sys.argv[1]
torch.manual_seed(0)
if kind == "bert":
    config = transformers.BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64,
                                     max_position_embeddings=32, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0)
    model = transformers.BertForMaskedLM(config)
else:
    config = transformers.GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=2,
                                     n_positions=32, bos_token_id=0, eos_token_id=0,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config)
model.train()
batches = [torch.randint(0, 128, (4, 16))] * 4  # one batch, learnt: the loss must fall
train_loader = [(b, b) for b in batches]


def loss_fn(output, target):
    logits = output.logits
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             target.reshape(-1))


# eager fp32 reference for the first step's gradients (dropout off: eager CPU draws its masks
# through aten.dropout, the device through aten.native_dropout, which use the generator
# differently)
eager = copy.deepcopy(model)
torch.manual_seed(1)
loss_fn(eager(batches[0]), batches[0]).backward()
reference = {n: p.grad.clone() for n, p in eager.named_parameters() if p.grad is not None}


def eager_losses(model) -> list[float]:
    """The loop's losses in eager fp32 PyTorch on CPU."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for data, target in train_loader:
        loss = loss_fn(model(data), target)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


cpu_losses = eager_losses(copy.deepcopy(model))

import torch_xla  # noqa: E402,F401 - served by trnsim
import torch_xla.core.xla_model as xm  # noqa: E402

from trnsim.runtime.xla.device import DEVICE  # noqa: E402

torch.manual_seed(1)
device = xm.xla_device()
model.to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
losses, grad_error = [], None
for data, target in train_loader:
    data, target = data.to(device), target.to(device)
    output = model(data)
    loss = loss_fn(output, target)
    loss.backward()
    if grad_error is None:  # one host read of every gradient (one graph)
        names = [n for n, _ in model.named_parameters() if n in reference]
        params = dict(model.named_parameters())
        flat = torch.cat([params[n].grad.reshape(-1) for n in names]).cpu()
        want = torch.cat([reference[n].reshape(-1) for n in names])
        grad_error = float((flat - want).abs().max() / want.abs().max())
    optimizer.step()
    xm.mark_step()
    optimizer.zero_grad()
    losses.append(loss.item())
print("RESULT " + json.dumps({"losses": losses, "cpu_losses": cpu_losses,
                              "grad_error": grad_error,
                              "cache": [g.cache for g in DEVICE.graphs if g.why == "mark_step"],
                              "step_ns": DEVICE.graphs[-1].compiled.device_ns}))
