"""One NeuronCore's share of a transformer layer, as a PyTorch module the training path runs.

Tensor parallelism as Megatron / NeuronX Distributed shard a layer: the attention heads and the
MLP's intermediate width are split over the TP ranks (ColumnParallelLinear for QKV and up/gate,
RowParallelLinear for the output and down projections), the hidden width is not. So one core's
share is an ordinary layer with `heads / tp` query heads, `max(1, kv_heads / tp)` key/value heads
(GQA replicates K/V when TP exceeds them) and `ffn / tp` intermediate width; its collectives
(the all-reduces after the row-parallel linears) are timed by the fabric model, not here.

Sequence parallelism (Megatron's, NxD's `sequence_parallel_enabled`) splits the tokens outside
the tensor-parallel region over the TP ranks: the norms, the residual adds and the layer's input
and output hold `seq / sp` tokens per core. An all-gather hands the projections the whole
sequence and a reduce-scatter returns the row-parallel outputs' shard (backward: the conjugates).
Their time is the fabric model's, so in the module each is a boundary at which the collective's
result arrives as device data, and what it reads stays a live tensor (the collective reads it
from HBM): the work on either side is timed and no collective's cost twice.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LayerShape:
    """The shapes of one core's share of one layer for one micro-batch."""

    hidden: int
    heads: int  # query heads on this core
    kv_heads: int  # key/value heads on this core
    head_dim: int
    ffn: int  # intermediate width on this core
    gated: bool  # SwiGLU (Llama) or a plain GELU MLP (BERT, GPT-2, ViT)
    norm: str  # "rms" or "layer"
    causal: bool
    rotary: bool
    micro_batch: int
    seq: int
    sp: int = 1  # sequence-parallel degree (the TP degree with SP, else 1)

    def key(self) -> str:
        return (f"h{self.hidden}-q{self.heads}-kv{self.kv_heads}-d{self.head_dim}-f{self.ffn}"
                f"-{'glu' if self.gated else 'mlp'}-{self.norm}-{'causal' if self.causal else 'full'}"
                f"-{'rope' if self.rotary else 'norope'}-b{self.micro_batch}-s{self.seq}"
                + (f"-sp{self.sp}" if self.sp > 1 else ""))

    @property
    def seq_shard(self) -> int:
        """Tokens per core outside the tensor-parallel region (the layer's input and output)."""
        return self.seq // self.sp


def _boundary():
    """An SP collective's boundary (module docstring): `cross(x, kept, shape)` is a tensor of
    `shape` (the all-gather's whole sequence as rows [tokens, hidden], or the reduce-scatter's
    shard [b, seq / sp, hidden]); backward, a gradient of x's shape. The result arrives as
    device data; the input (and the gradient arriving in backward) is kept live in `kept`.
    The TP region works on rows, so what a collective reads is a projection's own result, not
    a view of it that the compiler would copy out as an output."""
    import torch

    class Boundary(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, kept, shape):
            ctx.kept, ctx.shape = kept, x.shape
            kept.append(x)
            return torch.empty(shape, dtype=x.dtype, device=x.device)

        @staticmethod
        def backward(ctx, grad):
            ctx.kept.append(grad)
            return torch.empty(ctx.shape, dtype=grad.dtype, device=grad.device), None, None

    return Boundary.apply


