"""Integer arithmetic compiled and run on the simulator, compared with eager PyTorch bit for bit:
int32 and narrower types wrap, division and remainder round as PyTorch does; an int64 value
past int32, or an integer reduction fp32 cannot hold, is refused by name, never another number."""

import pytest

torch = pytest.importorskip("torch")

import trnsim  # noqa: E402
from trnsim.errors import IntegerArithmeticError, IntegerRangeError  # noqa: E402

I32_MAX, I32_MIN = 2**31 - 1, -2**31


@pytest.fixture(autouse=True)
def _no_cache(monkeypatch):
    monkeypatch.setenv("TRNSIM_CACHE_DIR", "off")


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def run(fn, *inputs, instance="inf2.xlarge"):
    return trnsim.trace(Fn(fn), inputs, instance=instance)(*inputs)


def same_as_eager(fn, *inputs, instance="inf2.xlarge"):
    got, want = run(fn, *inputs, instance=instance), fn(*inputs)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got, want), (got, want)


A = torch.tensor([100000, -7, 46341, I32_MAX, I32_MIN, 3, 16777217, -16777219, 0, 7],
                 dtype=torch.int32)
B = torch.tensor([100000, 3, 46341, 1, 2, -2, 3, 5, -9, -7], dtype=torch.int32)


