"""k.matmul against numpy: shapes, dtypes, transposes, bias, epilogues, orientation, batching."""

from dataclasses import dataclass

import numpy as np
import pytest

from tests.kernels.conftest import as_dtype, assert_close, loaded
from tests.kernels.harness import ArraySpec, run
from trnsim.compiler.fused import Step
from trnsim.compiler.lowering.steps import to_callable
from trnsim.isa.ops import ACTIVATIONS
from trnsim.kernels import matmul
from trnsim.kernels.layout import hbm_view
from trnsim.nki import language as nl


@dataclass(frozen=True)
class Case:
    m: int
    k: int
    n: int
    batch_a: tuple = ()
    batch_b: tuple = ()
    ta: bool = False
    tb: bool = False
    bias: bool = False
    dtype: str = "float32"  # HBM dtype of a, b and out
    compute: str = "bfloat16"
    stationary: str = "a"
    epilogue: str | None = None  # "gelu", "tanh_residual", "steps"


CASES = [
    Case(128, 256, 512),
    Case(200, 300, 700, bias=True),
    Case(200, 300, 700, ta=True, tb=True, bias=True, compute="float32"),
    Case(64, 300, 700, bias=True, stationary="b"),
    Case(3, 130, 257, ta=True, tb=True, stationary="b", epilogue="tanh_residual"),
    Case(96, 520, 160, dtype="bfloat16", epilogue="gelu"),
    Case(40, 1100, 96, tb=True, compute="float32"),  # K chunks of the k-streamed path
    Case(700, 256, 300, bias=True, epilogue="steps"),  # many row tiles, bias then epilogue
    Case(16, 64, 48, batch_a=(2, 3), batch_b=(), bias=True),  # batch folded into m
    Case(16, 64, 48, batch_a=(2, 3), batch_b=(3,), tb=True),  # broadcast batch
    Case(33, 70, 40, batch_a=(2,), batch_b=(2,), ta=True, stationary="b"),
    Case(600, 256, 96, stationary="b"),  # m > 512: b is not used (same cycles, no transposes)
    # attention's per-head products, several items per DMA (kernels/matmul_batched.py): scores
    # q k^T, values p v with a bias, a transposed-a gradient with an epilogue reading extras,
    # and a broadcast extra over two batch axes
    Case(128, 64, 128, batch_a=(6,), batch_b=(6,), tb=True, dtype="bfloat16"),
    Case(128, 128, 64, batch_a=(6,), batch_b=(6,), bias=True),
    Case(64, 128, 128, batch_a=(5,), batch_b=(5,), ta=True, compute="float32", epilogue="steps"),
    Case(100, 48, 200, batch_a=(2, 2), batch_b=(2, 2), epilogue="tanh_residual"),
    # out^T with four 128-row pieces of a staged through three slots (the fourth load used to
    # overwrite the first before its transpose), and more than one column group of out
    Case(400, 384, 1536, bias=True, compute="float32", stationary="b", epilogue="gelu"),
    Case(512, 128, 640, compute="float32", stationary="b"),
    # a vocabulary-wide K (BERT's MLM head backward, dlogits @ W): the rows of a cannot be
    # staged whole beside it, so a is made K-major in HBM first; accumulators span PSUM banks
    Case(128, 30522, 512),
]


def _reference(c: Case, a, b, bias, extra):
    x = loaded(a, c.compute)
    y = loaded(b, c.compute)
    x = np.swapaxes(x, -1, -2) if c.ta else x
    y = np.swapaxes(y, -1, -2) if c.tb else y
    acc = np.matmul(x, y).astype(np.float32)
    if c.bias:
        acc = acc + bias
    if c.epilogue == "gelu":
        acc = ACTIVATIONS["gelu"](acc)
    elif c.epilogue == "tanh_residual":
        acc = np.tanh(acc) + extra.astype(np.float32)
    elif c.epilogue == "steps":
        acc = np.maximum(acc * np.float32(0.5) + extra.astype(np.float32), 0)
    return acc


def _epilogue(c: Case):
    if c.epilogue == "gelu":
        return lambda acc, extras: nl.gelu(acc)
    if c.epilogue == "tanh_residual":
        return lambda acc, extras: nl.add(nl.tanh(acc), extras[0])
    if c.epilogue == "steps":  # built exactly as the compiler's lowering builds epilogues
        program = (Step("mul", ("acc", 0.5)), Step("add", ("s0", "in3")),
                   Step("relu", ("s1",)))
        return to_callable(program, has_acc=True, first_operand=3)
    return None


