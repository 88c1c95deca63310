"""Run under `python -m trnsim.run backward_families.py [family ...]`: the backward of each op
family, recorded on the lazy device and computed by trnsim's compiled program on the simulator,
against `torch.autograd` on CPU. Prints JSON: family -> largest error relative to the
reference's largest magnitude."""

import json
import sys

import torch
import torch.nn.functional as F
import torch_xla.core.xla_model as xm

from trnsim.runtime.xla.collective import instance
from trnsim.runtime.xla.device import DEVICE
from trnsim.runtime.xla.functional import device_values

torch.manual_seed(0)
device = xm.xla_device()
DEVICE.keep_values = True  # dropout masks become inputs of the functional run


def attention(q, k, v):
    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    causal = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    return scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v


def sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def sdpa_full(q, k, v):
    return F.scaled_dot_product_attention(q, k, v)


def sdpa_grouped(q, k, v):
    """Grouped K/V as the planner's layer spells it: heads repeated, then causal SDPA."""
    groups = q.shape[1] // k.shape[1]
    k, v = (t.repeat_interleave(groups, dim=1) for t in (k, v))
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def sdpa_gqa(q, k, v):
    """Grouped K/V as Hugging Face's sdpa attention passes it without a mask."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def rms_norm(x, w):
    """The planner's RMSNorm: its backward broadcasts the mean's gradient along the rows."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def cross_entropy(logits):
    target = torch.tensor([1, 0, 4, 4, 2, 3])
    return F.cross_entropy(logits, target.to(logits.device), ignore_index=3).reshape(1)


def embedding(w):
    ids = torch.tensor([[1, 3, 3], [0, 9, 1]])
    return F.embedding(ids.to(w.device), w)


def reshapes(x, y):
    a = x.reshape(2, 3, 4).transpose(0, 2).permute(1, 0, 2).contiguous().view(3, -1)
    return torch.cat([a[:, 1:5] * 2, y.t()[:3, :2]], dim=1).unsqueeze(0).expand(2, 3, 6)


def reductions(x):
    return torch.stack([x.sum(), x.mean(dim=0).sum(), x.amax(dim=1).sum(),
                        x.var(dim=1).sum(), x.norm()])


def dropout(x, w):
    return F.dropout(x @ w, p=0.3, training=True)


def patch_embedding(x, w, b):  # ViT's: kernel = stride
    return F.conv2d(x, w, b, stride=4)


def conv_strided(x, w, b):  # ResNet's downsampling 3x3; the last input row is past every window
    return F.conv2d(x, w, b, stride=2, padding=1)


def conv_dilated(x, w):
    return F.conv2d(x, w, stride=(1, 2), padding=(2, 1), dilation=2)


def conv_grouped(x, w):
    return F.conv2d(x, w, stride=2, padding=1, groups=2)


def conv_depthwise(x, w, b):
    return F.conv2d(x, w, b, padding=1, groups=4)


def conv_over_padded(x, w):  # more padding than the kernel spans: the transpose crops
    return F.conv2d(x, w, stride=2, padding=2)


def conv1d(x, w, b):
    return F.conv1d(x, w, b, stride=2, padding=1)


def conv_frozen_input(w, b):  # pixels need no gradient: the backward's output_mask drops it
    x = torch.linspace(-1, 1, 2 * 3 * 8 * 8).reshape(2, 3, 8, 8).to(w.device)
    return F.conv2d(x, w, b, stride=4)


def layer_norm_frozen_input(w, b):  # the decomposed backward's output_mask drops grad input
    x = torch.linspace(-2, 2, 3 * 16).reshape(3, 16).to(w.device)
    return F.layer_norm(x, (16,), w, b, 1e-5)


