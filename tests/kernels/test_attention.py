"""k.attention against the reference semantics: masks, layouts, head dims, dtypes."""

import importlib

import numpy as np
import pytest

from tests.kernels.conftest import as_dtype, assert_close, loaded
from tests.kernels.harness import ArraySpec, run
from trnsim.errors import UnsupportedError
from trnsim.kernels import attention
from trnsim.kernels.layout import hbm_view


def reference(q, k, v, scale, mask=None, kind="none", k_transposed=False, compute="bfloat16"):
    """What k.attention means (its record in trnsim.compiler.kernel_ops): bf16 operands, fp32 softmax,
    probabilities cast to the compute dtype before P @ V, fully masked rows give 0."""
    q, k, v = (loaded(t, compute) for t in (q, k, v))
    kt = k if k_transposed else np.swapaxes(k, -1, -2)
    s = (q @ kt).astype(np.float32) * np.float32(scale)
    keep = None
    if kind == "causal":
        keep = np.tril(np.ones(s.shape[-2:], bool))
    elif kind == "bool":
        keep = np.broadcast_to(mask.astype(bool), s.shape)
    elif kind == "bias":
        s = s + mask.astype(np.float32)
    if keep is not None:
        s = np.where(keep, s, -np.inf)
    with np.errstate(invalid="ignore"):
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        p = np.nan_to_num(e / e.sum(axis=-1, keepdims=True), nan=0.0)
    return loaded(p, compute) @ v


CASES = [  # batch, sq, sk, d, dv, mask kind, k transposed, HBM dtype, compute dtype
    ((1, 4), 128, 128, 64, 64, "none", False, "float32", "bfloat16"),
    ((2, 3), 200, 300, 64, 64, "causal", False, "float32", "bfloat16"),
    ((1, 2), 128, 256, 32, 32, "bias", True, "float32", "bfloat16"),
    ((2, 2), 130, 70, 80, 48, "bool", False, "float32", "float32"),
    ((), 100, 100, 64, 64, "none", False, "bfloat16", "bfloat16"),
    ((3,), 64, 600, 128, 64, "bias", False, "float32", "bfloat16"),  # keys over 512
    ((1, 16), 128, 128, 64, 64, "bias", False, "bfloat16", "bfloat16"),  # 4 pipelined groups
    ((1, 3), 64, 1100, 64, 32, "causal", False, "float32", "bfloat16"),  # one group at a time
    # compute dtypes whose range cannot hold the masked-out value: masks are added in bf16
    ((2, 2), 64, 64, 32, 32, "causal", False, "float16", "float16"),
    ((1, 2), 70, 90, 64, 64, "bool", False, "float32", "float16"),
    ((1, 2), 128, 128, 64, 64, "bias", False, "float32", "float8_e4m3"),
    ((2, 2), 64, 64, 32, 32, "causal", False, "float32", "float8_e4m3"),
    # over 2048 keys: online softmax across key chunks
    ((2,), 300, 4500, 64, 64, "bias", False, "float32", "bfloat16"),
    ((1, 3), 64, 4200, 128, 64, "bool", False, "float32", "bfloat16"),
    ((1, 2), 1, 4500, 128, 128, "none", False, "bfloat16", "bfloat16"),  # a decode step
    ((1, 1), 2300, 2300, 64, 64, "causal", False, "bfloat16", "bfloat16"),
    ((1, 2), 128, 5000, 64, 64, "causal", False, "float32", "bfloat16"),  # chunks 2, 3 skipped
    ((1, 16), 256, 6000, 128, 64, "none", False, "bfloat16", "bfloat16"),  # 3 heads at a time
    # no mask: K/V rows loaded interleaved (7 tiles in one load, then a tail tile in order)
    ((2, 3), 5, 1000, 64, 64, "none", False, "float32", "bfloat16"),
    ((1, 8), 4, 2177, 64, 32, "none", False, "bfloat16", "bfloat16"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}x{c[2]}-d{c[3]}-{c[5]}"
                         f"-kt{int(c[6])}-{c[7]}-{c[8]}")
def test_attention_matches_reference(rng, case):
    batch, sq, sk, d, dv, kind, kt, dtype, compute = case
    q = as_dtype(rng.standard_normal((*batch, sq, d)), dtype)
    k = as_dtype(rng.standard_normal((*batch, sk, d)), dtype)
    v = as_dtype(rng.standard_normal((*batch, sk, dv)), dtype)
    if kt:
        k = np.ascontiguousarray(np.swapaxes(k, -1, -2))
    kwargs = {}
    mask = None
    if kind == "bias":  # per batch item, broadcast over heads and queries; some -inf keys
        mask = (rng.standard_normal((*batch[:1], *([1] * (len(batch) - 1)), 1, sk)) * 3)
        mask = mask.astype(np.float32)
        mask[..., :3] = -np.inf
        kwargs["mask"] = mask
    elif kind == "bool":
        mask = rng.random((*batch[:1], 1, sq, sk)) > 0.3
        mask[0, 0, 5, :] = False  # a fully masked row
        kwargs["mask"] = mask
    result = run(attention, [q, k, v], (*batch, sq, dv), dtype, scale=d ** -0.5,
                 mask_kind=kind, k_transposed=kt, compute_dtype=compute, **kwargs)
    want = reference(q, k, v, d ** -0.5, mask, kind, kt, compute)
    # the kernel rounds P before its 1/sum scaling, the reference after: one rounding step apart
    rtol = {"bfloat16": 1.5e-2, "float16": 2e-3, "float8_e4m3": 2.0 ** -4}.get(compute, 1e-4)
    assert_close(result.output, want, dtype, rtol=rtol)
    if kind == "bool":
        assert np.all(result.output.astype(np.float32)[0, 0, 5] == 0)