@pytest.mark.parametrize("c", CASES, ids=lambda c: f"{c.m}x{c.k}x{c.n}-{c.dtype}-{c.compute}-"
                         f"t{int(c.ta)}{int(c.tb)}-{c.stationary}-{c.epilogue}")
def test_matmul_matches_numpy(rng, c):
    a_shape = (*c.batch_a, *((c.k, c.m) if c.ta else (c.m, c.k)))
    b_shape = (*c.batch_b, *((c.n, c.k) if c.tb else (c.k, c.n)))
    a = as_dtype(rng.standard_normal(a_shape), c.dtype)
    b = as_dtype(rng.standard_normal(b_shape) / np.sqrt(c.k), c.dtype)
    bias = rng.standard_normal(c.n).astype(np.float32)
    batch = np.broadcast_shapes(c.batch_a, c.batch_b)
    out_shape = (*batch, c.m, c.n)
    extra = as_dtype(rng.standard_normal(out_shape if c.epilogue != "tanh_residual"
                                         else (c.n,)), c.dtype)
    kwargs = dict(transpose_a=c.ta, transpose_b=c.tb, compute_dtype=c.compute,
                  stationary=c.stationary, epilogue=_epilogue(c))
    if c.bias:
        kwargs["bias"] = bias
    if c.epilogue in ("tanh_residual", "steps"):
        kwargs["extras"] = (extra,)
    result = run(matmul, [a, b], out_shape, c.dtype, **kwargs)
    assert_close(result.output, _reference(c, a, b, bias, extra), c.dtype)


def test_matmul_reads_a_transposed_weight_view_as_rows(rng):
    """b given as the [k, n] transposed view of an [n, k] weight (as torch's linear traces):
    read as rows and transposed on TensorE, never with one DMA descriptor per element."""
    a = rng.standard_normal((64, 256)).astype(np.float32)
    w = rng.standard_normal((384, 256)).astype(np.float32)

    def kernel(out, a, w):
        matmul(out, a, hbm_view(w, (256, 384), (1, 256)))

    result = run(kernel, [a, w], (64, 384), "float32")
    assert_close(result.output, loaded(a, "bfloat16") @ loaded(w, "bfloat16").T, "float32")
    slowest_dma = max(r.end_ns - r.start_ns for r in result.profile.records if r.engine == "dma")
    assert slowest_dma < 10_000  # an element-granular weight load takes ~0.5 ms


def test_matmul_folds_a_non_uniform_batch_by_staging_it(rng):
    """a [s, b, k] read as [b, s, k] (a permuted view): rows do not step uniformly, so a is made
    dense once and the weight is still streamed once for the whole batch."""
    a = rng.standard_normal((8, 2, 64)).astype(np.float32)
    w = rng.standard_normal((64, 96)).astype(np.float32)

    def kernel(out, a, w):
        matmul(out, hbm_view(a, (2, 8, 64), (64, 128, 1)), w)

    result = run(kernel, [a, w], (2, 8, 96), "float32")
    want = loaded(a.transpose(1, 0, 2), "bfloat16") @ loaded(w, "bfloat16")
    assert_close(result.output, want, "float32")
    weight_loads = [r for r in result.profile.records
                    if r.opcode == "DmaCopy" and any("in1" in o for o in r.operands)]
    assert sum(r.bytes for r in weight_loads) <= w.nbytes  # cast to bf16 on the way in


def test_weight_streaming_reads_each_weight_byte_once_and_keeps_dma_busy():
    """128 tokens x [1024, 3072] bf16 weights: DMA-bound; the kernel must move about the
    roofline's bytes and keep the DMA engines busy most of the time."""
    m, k, n = 128, 1024, 3072
    result = run(matmul, [ArraySpec((m, k), "bfloat16"), ArraySpec((k, n), "bfloat16")],
                 (m, n), "bfloat16", target="inf2")
    summary = result.profile.summary
    ideal = 2 * (m * k + k * n + m * n)
    assert summary.dma_bytes < 1.05 * ideal
    roofline_ns = ideal / (16 * 17e9) * 1e9
    # each DMA transfer also costs its engines `transfer_overhead_ns` (large transfers reach
    # "close to 70%" of the DMA rate in the NKI performance guide's example)
    assert result.total_ns < 1.6 * roofline_ns, (result.total_ns, roofline_ns)


