"""LNC=2 lowering (`trnsim.compiler.lowering.lnc`): how each kernel is cut between the two
physical cores of a logical NeuronCore, and when a core must wait for the other's result."""

import pytest

from trnsim import hardware, kernels
from trnsim.compiler.lowering.lnc import Handover, cut_point, split_call, worth_splitting
from trnsim.nki.trace import Trace

CORE = hardware.instance("trn2.48xlarge").chip.core


@pytest.fixture
def hbm():
    trace = Trace("lnc", CORE)
    count = iter(range(1000))
    return lambda *shape, dtype="float32": trace.hbm_tensor(f"t{next(count)}", shape, dtype,
                                                            kind="input")


def _shapes(parts, *indices):
    return [[tuple(p.args[i].shape) for i in indices] for p in parts]


def test_long_axes_are_cut_on_a_multiple_of_128():
    assert cut_point(1000) == 512 and cut_point(4096) == 2048
    assert cut_point(384) == 192 and cut_point(7) == 4 and cut_point(2) == 1


def test_a_weight_bound_matmul_is_cut_along_the_weights_output_columns(hbm):
    out, a, b = hbm(2, 4096), hbm(2, 2048), hbm(2048, 4096)
    parts = split_call(kernels.matmul, (out, a, b), {"bias": hbm(4096), "extras": [hbm(2, 4096)]})
    assert _shapes(parts, 0, 1, 2) == [[(2, 2048), (2, 2048), (2048, 2048)]] * 2
    assert [tuple(p.kwargs["bias"].shape) for p in parts] == [(2048,)] * 2
    assert [tuple(p.kwargs["extras"][0].shape) for p in parts] == [(2, 2048)] * 2
    # a transposed weight ([n, k]) is cut along its rows
    parts = split_call(kernels.matmul, (out, a, hbm(4096, 2048)), {"transpose_b": True})
    assert _shapes(parts, 2) == [[(2048, 2048)]] * 2


def test_an_activation_bound_matmul_is_cut_along_tokens_and_reads_the_weight_whole(hbm):
    out, a, b = hbm(1024, 256), hbm(1024, 256), hbm(256, 256)
    parts = split_call(kernels.matmul, (out, a, b), {})
    assert _shapes(parts, 0, 1, 2) == [[(512, 256), (512, 256), (256, 256)]] * 2
    batched = split_call(kernels.matmul, (hbm(4, 256, 256), hbm(4, 256, 64), hbm(4, 64, 256)), {})
    assert _shapes(batched, 0, 1, 2) == [[(2, 256, 256), (2, 256, 64), (2, 64, 256)]] * 2


def test_attention_is_cut_by_heads_or_else_by_unmasked_queries(hbm):
    q = hbm(1, 4, 64, 32)
    parts = split_call(kernels.attention, (hbm(1, 4, 64, 32), q, hbm(1, 4, 64, 32),
                                           hbm(1, 4, 64, 32)), {"mask_kind": "causal"})
    assert _shapes(parts, 0, 1, 2, 3) == [[(1, 2, 64, 32)] * 4] * 2
    one_head = (hbm(1, 1, 64, 32), hbm(1, 1, 64, 32), hbm(1, 1, 96, 32), hbm(1, 1, 96, 32))
    # a causal mask's offsets are the whole sequence's: not cut
    assert split_call(kernels.attention, one_head, {"mask_kind": "causal"}) is None
    parts = split_call(kernels.attention, one_head, {"mask_kind": "none", "mask": hbm(1, 1, 64, 96)})
    assert _shapes(parts, 0, 1, 2, 3) == [[(1, 1, 32, 32), (1, 1, 32, 32), (1, 1, 96, 32),
                                           (1, 1, 96, 32)]] * 2
    assert [tuple(p.kwargs["mask"].shape) for p in parts] == [(1, 1, 32, 96)] * 2


def test_a_norm_is_cut_by_rows_and_reads_its_weight_whole(hbm):
    parts = split_call(kernels.norm, (hbm(1, 64, 256), hbm(1, 64, 256)),
                       {"normalized": 1, "residual": hbm(1, 64, 256), "weight": hbm(256)})
    assert _shapes(parts, 0, 1) == [[(1, 32, 256), (1, 32, 256)]] * 2
    assert [tuple(p.kwargs["residual"].shape) for p in parts] == [(1, 32, 256)] * 2
    assert [tuple(p.kwargs["weight"].shape) for p in parts] == [(256,)] * 2


def test_a_reduction_is_cut_along_a_kept_axis(hbm):
    x = hbm(4, 8, 16)
    parts = split_call(kernels.reduce, (hbm(4, 16), x), {"op": "sum", "axes": (1,)})
    assert _shapes(parts, 0, 1) == [[(2, 16), (2, 8, 16)]] * 2
    parts = split_call(kernels.reduce, (hbm(8, 16), x), {"op": "sum", "axes": (0,)})
    assert _shapes(parts, 0, 1) == [[(4, 16), (4, 4, 16)]] * 2
    parts = split_call(kernels.reduce, (hbm(1, 8, 16), x), {"op": "max", "axes": (0,),
                                                             "keepdim": True})
    assert _shapes(parts, 0, 1) == [[(1, 4, 16), (4, 4, 16)]] * 2
    assert split_call(kernels.reduce, (hbm(4), x), {"op": "argmax", "axes": (1, 2)}) is None


def test_softmax_and_concat_are_not_cut_along_their_own_axis(hbm):
    parts = split_call(kernels.softmax, (hbm(64, 128), hbm(64, 128)), {"axis": 0})
    assert _shapes(parts, 0, 1) == [[(64, 64), (64, 64)]] * 2
    parts = split_call(kernels.concat, (hbm(8, 96), [hbm(3, 96), hbm(5, 96)]), {"axis": 0})
    assert [[tuple(t.shape) for t in p.args[1]] for p in parts] == [[(3, 48), (5, 48)]] * 2
    parts = split_call(kernels.concat, (hbm(8, 96), [hbm(8, 32), hbm(8, 64)]), {"axis": 1})
    assert [[tuple(t.shape) for t in p.args[1]] for p in parts] == [[(4, 32), (4, 64)]] * 2


def test_kernels_without_a_rule_run_whole_on_core_0(hbm):
    table, index = hbm(1000, 64), hbm(4, dtype="int32")
    assert split_call(kernels.gather, (hbm(4, 64), table, index), {"kind": "embedding"}) is None


def test_only_kernels_with_enough_work_are_worth_splitting(hbm):
    big = (hbm(2, 4096), hbm(2, 2048), hbm(2048, 4096))  # 32 MiB of fp32 weights
    small = (hbm(2, 64), hbm(2, 64), hbm(64, 64))
    assert worth_splitting(kernels.matmul, big, {}, CORE)
    assert not worth_splitting(kernels.matmul, small, {}, CORE)


def test_a_core_waits_only_for_what_the_other_core_wrote(hbm):
    t = hbm(64, 256)
    handover = Handover()
    handover.wrote(0, t[:, 0:128])
    handover.wrote(1, t[:, 128:256])
    assert not handover.crossing(0, t[:, 0:128])  # its own columns
    assert not handover.crossing(0, t[:, 64:128])
    assert handover.crossing(1, t[0:32, :])  # rows: half of them are core 0's
    assert handover.crossing(0, t)
    handover.met(t._storage.name)  # after a barrier both see everything
    assert not handover.crossing(0, t)
