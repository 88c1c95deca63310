"""Constructs nki-samples' kernels use (flash attention's sink scalar, resize's integer index
arithmetic, select-and-scatter's nl.where, rmsnorm's PSUM modulo allocation), each checked
against numpy so CI does not need the samples' repository."""

import numpy as np

from trnsim import nki
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