def test_weight_dmas_reach_the_ideal_transfer_size():
    """A [768, 768] weight (BERT-base) streams K tiles of 1536 bytes per partition: two per DMA
    came to 3 KiB (24 KiB per engine), under the performance guide's 32 KiB per engine, and each
    transfer paid the per-transfer overhead (`DmaSpec.transfer_overhead_ns`); three reach it."""
    from trnsim import hardware

    m, k, n = 128, 768, 768
    result = run(matmul, [ArraySpec((m, k), "bfloat16"), ArraySpec((k, n), "bfloat16")],
                 (m, n), "bfloat16", target="inf2")
    dma = hardware.core(2).dma
    loads = [r for r in result.profile.records
             if r.opcode == "DmaCopy" and any("in1" in o for o in r.operands)]
    assert sum(r.bytes for r in loads) == k * n * 2
    engines = min(dma.engines, 128 // dma.partitions_per_engine)  # 128 partitions: all 16
    per_engine = [r.bytes / engines for r in loads]
    assert min(per_engine) >= dma.ideal_transfer_bytes, per_engine


def test_compute_bound_matmul_keeps_tensor_engine_busy():
    m, k, n = 1024, 1024, 1024
    result = run(matmul, [ArraySpec((m, k), "bfloat16"), ArraySpec((k, n), "bfloat16")],
                 (m, n), "bfloat16", target="inf2")
    # (the first, small loads pay the DMA per-transfer overhead before TensorE can start)
    assert result.profile.summary.engine_utilisation["tensor"] > 0.55


def test_matmul_runs_on_trainium2(rng):
    a = rng.standard_normal((130, 200)).astype(np.float32)
    b = rng.standard_normal((200, 300)).astype(np.float32)
    result = run(matmul, [a, b], (130, 300), "float32", target="trn2")
    assert_close(result.output, loaded(a, "bfloat16") @ loaded(b, "bfloat16"), "float32")


def test_long_contraction_rows_are_transposed_in_hbm_first():
    """K = 10240 rows of a too large to keep resident do not fit SBUF's streaming buffers next
    to a 512-column resident b: the kernel writes a^T to an internal HBM tensor (TensorE
    transposes, the `copy` kernel) and streams it K-major."""
    result = run(matmul, [ArraySpec((768, 10240), "bfloat16"), ArraySpec((10240, 512), "bfloat16")],
                 (768, 512), "bfloat16")
    internal = [t.shape for t in result.program.tensors.values() if t.kind == "internal"]
    assert internal == [(10240, 768)]


def test_only_the_re_streamed_operand_of_a_long_contraction_is_rewritten_k_major(rng):
    """x [768, 8192] @ W[1024, 8192]^T (a 70B layer's forward projection, both operands with K
    contiguous): neither fits SBUF, so x is re-streamed once per super-block of W and must be
    K-major in HBM; W is read once and reaches SBUF as rows through TensorE transposes. Both
    were rewritten through HBM, W's bytes written back and read again for nothing."""
    a = rng.standard_normal((768, 8192)).astype(np.float32)
    w = rng.standard_normal((1024, 8192)).astype(np.float32)
    result = run(matmul, [a, w], (768, 1024), "float32", transpose_b=True)
    internal = [t.shape for t in result.program.tensors.values() if t.kind == "internal"]
    assert internal == [(8192, 768)]
    assert_close(result.output, loaded(a, "bfloat16") @ loaded(w, "bfloat16").T, "float32")


def test_a_vocabulary_long_contraction_keeps_fewer_than_512_columns_resident():
    """A language model head's input gradient contracts over the vocabulary: K = 30522 is 239
    K tiles, so not even one 512-column PSUM bank of b fits SBUF resident; the kernel keeps
    128-column multiples resident instead of failing (it raised an SBUF overflow)."""
    result = run(matmul, [ArraySpec((256, 30522), "bfloat16"),
                          ArraySpec((30522, 512), "bfloat16")], (256, 512), "bfloat16")
    assert result.profile.total_ns > 0


def test_streamed_blocks_shrink_to_what_fragmented_sbuf_holds():
    """Other tiles can split SBUF's free space (the plan counts only how much is free): the
    streamed buffers narrow until they fit, instead of failing the model's compile. Here the
    free space is a 30 KiB hole and a 48 KiB tail; two 32 KiB blocks of b fit in neither."""
    from trnsim.nki.trace import current_trace

    def fragmented(out, a, b):
        sbuf = current_trace().sbuf
        hole = sbuf.allocate(30 * 1024, "hole", 4)
        sbuf.allocate(sbuf.capacity - 30 * 1024 - 48 * 1024, "pinned", 4)
        sbuf.free(hole)
        matmul(out, a, b)

    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 1024)).astype(np.float32)
    b = rng.standard_normal((1024, 8192)).astype(np.float32)
    result = run(fragmented, [a, b], (256, 8192), "float32")
    assert_close(result.output, loaded(a, "bfloat16") @ loaded(b, "bfloat16"), "float32")