def build_layer(shape: LayerShape):
    """The layer as a torch module (random weights; only its graph and shapes matter)."""
    import torch
    from torch import nn

    class RMSNorm(nn.Module):
        def __init__(self, width: int) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(width))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight

    def norm():
        return RMSNorm(shape.hidden) if shape.norm == "rms" else nn.LayerNorm(shape.hidden)

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            s = shape
            bias = s.norm == "layer"
            self.norm1, self.norm2 = norm(), norm()
            self.qkv = nn.Linear(s.hidden, (s.heads + 2 * s.kv_heads) * s.head_dim, bias=bias)
            self.out = nn.Linear(s.heads * s.head_dim, s.hidden, bias=bias)
            self.up = nn.Linear(s.hidden, s.ffn * (2 if s.gated else 1), bias=bias)
            self.down = nn.Linear(s.ffn, s.hidden, bias=bias)
            if s.rotary:
                angle = torch.arange(s.seq)[:, None] * (
                    10000.0 ** (-torch.arange(0, s.head_dim, 2) / s.head_dim))[None, :]
                angle = torch.cat([angle, angle], dim=-1)
                self.register_buffer("cos", angle.cos(), persistent=False)
                self.register_buffer("sin", angle.sin(), persistent=False)

        def rope(self, x):
            half = x.shape[-1] // 2
            rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
            return x * self.cos + rotated * self.sin

        def forward(self, x):
            s = shape
            if s.sp > 1:  # x holds seq / sp tokens (module docstring)
                self.kept = []
                cross, rows = _boundary(), (s.micro_batch * s.seq, s.hidden)
                attn = self.attention(cross(self.norm1(x), self.kept, rows))
                x = x + cross(attn, self.kept, x.shape)
                return x + cross(self.mlp(cross(self.norm2(x), self.kept, rows)), self.kept,
                                 x.shape)
            x = x + self.attention(self.norm1(x))
            return x + self.mlp(self.norm2(x))

        def attention(self, x):
            """x: [b, t, hidden], or with SP the whole sequence's rows [b * t, hidden]."""
            s = shape
            b, t = s.micro_batch, s.seq
            q, k, v = self.qkv(x).split(
                [s.heads * s.head_dim, s.kv_heads * s.head_dim, s.kv_heads * s.head_dim], dim=-1)
            q = q.reshape(b, t, s.heads, s.head_dim).transpose(1, 2)
            k = k.reshape(b, t, s.kv_heads, s.head_dim).transpose(1, 2)
            v = v.reshape(b, t, s.kv_heads, s.head_dim).transpose(1, 2)
            if s.rotary:
                q, k = self.rope(q), self.rope(k)
            if s.kv_heads != s.heads:
                k = k.repeat_interleave(s.heads // s.kv_heads, dim=1)
                v = v.repeat_interleave(s.heads // s.kv_heads, dim=1)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=s.causal)
            return self.out(a.transpose(1, 2).reshape(*x.shape[:-1], s.heads * s.head_dim))

        def mlp(self, x):
            h = self.up(x)
            if shape.gated:
                gate, up = h.chunk(2, dim=-1)
                h = torch.nn.functional.silu(gate) * up
            else:
                h = torch.nn.functional.gelu(h)
            return self.down(h)

    torch.manual_seed(0)
    return Layer()


@dataclass(frozen=True)
class HeadShape:
    """One core's share of what is not a layer: the token embedding (vocabulary split over TP,
    as NxD's ParallelEmbedding), the final norm, the LM head and the loss over its vocabulary
    shard (parallel cross-entropy). A vision transformer's (`patch` > 0): the patch embedding
    (a stride-`patch` convolution, with the class token and position embeddings), the final
    norm and the classifier over `vocab` labels on the class token, with its loss."""

    hidden: int
    vocab: int  # this core's vocabulary shard, or a classifier's labels
    norm: str
    micro_batch: int
    seq: int  # tokens (a vision model's: its patches plus the class token)
    patch: int = 0  # pixels per patch side; 0: a text model
    channels: int = 3
    sp: int = 1  # sequence-parallel degree: the embedding's output, the final norm on seq / sp

    def key(self) -> str:
        vision = f"-p{self.patch}c{self.channels}" if self.patch else ""
        return (f"head-h{self.hidden}-v{self.vocab}-{self.norm}-b{self.micro_batch}"
                f"-s{self.seq}{vision}" + (f"-sp{self.sp}" if self.sp > 1 else ""))

    @property
    def seq_shard(self) -> int:
        """Tokens per core of the embedding's output and the final norm (the layers' shard)."""
        return self.seq // self.sp

    @property
    def image_side(self) -> int:
        """Pixels per image side: `seq - 1` patches in a square grid."""
        return self.patch * round((self.seq - 1) ** 0.5)


def build_head(shape: HeadShape):
    """The embedding and the LM head with its loss. `forward(ids, hidden, labels)` gives (loss,
    embedded): `hidden` stands for the last layer's output; the caller hands `embedded` the
    gradient the first layer would hand back (so the embedding's backward runs as in the whole
    model, with no reduction of the measurement's own in front of it). For a vision model `ids`
    are the pixels [b, channels, side, side] and `labels` one class per image. With sequence
    parallelism `hidden` and `embedded` are token shards: the embedding's partial rows are
    reduce-scattered and the final norm's output all-gathered for the LM head (as the layers'
    boundaries, module docstring)."""
    import torch
    from torch import nn

    if shape.patch:
        return _vision_head(shape)

    class Head(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(shape.vocab, shape.hidden)
            self.norm = nn.LayerNorm(shape.hidden) if shape.norm == "layer" else None
            self.norm_weight = nn.Parameter(torch.ones(shape.hidden)) if self.norm is None \
                else None
            self.lm_head = nn.Linear(shape.hidden, shape.vocab, bias=False)

        def forward(self, ids, hidden, labels):
            b, t = ids.shape
            embedded = self.embed(ids.reshape(-1) if shape.sp > 1 else ids)  # SP: rows
            if self.norm is not None:
                h = self.norm(hidden)
            else:
                h = hidden * torch.rsqrt(hidden.pow(2).mean(-1, keepdim=True) + 1e-5) \
                    * self.norm_weight
            if shape.sp > 1:
                self.kept, cross = [], _boundary()
                embedded = cross(embedded, self.kept, hidden.shape)
                h = cross(h, self.kept, (b * t, shape.hidden))
            logits = self.lm_head(h).float()
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, shape.vocab),
                                                     labels.reshape(-1))
            return loss, embedded

    torch.manual_seed(0)
    return Head()


def _vision_head(shape: HeadShape):
    """ViT's embeddings (Hugging Face ViTEmbeddings: patch convolution, class token, position
    embeddings) and its classification head (final LayerNorm, a linear on the class token)."""
    import torch
    from torch import nn

    class VisionHead(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.patches = nn.Conv2d(shape.channels, shape.hidden, shape.patch, stride=shape.patch)
            self.cls = nn.Parameter(torch.zeros(1, 1, shape.hidden))
            self.position = nn.Parameter(torch.zeros(1, shape.seq, shape.hidden))
            self.norm = nn.LayerNorm(shape.hidden)
            self.classifier = nn.Linear(shape.hidden, shape.vocab)

        def forward(self, pixels, hidden, labels):
            x = self.patches(pixels).flatten(2).transpose(1, 2)
            cls = self.cls.expand(x.shape[0], -1, -1)
            embedded = torch.cat([cls, x], dim=1) + self.position
            logits = self.classifier(self.norm(hidden)[:, 0]).float()
            return torch.nn.functional.cross_entropy(logits, labels), embedded

    torch.manual_seed(0)
    return VisionHead()