FAMILIES = {
    "linear": (lambda x, w, b: F.linear(x, w, b), [(5, 8), (16, 8), (16,)]),
    "matmul": (lambda x, y: torch.matmul(x, y), [(2, 5, 8), (8, 6)]),
    "bmm": (lambda x, y: torch.bmm(x, y), [(3, 4, 8), (3, 8, 5)]),
    "elementwise": (lambda x, y: (x * y + x / (y.abs() + 1) - torch.exp(x * 0.5)
                                  + torch.rsqrt(y * y + 1) + torch.maximum(x, y)),
                    [(4, 6), (6,)]),
    "gelu": (lambda x: F.gelu(x), [(4, 16)]),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), [(4, 16)]),
    "tanh": (lambda x: torch.tanh(x), [(4, 16)]),
    "silu": (lambda x: F.silu(x), [(4, 16)]),
    "softmax": (lambda x: torch.softmax(x, dim=-1), [(4, 16)]),
    "log_softmax": (lambda x: torch.log_softmax(x, dim=-1), [(4, 16)]),
    "layer_norm": (layer_norm, [(2, 3, 16), (16,), (16,)]),
    "embedding": (embedding, [(10, 8)]),
    "cross_entropy": (cross_entropy, [(6, 5)]),
    "attention": (attention, [(2, 6, 8), (2, 6, 8), (2, 6, 8)]),
    "rms_norm": (rms_norm, [(2, 24, 160), (160,)]),
    "sdpa": (sdpa, [(1, 2, 6, 8), (1, 2, 6, 8), (1, 2, 6, 8)]),
    "sdpa_full": (sdpa_full, [(2, 3, 130, 16), (2, 3, 130, 16), (2, 3, 130, 16)]),
    "sdpa_grouped": (sdpa_grouped, [(1, 4, 140, 32), (1, 2, 140, 32), (1, 2, 140, 32)]),
    "sdpa_gqa": (sdpa_gqa, [(2, 6, 20, 8), (2, 2, 20, 8), (2, 2, 20, 8)]),
    "reductions": (reductions, [(4, 6)]),
    "reshapes": (reshapes, [(6, 4), (4, 3)]),
    "dropout": (dropout, [(8, 16), (16, 16)]),
    "conv_patch": (patch_embedding, [(2, 3, 8, 8), (6, 3, 4, 4), (6,)]),
    "conv_strided": (conv_strided, [(2, 3, 9, 8), (5, 3, 3, 3), (5,)]),
    "conv_dilated": (conv_dilated, [(1, 3, 9, 9), (4, 3, 3, 2)]),
    "conv_grouped": (conv_grouped, [(2, 4, 7, 7), (6, 2, 3, 3)]),
    "conv_depthwise": (conv_depthwise, [(2, 4, 6, 6), (4, 1, 3, 3), (4,)]),
    "conv_over_padded": (conv_over_padded, [(1, 2, 6, 6), (3, 2, 1, 1)]),
    "conv1d": (conv1d, [(2, 3, 10), (4, 3, 3), (4,)]),
    "conv_frozen_input": (conv_frozen_input, [(6, 3, 4, 4), (6,)]),
    "layer_norm_frozen_input": (layer_norm_frozen_input, [(16,), (16,)]),
}


def check(name: str) -> float:
    fn, shapes = FAMILIES[name]
    host = [torch.randn(s, requires_grad=True) for s in shapes]
    seed = torch.seed() % 1000
    torch.manual_seed(seed)
    out = fn(*host)
    upstream = torch.randn(out.shape)
    (out * upstream).sum().backward()
    want = [out.detach()] + [h.grad for h in host]

    params = [h.detach().clone().to(device).requires_grad_(True) for h in host]
    torch.manual_seed(seed)  # the same dropout mask as the reference drew
    out_dev = fn(*params)
    (out_dev * upstream.to(device)).sum().backward()
    got = device_values([out_dev] + [p.grad for p in params], instance())
    scale = max(float(w.abs().max()) for w in want)
    return max(float((g - w).abs().max()) for g, w in zip(got, want, strict=True)) / scale


names = sys.argv[1:] or list(FAMILIES)
errors = {}
for family in names:
    try:
        errors[family] = check(family)
    except Exception as error:  # the test reports which family failed and why
        errors[family] = f"{type(error).__name__}: {error}"
print("RESULT " + json.dumps(errors))
