"""k.elementwise, copy (strided, transposing, reshaping views), concat and pad."""

import numpy as np
import pytest

from tests.kernels.conftest import BF16, assert_close
from tests.kernels.harness import run
from trnsim.compiler.fused import Step
from trnsim.compiler.lowering.steps import to_callable
from trnsim.isa.ops import ACTIVATIONS
from trnsim.kernels import concat, copy, elementwise, pad
from trnsim.kernels.layout import hbm_view
from trnsim.nki import language as nl


def test_elementwise_broadcasts_columns_rows_and_dtypes(rng):
    a = rng.standard_normal((4, 300, 70)).astype(np.float32)
    col = rng.standard_normal((300, 1)).astype(np.float32)
    row = rng.standard_normal((70,)).astype(BF16)
    program = lambda t: nl.add(nl.multiply(nl.gelu(t[0]), t[1]), t[2])  # noqa: E731
    result = run(elementwise, [[a, col, row]], a.shape, "float32", program=program)
    want = ACTIVATIONS["gelu"](a) * col + row.astype(np.float32)
    assert_close(result.output, want, "float32")


@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16"])
def test_elementwise_compiler_program_on_dense_tensors(rng, out_dtype):
    """Dense operands of any shape go through [128, n / 128] blocks (odd sizes leave a tail)."""
    x = rng.standard_normal((3, 7, 61)).astype(np.float32)
    y = rng.standard_normal((3, 7, 61)).astype(np.float32)
    program = to_callable((Step("sub", ("in0", "in1")), Step("tanh", ("s0",)),
                           Step("mul", ("s1", 2.0))), has_acc=False)
    result = run(elementwise, [[x, y]], x.shape, out_dtype, program=program)
    assert_close(result.output, np.tanh(x - y) * 2, out_dtype)


def test_copy_of_permuted_transposed_and_reshaped_views(rng):
    a = rng.standard_normal((4, 300, 70)).astype(np.float32)

    def permuted(out, x):  # unit stride on a middle axis
        copy(out, hbm_view(x, (70, 4, 300), (1, 300 * 70, 70)))

    def transposed(out, x):  # the last two axes swapped: TensorE transposes
        copy(out, hbm_view(x, (4, 70, 300), (300 * 70, 1, 70)))

    def reshaped(out, x):  # a transposed view copied into another shape, row-major order
        copy(out, hbm_view(x, (4, 70, 300), (300 * 70, 1, 70)))

    assert_close(run(permuted, [a], (70, 4, 300), "float32").output, a.transpose(2, 0, 1),
                 "float32", rtol=0)
    assert_close(run(transposed, [a], (4, 70, 300), "float32").output, a.transpose(0, 2, 1),
                 "float32", rtol=0)
    assert_close(run(reshaped, [a], (4, 21000), "float32").output,
                 a.transpose(0, 2, 1).reshape(4, -1), "float32", rtol=0)


def test_copy_reshape_without_a_common_refinement(rng):
    """[6, 4] (a strided view) into [4, 6]: made dense first, then copied flat."""
    b = np.arange(24, dtype=np.float32)

    def kernel(out, x):
        copy(out, hbm_view(x, (6, 4), (1, 6)))

    result = run(kernel, [b], (4, 6), "float32")
    assert np.array_equal(result.output, b.reshape(4, 6).T.reshape(4, 6))


def test_concat_and_pad(rng):
    a = rng.standard_normal((4, 30, 7)).astype(np.float32)
    parts = [a, a[:, :5], a[:, :11]]
    result = run(concat, [parts], (4, 46, 7), "float32", axis=1)
    assert np.array_equal(result.output, np.concatenate(parts, axis=1))
    result = run(pad, [a], (4, 31, 10), "float32", pads=((0, 0), (3, -2), (1, 2)), value=-1.5)
    want = np.pad(a[:, :-2], ((0, 0), (3, 0), (1, 2)), constant_values=-1.5)
    assert np.array_equal(result.output, want)


def test_reshaping_a_transposed_view_transposes_once_in_its_own_shape(rng):
    """ConvBERT reads [2, 1728, 200] as [2, 200, 1728] and reshapes it to [1200, 64, 9]: the
    transpose runs in 128 x 128 blocks of the view's own shape, then the dense result is
    reshaped (refined first, the transpose ran on 9-element blocks: thousands of instructions)."""
    x = rng.standard_normal((2, 1728, 200)).astype(np.float32)

    def kernel(out, x):
        copy(out, hbm_view(x, (2, 200, 1728), (1728 * 200, 1, 200)))

    result = run(kernel, [x], (1200, 64, 9), "float32")
    np.testing.assert_array_equal(result.output, x.transpose(0, 2, 1).reshape(1200, 64, 9))
    assert len(result.program.instructions) < 400


def test_a_transposed_view_with_split_contiguous_axes_transposes_in_full_blocks(rng):
    """ViT's patch gradient: [N, O, 14, 14] read as [N, 14, 14, O] (its patch axes contiguous
    with each other). The two patch axes step through as one, so the transpose runs in
    128-wide blocks over all 196 patches, not 14-wide ones per patch row."""
    x = rng.standard_normal((2, 256, 14, 14)).astype(np.float32)

    def kernel(out, x):
        copy(out, hbm_view(x, (2, 14, 14, 256), (256 * 196, 14, 1, 196)))

    result = run(kernel, [x], (2, 14, 14, 256), "float32")
    np.testing.assert_array_equal(result.output, x.transpose(0, 2, 3, 1))
    # per image 2 x 2 blocks of [196, 256], each a load, a transpose, an eviction and a store
    # (per patch row it was 14 x 2 blocks of 14 x 128)
    assert len(result.program.instructions) < 2 * 2 * 2 * 4 + 16


