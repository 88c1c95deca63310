"""Constructs nki-samples' kernels use (flash attention's sink scalar, resize's integer index
arithmetic, select-and-scatter's nl.where, rmsnorm's PSUM modulo allocation), each checked
against numpy so CI does not need the samples' repository."""

import numpy as np
import pytest

from trnsim import nki
from trnsim.errors import LimitExceededError, UnsupportedError
from trnsim.nki import compiler as ncc
from trnsim.nki import isa as nisa
from trnsim.nki import language as nl


def test_a_one_element_tile_broadcasts_across_partitions(rng):
    # flash attention backward: nl.load(sinks[b, h], dtype=...) is a [1] tile added to [P, 1]
    sinks = rng.standard_normal((2, 3)).astype(np.float32)
    col = rng.standard_normal((128, 1)).astype(np.float32)

    @nki.jit
    def plane(s, c):
        out = nl.ndarray((2, 3, 128, 2), dtype=nl.float32, buffer=nl.shared_hbm)
        for b in nl.affine_range(2):
            for h in nl.affine_range(3):
                sigma = nl.load(s[b, h], dtype=nl.float32)
                zeros = nl.zeros((nl.par_dim(128), 1), dtype=nl.float32)
                nl.store(out[b, h, :, 0:1], value=nl.add(zeros, sigma, dtype=nl.float32))
                nl.store(out[b, h, :, 1:2], value=nl.multiply(nl.load(c), sigma))
        return out

    got = plane(sinks, col)
    np.testing.assert_array_equal(got[..., 0], np.broadcast_to(sinks[:, :, None], (2, 3, 128)))
    np.testing.assert_allclose(got[..., 1:2], col * sinks[:, :, None, None], rtol=1e-6)


