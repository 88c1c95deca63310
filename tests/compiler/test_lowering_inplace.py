"""Models that assign into a slice of an input (a KV cache written at its next position): the
compiled program writes the slice into its copy of the input instead of rebuilding the tensor,
and returns only the model's own outputs."""

import pytest

import trnsim

torch = pytest.importorskip("torch")


class _Cache(torch.nn.Module):
    def forward(self, cache, new):
        cache[:, :, 63:64] = new
        return (cache * 2.0).sum(-1)


class _CacheReadTwice(torch.nn.Module):
    """The old cache is read after the updated one: writing in place would change what the
    second sum sees."""

    def forward(self, cache, new):
        updated = torch.cat([cache[:, :, :63], new], dim=2)
        return updated.sum(-1) * 3.0 + cache.sum(-1)


def _inputs():
    g = torch.Generator().manual_seed(0)
    return torch.randn(2, 8, 64, 64, generator=g), torch.randn(2, 8, 1, 64, generator=g)


def _write_bytes(compiled) -> int:
    return compiled.timing().summary.hbm_write_bytes


def test_an_input_updated_in_place_compiles_runs_and_is_written_in_place():
    cache, new = _inputs()
    want = _Cache()(cache.clone(), new)
    compiled = trnsim.trace(_Cache(), (cache.clone(), new), instance="trn1.2xlarge",
                            auto_cast="none")
    given = cache.clone()
    got = compiled(given, new)  # one output: the updated cache is not handed back
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-5)
    assert torch.equal(given, cache)  # the caller's tensor is left alone
    # the update writes the new position only (2 x 8 x 64 fp32), not a 2 MiB rebuilt cache
    assert _write_bytes(compiled) < 64 * 1024


def test_a_tensor_still_read_elsewhere_is_rebuilt_not_overwritten():
    cache, new = _inputs()
    want = _CacheReadTwice()(cache, new)
    compiled = trnsim.trace(_CacheReadTwice(), (cache, new), instance="trn1.2xlarge",
                            auto_cast="none")
    torch.testing.assert_close(compiled(cache, new), want, rtol=1e-5, atol=1e-4)


class _ShiftingCache(torch.nn.Module):
    """cache[:-1] = cache[1:]; cache[-1:] = new: the source of the update reads the tensor."""

    def forward(self, cache, new):
        cache[:, :, :-1] = cache[:, :, 1:].clone()
        cache[:, :, -1:] = new
        return cache * 2.0


def test_an_update_whose_source_reads_the_tensor_is_not_done_in_place():
    g = torch.Generator().manual_seed(0)
    cache, new = torch.randn(1, 1, 8192, 1024, generator=g), torch.randn(1, 1, 1, 1024, generator=g)
    want = _ShiftingCache()(cache.clone(), new)
    compiled = trnsim.trace(_ShiftingCache(), (cache.clone(), new), instance="trn1.2xlarge",
                            auto_cast="none")
    torch.testing.assert_close(compiled(cache.clone(), new), want, rtol=1e-6, atol=1e-6)
