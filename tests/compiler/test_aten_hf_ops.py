"""Translations Hugging Face models need beyond the common set: in-place slice writes as
functional scatters (BART's shift_tokens_right), ~mask (DeBERTa-v2), 1-D adaptive pooling
(Swin), reshaping restrides, group norm and weight norm (wav2vec2), bilinear resizing (BEiT,
segmentation heads); each checked against eager PyTorch on both capture paths."""

import numpy as np
import pytest

from trnsim.compiler.interpret import evaluate

torch = pytest.importorskip("torch")


class ShiftRight(torch.nn.Module):
    def forward(self, ids):
        shifted = ids.new_zeros(ids.shape)
        shifted[:, 1:] = ids[:, :-1].clone()
        shifted[:, 0] = 7
        shifted.masked_fill_(shifted == 3, 0)
        return shifted * 2


class Bits(torch.nn.Module):
    def forward(self, mask, ints, small):
        return (~mask).to(torch.int32) + (~ints) * 3, ~small


class Pool1d(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = torch.nn.AdaptiveAvgPool1d(1)
        self.pool3 = torch.nn.AdaptiveAvgPool1d(3)

    def forward(self, x):
        return torch.flatten(self.pool(x.transpose(1, 2)), 1), self.pool3(x)


class CopyFill(torch.nn.Module):
    def forward(self, x, y):
        z = torch.zeros_like(x)
        z.copy_(y)  # y broadcasts over x's rows
        w = torch.empty_like(x).fill_(2.5)
        return z + w * x


class Restride(torch.nn.Module):
    def forward(self, x):
        return torch.as_strided(x.sum(-1, keepdim=True), (2, 3, 1), (3, 1, 7)) + 1


class GroupNorms(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_like = torch.nn.GroupNorm(4, 8)  # [N, C, L]
        self.image = torch.nn.GroupNorm(2, 8, affine=False)  # [N, C, H, W]
        with torch.no_grad():
            self.conv_like.weight.uniform_(0.5, 1.5)
            self.conv_like.bias.uniform_(-1, 1)

    def forward(self, x, y):
        return self.conv_like(x), self.image(y)


class WeightNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.utils.parametrizations.weight_norm(
            torch.nn.Conv1d(8, 8, 3, padding=1, groups=2), name="weight", dim=2)

    def forward(self, x):
        return self.conv(x) + torch.linalg.vector_norm(x, dim=-1, keepdim=True)


class Bilinear(torch.nn.Module):
    def forward(self, x):
        f = torch.nn.functional.interpolate
        return (f(x, size=(7, 10), mode="bilinear", align_corners=False),
                f(x, scale_factor=2, mode="bilinear", align_corners=False),
                f(x, size=(9, 3), mode="bilinear", align_corners=True))


class Repeats(torch.nn.Module):
    def forward(self, x):
        return (x.repeat(2, 1, 3), x.repeat(2, 1, 1, 2), torch.repeat_interleave(x, 2, dim=-1),
                torch.repeat_interleave(x[0], 3, dim=0))


class Patchify(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = torch.nn.Conv2d(3, 12, 4, stride=4)
        self.plain = torch.nn.Conv2d(3, 5, 3, stride=3, padding=1)  # padded: stays a conv

    def forward(self, x):
        return self.patch(x).flatten(2).transpose(1, 2), self.plain(x)


class OverflowGuard(torch.nn.Module):
    """T5's fp16 guard: clamp to finfo.max (less 1000 if anything overflowed)."""

    def forward(self, x):
        top = torch.finfo(x.dtype).max
        bound = torch.where(torch.isinf(x).any(), top - 1000, top)
        return torch.clamp(x * 2, min=-bound, max=bound), torch.isinf(x)


class Router(torch.nn.Module):
    """A mixture-of-experts router's steps: in-place normalisation read before it is written
    (`x /= x.sum()`), chunk, integer floor division."""

    def forward(self, logits, ids):
        top, index = torch.topk(logits, 2, dim=-1)
        top /= top.sum(dim=-1, keepdim=True)
        gate, up = logits.chunk(2, dim=-1)
        return top, index // 2, gate * up, torch.floor_divide(ids, 3)


class ViewThenWrite(torch.nn.Module):
    """A view of `a` taken before `a` is scaled in place sees the new values: a functional
    translation would read the old ones, so capture takes the core-ATen path, which
    functionalises the write. (A value computed before the write, `b`, is the old one either
    way.)"""

    def forward(self, x):
        a = x * 2
        b = a.sum(dim=-1, keepdim=True)
        v = a[:, :3]
        a.div_(b)
        return v + 1, b


# (model, inputs, path capture takes by default): writes into views need functionalising, so
# those graphs go through core ATen, where they become slice/select scatters and copies
CASES = [
    (ShiftRight, lambda: (torch.randint(0, 6, (2, 9)),), "core_aten"),
    (Bits, lambda: (torch.rand(3, 4) > 0.5, torch.randint(-5, 5, (3, 4)),
                    torch.randint(0, 255, (3, 4), dtype=torch.uint8)), "direct"),
    (Pool1d, lambda: (torch.randn(2, 7, 6),), "direct"),
    (CopyFill, lambda: (torch.randn(4, 5), torch.randn(5)), "core_aten"),
    (Restride, lambda: (torch.randn(2, 3, 4),), "direct"),
    (GroupNorms, lambda: (torch.randn(2, 8, 5), torch.randn(2, 8, 3, 4)), "direct"),
    (WeightNorm, lambda: (torch.randn(2, 8, 6),), "direct"),
    (Bilinear, lambda: (torch.randn(2, 3, 5, 4),), "direct"),
    (Repeats, lambda: (torch.randn(2, 3, 4),), "direct"),
    (Patchify, lambda: (torch.randn(2, 3, 16, 12),), "direct"),
    (OverflowGuard, lambda: (torch.tensor([[1.0, float("inf"), -3e38, 2.0]]),), "direct"),
    (Router, lambda: (torch.randn(5, 8), torch.randint(-9, 9, (5, 3))), "direct"),
    (ViewThenWrite, lambda: (torch.rand(4, 6) + 0.5,), "core_aten"),
]


def _leaves(value):
    return [np.asarray(v) for v in (value if isinstance(value, tuple) else (value,))]


@pytest.mark.parametrize("decompose", [None, True])
@pytest.mark.parametrize("cls,make,path", CASES, ids=[c[0].__name__ for c in CASES])
def test_matches_eager_on_both_capture_paths(cls, make, path, decompose):
    from trnsim.compiler.capture import capture

    inputs = make()
    model = cls().eval()
    with torch.no_grad():
        eager = model(*inputs)
    graph = capture(model, inputs, decompose=decompose)
    assert graph.meta["capture_path"] == (path if decompose is None else "core_aten")
    flat = [t.numpy().astype(np.int32) if t.dtype == torch.int64 else t.numpy() for t in inputs]
    got = evaluate(graph, flat)
    for g, e in zip(got, _leaves(eager), strict=True):
        e = e.numpy() if hasattr(e, "numpy") else e
        np.testing.assert_allclose(np.asarray(g, dtype=np.float64), e.astype(np.float64),
                                   rtol=1e-5, atol=1e-5)


def test_shift_right_compiles_and_runs_on_a_core():
    import trnsim

    ids = torch.randint(0, 6, (2, 9))
    compiled = trnsim.trace(ShiftRight(), (ids,), instance="trn1.2xlarge")
    np.testing.assert_array_equal(compiled(ids).numpy(), ShiftRight()(ids).numpy())


class Transposing(torch.nn.Module):
    def forward(self, x):
        return torch.as_strided(x + 1, (4, 4), (1, 4))


def test_a_restride_that_is_not_a_reshape_is_refused_with_its_line():
    from trnsim.compiler.capture import capture
    from trnsim.compiler.errors import UnsupportedOperatorError

    with pytest.raises(UnsupportedOperatorError, match=r"as_strided.*test_aten_hf_ops.py:\d+"):
        capture(Transposing(), (torch.randn(4, 4),), decompose=False)


def test_resizing_and_group_norm_run_on_a_core():
    import trnsim

    x = torch.randn(2, 8, 6, 5)

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.GroupNorm(4, 8)

        def forward(self, x):
            return torch.nn.functional.interpolate(self.norm(x), size=(12, 9), mode="bilinear")

    model = Head().eval()
    with torch.no_grad():
        want = model(x).numpy()
    got = trnsim.trace(model, (x,), instance="trn1.2xlarge", auto_cast="none")(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_kv_cache_output_says_use_cache_false():
    from trnsim.compiler.capture import capture
    from trnsim.compiler.errors import CaptureError

    transformers = pytest.importorskip("transformers")
    config = transformers.T5Config(d_model=32, d_ff=64, num_layers=1, num_heads=2, d_kv=16,
                                   vocab_size=100)
    model = transformers.T5Model(config).eval()
    ids = torch.randint(0, 100, (1, 8))
    with pytest.raises(CaptureError, match="use_cache=False"):
        capture(model, (), {"input_ids": ids, "decoder_input_ids": ids})


def test_t5_relative_position_buckets_match_eager():
    """T5 computes its position buckets with a float -> long cast that fold evaluates: it must
    truncate as PyTorch does (a rounded bucket picks another bias row: 2% off)."""
    import trnsim

    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.T5Config(d_model=64, d_ff=128, num_layers=1, num_heads=2, d_kv=32,
                                   vocab_size=100)
    model = transformers.T5EncoderModel(config).eval()
    inputs = {"input_ids": torch.randint(0, 100, (2, 40)),
              "attention_mask": torch.tensor([[1] * 40, [1] * 25 + [0] * 15])}
    with torch.no_grad():
        want = model(**inputs).last_hidden_state
    got = trnsim.trace(model, (), kwargs=inputs, instance="trn1.2xlarge", auto_cast="none")(
        **inputs).last_hidden_state
    assert float((got - want).abs().max() / want.abs().max()) < 1e-5


def test_a_patchify_convolution_becomes_one_matmul():
    """ViT's patch embedding (kernel = stride) as [patches, C*kh*kw] @ W^T: the conv kernel would
    need every tap of every output channel on each partition (ViT-base: twice SBUF)."""
    from trnsim.compiler.capture import capture

    graph = capture(Patchify(), (torch.randn(2, 3, 16, 12),))
    ops = graph.op_counts()
    assert ops["conv2d"] == 1 and ops["matmul"] == 1  # the padded one stays a convolution


def test_bilinear_resizing_keeps_a_half_precision_input_half():
    from trnsim.compiler.capture import capture

    graph = capture(Bilinear().half(), (torch.randn(1, 2, 5, 4).half(),))
    assert all(o.dtype.name == "float16" for o in graph.outputs)


class TopK(torch.nn.Module):
    def forward(self, x):
        values, index = torch.topk(x, 3, dim=1, largest=False)
        return values * 2, index


def test_topk_matches_eager_values_and_indices():
    import trnsim

    x = torch.randn(4, 40, 6)
    compiled = trnsim.trace(TopK(), (x,), instance="inf2.xlarge", auto_cast="none")
    values, index = compiled(x)
    want_values, want_index = TopK()(x)
    assert torch.equal(values, want_values) and torch.equal(index, want_index)
    assert index.dtype == torch.int64


def _mixtral():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.MixtralConfig(hidden_size=64, intermediate_size=128,
                                        num_hidden_layers=1, num_attention_heads=4,
                                        num_key_value_heads=2, vocab_size=100,
                                        num_local_experts=4, num_experts_per_tok=2)
    return transformers.MixtralForCausalLM(config).eval()


@pytest.mark.parametrize("experts", ["grouped_mm", "batched_mm"])
def test_mixtral_matches_eager_with_either_experts_implementation(experts):
    """grouped_mm (Hugging Face's default): sort, histc, the grouped matmul (every expert over
    every row, masked) and the inverse permutation's index_put; batched_mm: each token's expert
    weights gathered. Top-k routing in both."""
    import trnsim

    model = _mixtral()
    model.set_experts_implementation(experts)
    ids = torch.randint(0, 100, (2, 16))
    compiled = trnsim.trace(model, {"input_ids": ids}, instance="inf2.xlarge", auto_cast="none")
    got = compiled(input_ids=ids)
    want = model(input_ids=ids).logits.detach()
    got = got.logits if hasattr(got, "logits") else got[0]
    assert torch.allclose(got, want, atol=1e-5 * float(want.abs().max()))


class Routing(torch.nn.Module):
    def forward(self, ids, x, perm):
        ordered, order = torch.sort(ids, descending=True)
        counts = torch.histc(ids.float(), bins=5, min=0, max=4)
        rows = x.clone()
        rows[perm] = x * 2
        return ordered, order, counts, ids // 3, rows


def test_sort_histc_index_put_and_integer_floor_division_match_eager():
    import trnsim


    ids = torch.randperm(30)  # distinct keys: the order of equal keys is not torch's contract
    x, perm = torch.randn(30, 7), torch.randperm(30)
    compiled = trnsim.trace(Routing(), (ids, x, perm), instance="inf2.xlarge", auto_cast="none")
    for got, want in zip(compiled(ids, x, perm), Routing()(ids, x, perm), strict=True):
        assert got.dtype == want.dtype and torch.equal(got, want)


class Bicubic(torch.nn.Module):
    def __init__(self, align_corners: bool, **how):
        super().__init__()
        self.align_corners, self.how = align_corners, how

    def forward(self, x, empty):
        resized = torch.nn.functional.interpolate(x, mode="bicubic",
                                                  align_corners=self.align_corners, **self.how)
        return resized, torch.cat([empty, empty], dim=0)  # every part empty: an empty result


@pytest.mark.parametrize("align_corners,how", [(False, {"size": (20, 25)}),
                                               (True, {"size": (7, 9)}),
                                               (False, {"scale_factor": 1.5})])
def test_bicubic_resizing_matches_eager(align_corners, how):
    """YOLOS resizes its position embeddings this way: two matmuls by constant matrices of
    PyTorch's cubic-convolution weights (taps clamped at the edges)."""
    import trnsim

    x, empty = torch.randn(1, 16, 14, 14), torch.zeros(0, 4)
    model = Bicubic(align_corners, **how)
    compiled = trnsim.trace(model, (x, empty), instance="inf2.xlarge", auto_cast="none")
    got, got_empty = compiled(x, empty)
    want, want_empty = model(x, empty)
    assert torch.allclose(got, want, atol=1e-5) and got_empty.shape == want_empty.shape