def test_integer_tiles_divide_and_mod_in_native_integer_arithmetic():
    # resize_nearest: nl.floor(pos_iota / out_w, dtype=int32) with an int32 iota tile; an
    # int32-only operation runs on GpSimd in integer arithmetic (the quotient truncates)
    @nki.jit
    def coords(x):
        out = nl.ndarray((3, 128, 1), dtype=nl.int32, buffer=nl.shared_hbm)
        pos = nisa.iota(2176 + nl.arange(128)[:, None], dtype=nl.int32)
        nl.store(out[0], value=nl.floor(pos / 38, dtype=nl.int32))
        nl.store(out[1], value=nl.mod(pos, 38, dtype=nl.int32))
        nl.store(out[2], value=nl.subtract(pos, 4000) / 7)  # negative: C's truncation toward zero
        return out

    got = coords(np.zeros((1, 1), np.float32))
    pos = 2176 + np.arange(128, dtype=np.int64)[:, None]
    np.testing.assert_array_equal(got[0], pos // 38)
    np.testing.assert_array_equal(got[1], pos % 38)
    np.testing.assert_array_equal(got[2], np.trunc((pos - 4000) / 7).astype(np.int32))


def test_a_float_operand_keeps_float_arithmetic_on_integer_tiles():
    @nki.jit
    def scaled(x):
        out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        pos = nisa.iota(nl.arange(128)[:, None], dtype=nl.int32)
        nl.store(out, value=nl.multiply(pos, 30 / 59, dtype=nl.float32))
        return out

    expected = (np.arange(128, dtype=np.float32) * np.float32(30 / 59))[:, None]
    np.testing.assert_allclose(scaled(np.zeros((1, 1), np.float32)), expected, rtol=1e-6)


def test_an_expression_of_mgrid_indices_has_the_whole_grid_shape():
    # select_and_scatter: nisa.iota(3 * g.y + g.z) over nl.mgrid[0:p, 0:w, 0:3, 0:3] is a dense
    # [p, w, 3, 3] tile (nl.mgrid is numpy's dense mgrid), usable with full-shape masks
    @nki.jit
    def ranks(x):
        out = nl.ndarray((128, 4, 3, 3), dtype=nl.float32, buffer=nl.shared_hbm)
        g = nl.mgrid[0:128, 0:4, 0:3, 0:3]
        linear = nisa.iota(3 * g.y + g.z, dtype=nl.uint32)
        assert linear.shape == (128, 4, 3, 3)
        hit = nl.equal(nl.load(x), 1.0, dtype=nl.uint8)
        nl.store(out, value=nl.where(hit, linear, 9, dtype=nl.float32))
        return out

    rng = np.random.default_rng(1)
    x = rng.integers(0, 2, (128, 4, 3, 3)).astype(np.float32)
    linear = np.broadcast_to((3 * np.arange(3)[:, None] + np.arange(3)), (128, 4, 3, 3))
    np.testing.assert_array_equal(ranks(x), np.where(x == 1.0, linear, 9).astype(np.float32))


def test_psum_modulo_allocation_maps_logical_blocks_onto_fewer_banks(rng):
    # allocated rmsnorm_qkv: (16, 128, 512) fp32 PSUM tiles in one bank (num_bank_tiles=(1,));
    # 8 blocks from bank 2 would pass the 8 banks; block m lives in bank 2 + m % 1
    x = rng.standard_normal((8, 128, 512)).astype(np.float32)

    @nki.jit
    def through_one_bank(a):
        out = nl.ndarray((8, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        staged = nl.ndarray((8, nl.par_dim(128), 512), dtype=nl.float32,
                            buffer=ncc.psum.mod_alloc(base_bank=2, num_bank_tiles=(1,)))
        ring = nl.ndarray((8, nl.par_dim(128), 512), dtype=nl.float32,
                          buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
        for m in nl.affine_range(8):
            staged[m] = nl.multiply(nl.load(a[m]), float(m + 1))
            ring[m] = nl.copy(staged[m])
            nl.store(out[m], value=ring[m])
        return out

    got = through_one_bank(x)
    np.testing.assert_allclose(got, x * np.arange(1, 9, dtype=np.float32)[:, None, None], rtol=1e-6)


def test_sbuf_tiles_dead_before_the_scope_ends_free_their_space(rng):
    # select_and_scatter keeps a padded copy of its input alive by scope only; the compiler
    # frees a tile after its last use, so the later [128, 112, 112] tiles fit
    x = rng.standard_normal((128, 24000)).astype(np.float32)
    y = rng.standard_normal((128, 24000)).astype(np.float32)

    @nki.jit
    def two_big(a, b):
        out = nl.ndarray((128, 24000), dtype=nl.float32, buffer=nl.shared_hbm)
        first = nl.load(a)  # 96000 bytes per partition
        total = nl.sum(first, axis=1, keepdims=True)  # first's last use
        second = nl.load(b)  # 96000 more: 192000 > 180224 if first lived to the scope's end
        second[...] = nl.add(second, total)
        nl.store(out, value=second)
        return out

    np.testing.assert_allclose(two_big(x, y), y + x.sum(axis=1, keepdims=True), rtol=1e-4,
                               atol=1e-3)


def test_sbuf_that_does_not_fit_even_with_liveness_is_still_refused():
    @nki.jit
    def too_big(a):
        out = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.shared_hbm)
        t1 = nl.full((128, 30000), 1.0, dtype=nl.float32)
        t2 = nl.full((128, 30000), 2.0, dtype=nl.float32)
        nl.store(out, value=nl.add(t1[:, 0:2], t2[:, 0:2]))
        return out

    with pytest.raises(LimitExceededError, match="sbuf allocation"):
        too_big(np.zeros((1, 1), np.float32))


def test_an_allocation_function_is_called_by_keyword_per_block(rng):
    # allocated SD attention: ncc.psum.alloc(functools.partial(psum_addr, bank_map=...)) with
    # psum_addr(bank_map, idx, pdim_size, fdim_size): the compiler passes idx=... by keyword
    import functools

    x = rng.standard_normal((2, 128, 512)).astype(np.float32)

    def psum_addr(bank_map, idx, pdim_size, fdim_size):
        return (bank_map[idx], 0, 0)

    @nki.jit
    def banks(a, bank_map):
        out = nl.ndarray((2, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        staged = nl.ndarray((2, nl.par_dim(128), 512), dtype=nl.float32,
                            buffer=ncc.psum.alloc(functools.partial(psum_addr, bank_map=bank_map)))
        for m in nl.affine_range(2):
            staged[m] = nl.multiply(nl.load(a[m]), 3.0)
            nl.store(out[m], value=nl.copy(staged[m]))
        return out

    np.testing.assert_allclose(banks(x, {(0,): 3, (1,): 4}), 3 * x, rtol=1e-6)


def test_an_allocation_function_may_spread_blocks_across_banks(rng):
    # allocated SD attention: blocks (0,) and (1,) in banks 1 and 5 ("avoid bank collision");
    # a tile in bank 2, between them (where a packed second block would land), keeps its values
    import functools

    x = rng.standard_normal((2, 128, 512)).astype(np.float32)
    y = rng.standard_normal((128, 512)).astype(np.float32)

    def psum_addr(bank_map, idx, pdim_size, fdim_size):
        return (bank_map[idx], 0, 0)

    @nki.jit
    def spread(a, b, bank_map):
        out = nl.ndarray((3, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        between = nl.ndarray((nl.par_dim(128), 512), dtype=nl.float32,
                             buffer=ncc.psum.mod_alloc(base_bank=2))
        between[...] = nl.multiply(nl.load(b), 2.0)
        staged = nl.ndarray((2, nl.par_dim(128), 512), dtype=nl.float32,
                            buffer=ncc.psum.alloc(functools.partial(psum_addr, bank_map=bank_map)))
        for m in nl.affine_range(2):
            staged[m] = nl.multiply(nl.load(a[m]), 3.0)
        for m in nl.affine_range(2):
            nl.store(out[m], value=nl.copy(staged[m]))
        nl.store(out[2], value=nl.copy(between))
        return out

    got = spread(x, y, {(0,): 1, (1,): 5})
    np.testing.assert_allclose(got[:2], 3 * x, rtol=1e-6)
    np.testing.assert_allclose(got[2], 2 * y, rtol=1e-6)


def test_an_allocation_function_off_a_regular_grid_is_refused(rng):
    x = rng.standard_normal((3, 128, 512)).astype(np.float32)

    @nki.jit
    def irregular(a):
        out = nl.ndarray((3, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        where = {(0,): 0, (1,): 1, (2,): 5}
        staged = nl.ndarray((3, nl.par_dim(128), 512), dtype=nl.float32,
                            buffer=ncc.psum.alloc(lambda idx, pdim_size, fdim_size:
                                                  (where[idx], 0, 0)))
        for m in nl.affine_range(3):
            staged[m] = nl.load(a[m])
            nl.store(out[m], value=nl.copy(staged[m]))
        return out

    with pytest.raises(UnsupportedError, match=r"block \(2,\) at byte 10240, not 4096"):
        irregular(x)


def test_a_placement_inside_a_loop_body_keeps_its_first_iterations_address(rng):
    # allocated SD attention advances `cur_addr` inside an affine_range body: NKI traces the
    # body once, so every iteration's tile sits at the first trace's address; four 64 KiB tiles
    # at advancing addresses would pass SBUF's end
    x = rng.standard_normal((4, 128, 16384)).astype(np.float32)

    @nki.jit
    def advancing(a):
        out = nl.ndarray((4, 128, 16384), dtype=nl.float32, buffer=nl.shared_hbm)
        cur_addr = 0
        for i in nl.affine_range(4):
            t = nl.ndarray((nl.par_dim(128), 16384), dtype=nl.float32,
                           buffer=ncc.sbuf.mod_alloc(base_addr=cur_addr))
            cur_addr += 16384 * 4
            t[...] = nl.load(a[i])
            nl.store(out[i], value=nl.multiply(t, 2.0))
        return out

    np.testing.assert_allclose(advancing(x), 2 * x, rtol=1e-6)


def test_a_shared_constant_is_an_hbm_tensor_in_the_dtype_asked_for(rng):
    # allocated SD attention: nl.shared_constant(np.identity(128, dtype=np.int8),
    # dtype=nl.bfloat16), loaded and used as a TensorE identity
    x = rng.standard_normal((128, 64)).astype(np.float32)

    @nki.jit
    def through_identity(a):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        identity = nl.shared_constant(np.identity(128, dtype=np.int8), dtype=nl.bfloat16)
        eye = nl.load(identity)
        moved = nl.load(a, dtype=nl.bfloat16)
        nl.store(out, value=nl.copy(nisa.nc_matmul(eye, moved), dtype=nl.float32))
        return out

    expected = x.astype(nl.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(through_identity(x), expected)
