"""Operators whose edge cases differ between C, numpy and PyTorch, compiled and run on the
simulator and compared with eager PyTorch bit for bit (or refused by name, never a different
number)."""

import pytest

torch = pytest.importorskip("torch")

import trnsim  # noqa: E402
from trnsim.compiler import ZeroSizeTensorError  # noqa: E402
from trnsim.errors import LimitExceededError  # noqa: E402

NAN, INF = float("nan"), float("inf")


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setenv("TRNSIM_CACHE_DIR", "off")


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def compiled(fn, *inputs):
    return trnsim.trace(Fn(fn), inputs, instance="inf2.xlarge")


def same_as_eager(fn, *inputs):
    got, want = compiled(fn, *inputs)(*inputs), fn(*inputs)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert torch.equal(got, want) or torch.allclose(got, want, equal_nan=True, atol=0, rtol=0), \
        (got, want)


def test_round_is_half_to_even():
    x = torch.tensor([0.5, 2.5, -1.5, 0.49999997, -0.5, 3.5, 1.4, -2.6, 8388609.0, -8388607.5,
                      INF, -INF, 1e30])
    same_as_eager(torch.round, x)


def test_remainder_takes_the_divisor_sign_for_floats():
    a = torch.tensor([-7.0, 7.0, -7.0, 7.0, 5.5, -5.5, 0.0, 6.0, -0.25])
    b = torch.tensor([3.0, -3.0, -3.0, 3.0, 2.0, 2.0, 3.0, 3.0, 1.0])
    same_as_eager(lambda a, b: a % b, a, b)
    same_as_eager(lambda a: torch.remainder(a, 3), a)
    same_as_eager(lambda a: torch.remainder(a, -3), a)


def test_remainder_takes_the_divisor_sign_for_ints():
    a = torch.tensor([-7, 7, -7, 7, 0, 6, -1], dtype=torch.int32)
    b = torch.tensor([3, -3, -3, 3, 3, -3, 5], dtype=torch.int32)
    same_as_eager(lambda a, b: torch.remainder(a, b), a, b)


def test_fmod_keeps_c_semantics():
    a = torch.tensor([-7.0, 7.0, -7.0, 5.5])
    b = torch.tensor([3.0, -3.0, -3.0, 2.0])
    same_as_eager(torch.fmod, a, b)


@pytest.mark.parametrize("op", [torch.argmax, torch.argmin])
def test_argmax_and_argmin_return_the_first_nan(op):
    x = torch.tensor([[1.0, NAN, 3.0, NAN], [INF, 2.0, NAN, 0.0], [1.0, 5.0, 2.0, 5.0],
                      [-INF, -INF, 0.0, NAN]])
    same_as_eager(lambda x: op(x, dim=1), x)
    wide = torch.randn(3, 1000, generator=torch.Generator().manual_seed(0))
    wide[1, 700] = NAN
    wide[2, 999] = NAN
    wide[2, 5] = INF
    same_as_eager(lambda x: op(x, dim=1), wide)


def test_scalar_results_have_shape_empty():
    x = torch.randn(3, 4)
    out = compiled(lambda x: x.sum(), x)(x)
    assert out.shape == () and torch.allclose(out, x.sum(), atol=1e-5)
    out = compiled(lambda x: torch.argmax(x), x)(x)
    assert out.shape == () and out == torch.argmax(x)


@pytest.mark.parametrize("fn,inputs", [
    (lambda a, b: a @ b, (torch.randn(4, 0), torch.randn(0, 5))),
    (torch.nn.Linear(4, 4), (torch.randn(0, 4),)),
    (lambda x: x.sum(dim=1), (torch.randn(3, 0),)),
], ids=["k0", "batch0-linear", "sum-empty"])
def test_zero_size_operators_run_elementwise_or_are_refused_by_name(fn, inputs):
    same_as_eager(lambda x: x * 2 + 1, torch.randn(0, 4))  # element-wise: empty in, empty out
    with pytest.raises(ZeroSizeTensorError, match="zero-size tensor of shape"):
        compiled(fn, *inputs)


def test_an_empty_slice_that_cat_drops_is_not_refused():
    """Phi-3's partial rotary with the rotary dimension the whole head: q[..., d:] is empty and
    only ever concatenated; eager PyTorch computes the rotated part alone."""
    def rotary(q):
        rot, rest = q[..., :8], q[..., 8:]
        return torch.cat([rot * 2, rest], dim=-1)

    same_as_eager(rotary, torch.randn(2, 3, 8))


def test_int64_values_outside_int32_are_refused_never_clipped():
    traced = compiled(lambda x: x + 1, torch.tensor([1, 2]))
    assert torch.equal(traced(torch.tensor([5, -7])), torch.tensor([6, -6]))
    with pytest.raises(LimitExceededError, match="1099511627777 exceeds limit the int32 range"):
        traced(torch.tensor([1, 2**40 + 1]))
    offsets = torch.nn.Module()
    offsets.register_buffer("table", torch.tensor([1, -2**40 - 1]))
    offsets.forward = lambda x: x + offsets.table
    with pytest.raises(LimitExceededError, match="-1099511627777 exceeds limit the int32 range"):
        trnsim.trace(offsets, (torch.tensor([1, 2]),), instance="inf2.xlarge")