@pytest.mark.parametrize("name,fn", [
    ("mul", lambda a, b: a * b), ("add", lambda a, b: a + b), ("sub", lambda a, b: a - b),
    ("floor_divide", lambda a, b: a // b),
    ("trunc_divide", lambda a, b: torch.div(a, b, rounding_mode="trunc")),
    ("remainder", lambda a, b: a % b), ("fmod", torch.fmod),
    ("maximum", torch.maximum), ("eq", lambda a, b: a == b), ("gt", lambda a, b: a > b),
    ("chain", lambda a, b: (a * 3 + b) * b - 16777217),
])
def test_int32_wraps_and_rounds_as_pytorch(name, fn):
    same_as_eager(fn, A, B)


@pytest.mark.parametrize("name,fn", [
    ("neg", lambda a: -a), ("abs", torch.abs), ("square", lambda a: a * a),
    ("pow", lambda a: a ** 3), ("clamp", lambda a: a.clamp(-16777217, 16777219)),
    ("plus_big", lambda a: a + 16777217), ("not", lambda a: ~a),
    ("floor_by_scalar", lambda a: a // -3), ("mod_by_scalar", lambda a: a % 5),
])
def test_int32_unary_and_scalar_operands(name, fn):
    same_as_eager(fn, A)


def test_narrow_integer_types_wrap_in_their_width():
    same_as_eager(lambda a: a + 100, torch.tensor([100, -100, 27, -128], dtype=torch.int8))
    same_as_eager(lambda a: a * 3 - 250, torch.tensor([100, 200, 27, 0], dtype=torch.uint8))
    same_as_eager(lambda a: a * a, torch.tensor([300, -300, 181], dtype=torch.int16))
    same_as_eager(lambda a: a.to(torch.int8), torch.tensor([200, -200, 127, 128], dtype=torch.int32))


def test_float_to_integer_casts_truncate_toward_zero():
    same_as_eager(lambda x: x.to(torch.int32), torch.tensor([2.7, -2.7, 0.5, -0.5, 100.9, -3.0]))


def test_int64_values_computed_exactly_or_refused():
    ids = torch.tensor([[5, 7, 1, 1], [1, 2, 3, 4]])  # RoBERTa's position ids from a mask
    same_as_eager(lambda ids: (torch.cumsum(ids.ne(1).int(), dim=1) * ids.ne(1).int()).long() + 1,
                  ids)
    traced = trnsim.trace(Fn(lambda x: x * 1000003), (torch.tensor([5, -7]),),
                          instance="inf2.xlarge")
    assert torch.equal(traced(torch.tensor([5, -7])), torch.tensor([5000015, -7000021]))
    with pytest.raises(IntegerRangeError, match="1000003000000 is outside int32"):
        traced(torch.tensor([5, 1000000]))


def test_integer_reductions_exact_or_refused():
    small = torch.tensor([[1, -5, 7, 1000], [3, 3, 3, -2]], dtype=torch.int32)
    for fn in (lambda a: a.sum(dim=1), lambda a: a.cumsum(1), lambda a: a.amax(dim=1),
               lambda a: a.prod(dim=1)):
        same_as_eager(fn, small)
    big = torch.tensor([[16777217, 1], [2, 3]], dtype=torch.int32)
    for fn in (lambda a: a.sum(dim=1), lambda a: a.cumsum(1), lambda a: a.amax(dim=1)):
        with pytest.raises(IntegerRangeError, match="fp32 holds exactly"):
            run(fn, big)


def test_integer_division_by_zero_is_refused_as_pytorch_does():
    a, b = torch.tensor([7, 8], dtype=torch.int32), torch.tensor([2, 0], dtype=torch.int32)
    with pytest.raises(RuntimeError):
        a // b
    with pytest.raises(IntegerArithmeticError, match="division by zero"):
        run(lambda a, b: a // b, a, b)


def test_a_core_without_gpsimd_refuses_what_fp32_cannot_hold():
    small = torch.tensor([100, -7, 4096], dtype=torch.int32)
    same_as_eager(lambda a: a * 3 // 2, small, instance="inf1.xlarge")
    with pytest.raises(IntegerRangeError, match="fp32 holds exactly"):
        run(lambda a: a * 3, torch.tensor([16777217], dtype=torch.int32), instance="inf1.xlarge")
    with pytest.raises(IntegerArithmeticError, match="division by zero"):
        run(lambda a, b: a // b, torch.tensor([7, 8], dtype=torch.int32),
            torch.tensor([2, 0], dtype=torch.int32), instance="inf1.xlarge")


def test_shifts_follow_pytorch_past_the_width():
    shifts = torch.tensor([1, -1, 3, 40, 0, 31, 32, 7, 2, 5], dtype=torch.int32)
    same_as_eager(lambda a, s: a << s, A, shifts)
    same_as_eager(lambda a, s: a >> s, A, shifts)
    for amount in (0, 3, 31, 32, 40):
        same_as_eager(lambda a, k=amount: (a << k) + (a >> k), A)
    narrow = torch.tensor([1, 200, 255, 7], dtype=torch.uint8)
    same_as_eager(lambda a: (a << 1) + (a >> 1) + (a << 9), narrow)
    same_as_eager(lambda s: 1 << s, torch.tensor([0, 3, 30, 31], dtype=torch.int32))


def test_integers_compared_or_moved_through_fp32_paths():
    from trnsim.errors import UnsupportedError

    big = torch.tensor([[16777217, 5, -3], [7, 16777216, 9]], dtype=torch.int32)
    same_as_eager(lambda a: a.t().contiguous() + 0, big)  # a transposed copy keeps every bit
    same_as_eager(lambda a: a.sum(dim=0), torch.tensor([[1, 2], [3, 4]], dtype=torch.int32))
    small = torch.tensor([[4, 9, 9, -1], [2, 0, 7, 7]], dtype=torch.int32)
    for fn in (lambda a: torch.argmax(a, dim=1), lambda a: torch.topk(a, 2, dim=1).indices,
               lambda a: torch.sort(a, dim=1).values):
        same_as_eager(fn, small)
        with pytest.raises(IntegerRangeError, match="fp32 holds exactly"):
            run(fn, big)
    with pytest.raises(UnsupportedError, match="matmul of integer tensors"):
        run(lambda a, b: a @ b, small, small.t().contiguous())


def test_negative_integer_powers_are_refused_as_pytorch_does():
    base = torch.tensor([2, 3, 1, -1, 0, -2, 2, 3], dtype=torch.int32)
    exponent = torch.tensor([1, -1, -3, -3, -1, -2, 31, 20], dtype=torch.int32)
    same_as_eager(lambda a, b: a ** b, base, exponent)  # a tensor exponent: 1 / a^n truncated
    with pytest.raises(RuntimeError):
        base ** -1
    with pytest.raises(IntegerArithmeticError, match="negative integer powers"):
        run(lambda a: a ** -1, base)