def test_transposed_sink_takes_blocks_narrower_than_m(rng):
    """A streamed block narrowed to fit SBUF covers part of M: the out^T sink gathers pieces of
    M from several blocks (starting on 128-row boundaries) before storing a column group."""
    from trnsim.kernels.layout import Evictor, kernel_scope
    from trnsim.kernels.matmul import TransposedSink
    from trnsim.nki import isa as nisa

    m, n = 400, 640
    xt = rng.standard_normal((n, m)).astype(np.float32)  # what the accumulators hold: out^T

    def kernel(out, xt):
        sink = TransposedSink(out, None, (), None, Evictor())
        for n0 in range(0, n, 128):
            for m0, width in ((0, 256), (256, 144)):
                with kernel_scope("block"):
                    rows = nl.ndarray((128, width), dtype=nl.float32, buffer=nl.sbuf)
                    rows[...] = nl.load(xt[n0:n0 + 128, m0:m0 + width])
                    acc = nl.ndarray((128, width), dtype=nl.float32, buffer=nl.psum)
                    acc[...] = nisa.tensor_copy(rows)
                    sink(acc, n0, m0)
        sink.finish()

    result = run(kernel, [xt], (m, n), "float32")
    np.testing.assert_array_equal(result.output, xt.T)


def test_a_wide_linear_re_tiles_around_its_broadcast_bias():
    """nn.Linear(4096, 16384) over 128 tokens runs on NeuronCore-v2: the [128, 16384] fp32 bias
    broadcast holds 64 KiB per partition, so the weight streams in smaller blocks."""
    torch = pytest.importorskip("torch")
    import trnsim

    with trnsim.empty_weights():
        layer = torch.nn.Linear(4096, 16384).eval()
    report = trnsim.trace(layer, (torch.zeros(1, 128, 4096),), instance="trn1.2xlarge").report()
    weight_bytes = 4096 * 16384 * 2  # bf16 after auto-cast
    assert report.latency_ms * 1e-3 > weight_bytes / (16 * 17e9)  # at most the DMA rate


def test_a_resident_row_tile_takes_one_staging_buffer_not_three():
    """[128, 16384] @ [16384, 512] (ALBERT-xxlarge's FFN output projection over 128 tokens):
    the one 128-row tile of a is transposed through one staging buffer of K rows (32 KiB per
    partition in bf16), not three, so the kernel fits the SBUF left beside other tiles."""
    from trnsim.nki.trace import current_trace

    def crowded(out, a, b):
        sbuf = current_trace().sbuf
        sbuf.allocate(sbuf.capacity - 136 * 1024, "pinned", 4)  # 136 KiB left
        matmul(out, a, b)

    result = run(crowded, [ArraySpec((128, 16384), "bfloat16"),
                           ArraySpec((16384, 512), "bfloat16")], (128, 512), "bfloat16")
    assert result.total_ns > 0


def test_attention_sized_batches_move_several_items_per_dma():
    """256 heads' [128, 64] @ [64, 128] products (BERT-large, batch 16) used to load each
    item's operands and store its result in a DMA of their own: 3 per item. Grouped, one DMA
    moves many items of each operand."""
    specs = [ArraySpec((32, 128, 64), "bfloat16"), ArraySpec((32, 128, 64), "bfloat16")]
    result = run(matmul, specs, (32, 128, 128), "bfloat16", mode="timing", transpose_b=True)
    dmas = [i for i in result.program.instructions if i.OPCODE.startswith("Dma")]
    assert len(dmas) <= 8, len(dmas)
    matmuls = [i for i in result.program.instructions if i.OPCODE == "MultiplyMoving"]
    assert len(matmuls) == 32  # one TensorE pass per item