def test_attention_scores_stay_on_chip():
    """A fused QKV buffer read as per-head views: the only DMA traffic is q, k, v and out."""
    b, s, h, d = 2, 128, 8, 64

    def fused(out, qkv):
        def part(i):
            return hbm_view(qkv, (b, h, s, d), (s * 3 * h * d, d, 3 * h * d, 1), offset=i * h * d)

        attention(hbm_view(out, (b, h, s, d), (s * h * d, d, h * d, 1)), part(0), part(1),
                  part(2), scale=0.125)

    result = run(fused, [ArraySpec((b, s, 3 * h * d), "bfloat16")], (b, s, h * d), "bfloat16",
                 target="inf2")
    summary = result.profile.summary
    assert summary.dma_bytes <= 2 * (b * s * 3 * h * d + b * s * h * d) * 1.01
    assert summary.hbm_write_bytes == 2 * b * s * h * d


def test_attention_limits_are_explicit(rng):
    q = rng.standard_normal((1, 4, 256)).astype(np.float32)
    with pytest.raises(UnsupportedError, match="head dim 256"):
        run(attention, [q, q, q], (1, 4, 256), "float32", scale=1.0)


STREAMED = [  # one head's K^T and V do not fit in SBUF: K and V are streamed in segments
    ((1, 1), 1, 40000, 128, 128, "none", False, None),  # a decode step over 40K cached tokens
    # with less SBUF for operands (KiB a partition, last), 2048-key segments
    ((1, 2), 300, 9000, 128, 128, "bias", False, 96),  # 3 query blocks, 2 per pass over K/V
    ((1,), 3600, 3600, 128, 64, "causal", True, 32),  # the second segment for late queries only
]


@pytest.mark.parametrize("case", STREAMED, ids=lambda c: f"{c[1]}x{c[2]}-{c[5]}")
def test_streamed_keys_match_reference(rng, monkeypatch, case):
    module = importlib.import_module("trnsim.kernels.attention")
    monkeypatch.setattr(module, "STREAM_QUERY_BLOCKS", 2)
    if case[-1]:
        monkeypatch.setattr(module, "operand_budget_bytes", lambda: case[-1] * 1024)
    batch, sq, sk, d, dv, kind, k_transposed, _ = case
    q = rng.standard_normal((*batch, sq, d)).astype(np.float32)
    k = rng.standard_normal((*batch, sk, d)).astype(np.float32)
    v = rng.standard_normal((*batch, sk, dv)).astype(np.float32)
    mask = (rng.standard_normal((1, sk)) * 3).astype(np.float32) if kind == "bias" else None
    plans = []
    plan = module._plan
    monkeypatch.setattr(module, "_plan", lambda *a: plans.append(plan(*a)) or plans[-1])
    k_in = np.ascontiguousarray(np.swapaxes(k, -1, -2)) if k_transposed else k
    kwargs = {"mask": mask} if mask is not None else {}
    result = run(attention, [q, k_in, v], (*batch, sq, dv), "float32", target="inf2",
                 scale=d ** -0.5, mask_kind=kind, k_transposed=k_transposed, **kwargs)
    assert plans[0][1] is not None and plans[0][1] < sk, plans
    assert_close(result.output, reference(q, k, v, d ** -0.5, mask, kind), "float32",
                 rtol=1.5e-2)


def test_long_causal_prefill_skips_the_upper_triangle():
    """Causal attention over 6144 tokens computes scores for about half the keys of unmasked
    (each query block stops at its last query), so it takes clearly less time."""
    spec = ArraySpec((1, 2, 6144, 64), "bfloat16")
    times = {kind: run(attention, [spec, spec, spec], (1, 2, 6144, 64), "bfloat16", scale=0.125,
                       mask_kind=kind, target="inf2").total_ns for kind in ("none", "causal")}
    assert 0.4 < times["causal"] / times["none"] < 0.8