def test_a_sliding_window_view_is_copied_row_by_row_not_transposed(rng):
    """nn.Unfold's windows over [2, 192, 208] (window start and position both step by 1): rows
    are contiguous, so it is a plain DMA copy. Read as a transpose, it took 307,200 instructions."""
    x = rng.standard_normal((2, 192, 208, 1)).astype(np.float32)

    def kernel(out, x):
        copy(out, hbm_view(x, (2, 192, 9, 200, 1, 1), (39936, 208, 1, 1, 0, 0)))

    result = run(kernel, [x], (2, 192, 9, 200, 1, 1), "float32")
    want = np.stack([x[:, :, k:k + 200, 0] for k in range(9)], axis=2)[..., None, None]
    np.testing.assert_array_equal(result.output, want)
    assert len(result.program.instructions) < 2000


def test_merging_attention_heads_moves_whole_head_bands_per_transfer(rng):
    """[b, h, s, d] read as [b, s, h, d] (attention's heads merged back): each block is
    [s on partitions, h x d] in one DMA with two free axes, not [h, d] pieces on 4 partitions;
    an elementwise op on such a view tiles the same way."""
    x = rng.standard_normal((2, 4, 128, 64)).astype(np.float32)
    y = rng.standard_normal((2, 128, 4, 64)).astype(np.float32)
    view = dict(shape=(2, 128, 4, 64), strides=(4 * 128 * 64, 64, 128 * 64, 1))

    def merge(out, x):
        copy(out, hbm_view(x, view["shape"], view["strides"]))

    def add(out, x, y):
        elementwise(out, [hbm_view(x, view["shape"], view["strides"]), y],
                    program=lambda t: nl.add(t[0], t[1]))

    result = run(merge, [x], (2, 128, 256), "float32")
    np.testing.assert_array_equal(result.output, x.transpose(0, 2, 1, 3).reshape(2, 128, 256))
    assert len(result.program.instructions) <= 8
    summed = run(add, [x, y], (2, 128, 4, 64), "float32")
    assert_close(summed.output, x.transpose(0, 2, 1, 3) + y, "float32", rtol=0)
    assert len(summed.program.instructions) <= 16


def test_narrow_rows_move_several_row_tiles_per_dma(rng):
    """Attention's scores [b*h, s, s] with a per-row statistic [b*h, s, 1] and a bias row: each
    partition takes consecutive rows, so one DMA per operand moves many 128-row tiles (it was
    one DMA per operand per 128 x 128 tile: 128 here); broadcasts spread on chip."""
    x = rng.standard_normal((32, 128, 128)).astype(np.float32)
    stat = rng.standard_normal((32, 128, 1)).astype(np.float32)
    grad = rng.standard_normal((32, 128, 128)).astype(np.float32)
    bias = rng.standard_normal(128).astype(np.float32)

    def program(t):
        return nl.add(nl.subtract(t[2], nl.multiply(t[0], t[1])), t[3])

    result = run(elementwise, [[x, stat, grad, bias]], (32, 128, 128), "float32",
                 program=program)
    np.testing.assert_array_equal(result.output, (grad - x * stat) + bias)
    dmas = [i for i in result.program.instructions if i.OPCODE.startswith("Dma")]
    assert len(dmas) <= 16, len(dmas)


def test_a_mask_broadcast_over_heads_keeps_the_rows_on_all_partitions(rng):
    """scores [b, h, s, s] + mask [b, 1, s, s]: the mask's stride-0 head axis cannot fold
    into rows, and in the views' own order the best tiling was [h, s * s] on h = 16
    partitions; with the query axis moved before the heads each block is [s on partitions,
    h, s] and the mask's head axis a free axis broadcast on chip."""
    x = rng.standard_normal((2, 16, 128, 128)).astype(np.float32)
    mask = rng.standard_normal((2, 1, 128, 128)).astype(np.float32)
    result = run(elementwise, [[x, mask]], x.shape, "float32",
                 program=lambda t: nl.add(t[0], t[1]))
    np.testing.assert_array_equal(result.output, x + mask)
    computes = [i for i in result.program.instructions if not i.OPCODE.startswith("Dma")
                and i.writes()]
    assert computes and all(w.partitions == 128 for i in computes for w in i.writes()), \
        sorted({w.partitions for i in computes for w in i.writes()})


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_a_transposing_copy_moves_efficient_runs(rng, dtype):
    """A [1100, 2100] matrix copied transposed (a K-major rewrite of a matmul operand): the
    loads and stores move runs of at least the DMA guide's efficient 2 KiB per partition
    wherever the shape has them (128 x 128 blocks moved 256-byte bf16 runs, half the engines'
    rate); the partial tiles on both axes are copied exactly."""
    from trnsim.isa.dma import contiguous_run_bytes
    from trnsim.kernels.elementwise import TRANSPOSE_RUN_BYTES

    x = rng.standard_normal((1100, 2100)).astype(BF16 if dtype == "bfloat16" else np.float32)

    def kernel(out, x):
        copy(out, hbm_view(x, (2100, 1100), (1, 2100)))

    result = run(kernel, [x], (2100, 1100), dtype)
    np.testing.assert_array_equal(result.output, x.T)
    moved = [(min(contiguous_run_bytes(ins.src), contiguous_run_bytes(ins.dst)), ins.src.nbytes)
             for ins in result.program.instructions if type(ins).__name__ == "DmaCopy"]
    efficient = sum(n for r, n in moved if r >= TRANSPOSE_RUN_BYTES)
    # what is left is the 76-row tail of the 1100 axis and the 52-column tail of the 2100 one
    assert efficient >= 0.9 * sum(n for _, n in moved), sorted(moved)[:8]
