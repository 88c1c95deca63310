"""Views of views: when a view's root is itself a strided view (a constant-index gather such as
Falcon's multi-query ``fused_qkv[..., [-2], :]``), the lowering applies the views to the root's
own pattern (or copies the root dense first) instead of assuming a dense root."""

import numpy as np
import pytest

from trnsim.compiler.lowering import _restride
from trnsim.nki.tile import Axis

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def no_cache(monkeypatch):
    monkeypatch.setenv("TRNSIM_CACHE_DIR", "off")


def _axes(*pairs):
    return tuple(Axis(n, 0, st) for n, st in pairs)


@pytest.mark.parametrize("axes,shape,strides", [
    (((2, 1024), (32, 32), (1, 0), (32, 1)), (2, 1, 32, 32), (1024, 0, 32, 1)),  # size-1 moves
    (((2, 6144), (32, 192), (32, 1)), (64, 32), (192, 1)),  # merge: 6144 = 32 * 192
    (((64, 192), (32, 1)), (2, 32, 4, 8), (6144, 192, 8, 1)),  # split both
    (((2, 6144), (32, 192), (32, 1)), (2, 1024), None),  # rows 192 apart cannot merge with d
    (((4, 1), (4, 4)), (16,), None),  # transposed
])
def test_restride_is_numpys_no_copy_reshape(axes, shape, strides):
    got = _restride(_axes(*axes), shape)
    if strides is None:
        assert got is None
    else:
        assert tuple(a.size for a in got) == shape
        assert tuple(a.fstep for a in got if a.size != 1) == tuple(
            s for s, n in zip(strides, shape, strict=True) if n != 1)


class MultiQuery(torch.nn.Module):
    """Falcon's split of a fused QKV projection with one K/V head, then views of the parts."""

    def __init__(self, heads=4, d=16):
        super().__init__()
        self.heads, self.d = heads, d
        self.qkv = torch.nn.Linear(heads * d, (heads + 2) * d)

    def forward(self, x):
        b, s, _ = x.shape
        fused = self.qkv(x).view(b, s, self.heads + 2, self.d)
        q = fused[..., :-2, :].transpose(1, 2)
        k = fused[..., [-2], :].transpose(1, 2)  # a constant-index gather: a free view
        v = fused[..., [-1], :].transpose(1, 2)
        both = (k * 2).reshape(b, s * self.d) + v.reshape(b, s * self.d)  # reshapes of views
        att = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return att.transpose(1, 2).reshape(b, s, -1), both


@pytest.mark.parametrize("auto_cast", ["none", "matmult"])
def test_views_of_a_gathered_view_match_eager(auto_cast):
    import trnsim

    torch.manual_seed(0)
    model, x = MultiQuery().eval(), torch.randn(2, 32, 64)
    with torch.no_grad():
        want = [t.numpy() for t in model(x)]
    compiled = trnsim.trace(model, (x,), instance="trn1.2xlarge", auto_cast=auto_cast)
    got = [t.numpy() for t in compiled(x)]
    tol = 1e-5 if auto_cast == "none" else 2e-2
    for g, w in zip(got, want, strict=True):
        assert np.abs(g - w).max() <= tol * np.abs(w).max()


def test_falcon_multi_query_matches_eager():
    transformers = pytest.importorskip("transformers")
    import trnsim

    torch.manual_seed(0)
    config = transformers.FalconConfig(hidden_size=128, num_hidden_layers=1, num_attention_heads=4,
                                       vocab_size=1000, multi_query=True)
    model = transformers.FalconModel(config).eval()
    inputs = {"input_ids": torch.randint(0, 1000, (2, 32)),
              "attention_mask": torch.ones(2, 32, dtype=torch.int64)}
    with torch.no_grad():
        want = model(**inputs).last_hidden_state
    got = trnsim.trace(model, (), kwargs=inputs, instance="trn1.2xlarge", auto_cast="none")(
        **inputs).last_hidden_state
    assert float((got - want).abs().max()) < 1e-4