def test_head_views_of_projections_are_grouped_in_place(rng):
    """Attention's q and k as [b, h, s, d] views of [b, s, h*d] projections: the b and h axes do
    not step as one, so b is looped and each b's heads are grouped per DMA (the views were
    copied into dense [b*h, s, d] tensors first); a result whose items are written transposed
    (a key's gradient into its [b, s, h, d] place) is computed as B^T @ A^T, also grouped."""
    b, s, h, d = 2, 128, 4, 64
    q = rng.standard_normal((b, s, h * d)).astype(np.float32)
    k = rng.standard_normal((b, s, h * d)).astype(np.float32)

    def heads(t):  # [b, s, h*d] -> [b, h, s, d]
        return np.swapaxes(t.reshape(b, s, h, d), 1, 2)

    def scores(out, x, y):
        qv = hbm_view(x, (b, h, s, d), (s * h * d, d, h * d, 1))
        kv = hbm_view(y, (b, h, d, s), (s * h * d, d, 1, h * d))  # k^T
        matmul(out, qv, kv)

    result = run(scores, [q, k], (b, h, s, s), "float32")
    want = np.matmul(heads(q), np.swapaxes(heads(k), -1, -2))
    assert_close(result.output, want, "bfloat16")
    dmas = [i for i in result.program.instructions if i.OPCODE.startswith("Dma")]
    assert len(dmas) <= 3 * b * 2, len(dmas)

    def key_grad_in_place(out, g, x):  # dk^T[b, h, d, s] = q^T @ g, written into [b, s, h, d]
        gv = hbm_view(g, (b, h, s, s), (h * s * s, s * s, s, 1))
        qv = hbm_view(x, (b, h, d, s), (s * h * d, d, 1, h * d))
        matmul(hbm_view(out, (b, h, d, s), (s * h * d, d, 1, h * d)), qv, gv)

    g = rng.standard_normal((b, h, s, s)).astype(np.float32)
    result = run(key_grad_in_place, [g, q], (b, s, h * d), "float32")
    want = np.swapaxes(np.matmul(np.swapaxes(heads(q), -1, -2), g), -1, -2)  # [b, h, s, d]
    assert_close(result.output.reshape(b, s, h, d), np.swapaxes(want, 1, 2), "bfloat16")
    matmuls = [i for i in result.program.instructions if i.OPCODE == "MultiplyMoving"]
    assert len(matmuls) == b * h
    dmas = [i for i in result.program.instructions if i.OPCODE.startswith("Dma")]
    assert len(dmas) <= 3 * b * 2, len(dmas)


@pytest.mark.parametrize("transpose_a,transpose_b", [(False, True), (True, False)])
def test_items_past_one_tensor_engine_pass_are_grouped(rng, transpose_a, transpose_b):
    """ViT's 197 tokens: per-head items of [197, 64] @ [64, 197] (rows past 128 stationary
    columns) and [197, 197] @ [197, 64] (a contraction past 128 partitions, accumulated in
    PSUM) are grouped per DMA like items of one pass, not run one problem at a time."""
    heads, s, d = 6, 197, 64
    x = rng.standard_normal((heads, s, d) if not transpose_a else (heads, d, s)).astype(np.float32)
    y = rng.standard_normal((heads, s, d)).astype(np.float32)
    result = run(matmul, [x, y], (heads, s, s), "float32", transpose_a=transpose_a,
                 transpose_b=transpose_b) if transpose_b else None
    if transpose_b:  # scores: q @ k^T
        want = np.matmul(loaded(x, "bfloat16"), np.swapaxes(loaded(y, "bfloat16"), 1, 2))
    else:  # grad of v: p^T @ g with p [heads, s, s]
        x = rng.standard_normal((heads, s, s)).astype(np.float32)
        result = run(matmul, [x, y], (heads, s, d), "float32", transpose_a=True)
        want = np.matmul(np.swapaxes(loaded(x, "bfloat16"), 1, 2), loaded(y, "bfloat16"))
    assert_close(result.output, want, "bfloat16")
    dmas = [i for i in result.program.instructions if i.OPCODE.startswith("Dma")]
    assert len(dmas) <= 12, len(dmas)


@pytest.mark.parametrize("a_shape, b_shape", [
    ((700, 1100), (1100, 1100)),  # a partial last K tile; accumulators over two PSUM banks
    ((384, 4096), (4096, 2048)),  # a K-major operand loaded in 16 DMAs per unit (stamped)
    ((384, 11008), (11008, 256)),  # the streamed rows of a in K chunks (k-streaming)
])
def test_matmul_traces_alike_stamped_and_plain(a_shape, b_shape, monkeypatch):
    """The engine's K loops and K-major loads give, stamped (`trnsim.nki.stamp`), the program of
    tracing every iteration; check mode compares every stamped iteration with its trace."""
    from tests.kernels.harness import trace_kernel
    from trnsim.nki import stamp

    programs = {}
    for mode in ("off", "on", "check"):
        monkeypatch.setenv(stamp.STAMP_ENV, mode)
        trace, _, _ = trace_kernel(matmul, [ArraySpec(a_shape, "bfloat16"),
                                            ArraySpec(b_shape, "bfloat16")],
                                   (a_shape[0], b_shape[1]), "bfloat16")
        programs[mode] = trace.builder.program
    want = programs["off"].instructions
    assert len(want) > 0
    for mode in ("on", "check"):
        got = programs[mode].instructions
        assert len(got) == len(want)
        for i, (x, y) in enumerate(zip(got, want, strict=True)):
            assert type(x) is type(y) and x == y and x.label == y.label, (mode, i)