@pytest.mark.parametrize("d,sk", [(64, 300), (128, 2500)])
def test_grouped_query_attention_reads_shared_k_and_v_once(rng, d, sk):
    """K and V of 2 KV heads, each shared by 4 query heads as a broadcast (stride-0) view: the
    answer is repeat_kv's, and K/V cross DMA once per KV head, not once per query head."""
    b, kv, r, sq = 1, 2, 4, 130
    q = rng.standard_normal((b, kv * r, sq, d)).astype(np.float32)
    k = rng.standard_normal((b, kv, sk, d)).astype(np.float32)
    v = rng.standard_normal((b, kv, sk, d)).astype(np.float32)

    def grouped(out, q_, k_, v_):
        def shared(t):
            return hbm_view(t, (b, kv, r, sk, d), (kv * sk * d, sk * d, 0, d, 1))

        attention(hbm_view(out, (b, kv, r, sq, d), (kv * r * sq * d, r * sq * d, sq * d, d, 1)),
                  hbm_view(q_, (b, kv, r, sq, d), (kv * r * sq * d, r * sq * d, sq * d, d, 1)),
                  shared(k_), shared(v_), scale=d ** -0.5)

    result = run(grouped, [q, k, v], (b, kv * r, sq, d), "float32", target="inf2")
    want = reference(q, np.repeat(k, r, axis=1), np.repeat(v, r, axis=1), d ** -0.5)
    assert_close(result.output, want, "float32", rtol=1.5e-2)
    summary = result.profile.summary
    assert summary.hbm_read_bytes <= 4 * (q.size + k.size * (128 // d) + v.size) * 1.01


def test_unmasked_keys_load_in_long_runs(rng):
    """Without a mask the key order is free: 16 key tiles of K (and of V) arrive in two DMAs of
    8-row runs, not 16 DMAs of one 128-byte row per partition."""
    q = rng.standard_normal((1, 1, 4, 64)).astype(np.float32)
    k = rng.standard_normal((1, 1, 2048, 64)).astype(np.float32)
    v = rng.standard_normal((1, 1, 2048, 64)).astype(np.float32)
    result = run(attention, [q, k, v], (1, 1, 4, 64), "float32", target="inf2", scale=0.125)
    assert_close(result.output, reference(q, k, v, 0.125), "float32", rtol=1.5e-2)
    loads = [i for i in result.program.instructions if type(i).__name__ == "DmaCopy"]
    assert len(loads) == 1 + 2 + 2 + 1  # Q, K, V, the output


def test_a_decode_step_runs_within_four_times_its_dma_roofline(rng):
    """4 queries (grouped heads stacked) over 4097 cached keys: with keys on partitions the
    softmax uses every lane, so streaming K and V dominates; queries on partitions kept 4 of
    128 lanes busy and took over 6 times the time K and V need on the DMA engines."""
    import ml_dtypes

    from trnsim import hardware

    q, k, v = (rng.standard_normal(shape).astype(ml_dtypes.bfloat16)
               for shape in ((1, 1, 4, 64), (1, 1, 4097, 64), (1, 1, 4097, 64)))
    result = run(attention, [q, k, v], (1, 1, 4, 64), "bfloat16", target="inf2", scale=0.125)
    want = reference(*(t.astype(np.float32) for t in (q, k, v)), 0.125)
    assert_close(result.output.astype(np.float32), want, "bfloat16", rtol=3e-2)
    roofline_ns = (k.nbytes + v.nbytes) / hardware.core("inf2").dma.bytes_per_s * 1e9
    assert result.profile.total_ns < 4 * roofline_ns


def test_a_decode_step_over_streamed_keys_stays_near_its_dma_roofline():
    """8 heads of 4 queries over 32K cached keys: K and V go through SBUF a segment at a time,
    each segment with keys on partitions and merged into a running softmax; the online chunk
    path (queries on partitions) took 2.3 times the K/V DMA roofline here."""
    from trnsim import hardware

    q, k = ArraySpec((1, 8, 4, 128), "bfloat16"), ArraySpec((1, 8, 32768, 128), "bfloat16")
    result = run(attention, [q, k, k], (1, 8, 4, 128), "bfloat16", target="inf2", scale=0.088)
    roofline_ns = 2 * 8 * 32768 * 128 * 2 / hardware.core("inf2").dma.bytes_per_s * 1e9
    # (each segment's DMAs, under 32 KiB per engine, also pay the per-transfer overhead)
    assert result.profile.total_ns < 2.0 * roofline_ns


def test_a_mask_broadcast_along_the_keys_is_loaded_as_a_column(rng):
    """A mask holding one value per query (stride 0 along the keys, as a model's mask can be
    after broadcasting) is read once per query and broadcast on chip: a DMA of the broadcast
    view would cost a descriptor per element and made BERT at 2048 tokens 100x slower."""
    batch, sq, sk, d = (1, 2), 128, 512, 64
    q, k, v = (as_dtype(rng.standard_normal((*batch, s, d)), "float32") for s in (sq, sk, sk))
    column = rng.random((1, 1, sq, 1)) > 0.2
    column[0, 0, 7, 0] = False  # a fully masked row
    runs = {}
    for name, mask in (("column", column), ("full", np.ascontiguousarray(
            np.broadcast_to(column, (1, 1, sq, sk))))):
        runs[name] = run(attention, [q, k, v], (*batch, sq, d), "float32", scale=d ** -0.5,
                         mask_kind="bool", mask=mask)
        want = reference(q, k, v, d ** -0.5, mask, "bool")
        assert_close(runs[name].output, want, "float32", rtol=1.5e-2)
    assert np.all(runs["column"].output[0, :, 7] == 0)
    assert runs["column"].total_ns <= runs["full"].total_ns
