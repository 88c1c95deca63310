"""Memory regions (nl.sbuf, nl.psum, nl.hbm, nl.private_hbm, nl.shared_hbm) and nl.tile_size.

Regions are `MemoryRegion` members that compare equal to their names, so `t.buffer == nl.sbuf`
and legacy-style string checks both work. `tile_size` reads the target being traced (or, outside
a kernel, the default target) so its byte-based fields match the NeuronCore version.
"""

from __future__ import annotations

from enum import Enum

from trnsim.errors import InvalidArgumentError


class MemoryRegion(str, Enum):
    sbuf = "sbuf"
    psum = "psum"
    private_hbm = "private_hbm"
    shared_hbm = "shared_hbm"

    def __str__(self) -> str:
        return self.value


sbuf = MemoryRegion.sbuf
psum = MemoryRegion.psum
private_hbm = MemoryRegion.private_hbm
hbm = MemoryRegion.private_hbm  # alias of private_hbm
shared_hbm = MemoryRegion.shared_hbm


def region(name) -> MemoryRegion:
    """The MemoryRegion of a buffer name (legacy "hbm" is private HBM)."""
    value = getattr(name, "value", name)
    value = "private_hbm" if value == "hbm" else value
    try:
        return MemoryRegion(value)
    except ValueError:
        raise InvalidArgumentError(f"unknown buffer {name!r}; use nl.sbuf, nl.psum, nl.hbm, "
                                   f"nl.private_hbm or nl.shared_hbm") from None


def is_hbm(buffer) -> bool:
    return region(buffer) in (private_hbm, shared_hbm)


def is_on_chip(buffer) -> bool:
    return region(buffer) in (sbuf, psum)


def is_psum(buffer) -> bool:
    return region(buffer) is psum


def is_sbuf(buffer) -> bool:
    return region(buffer) is sbuf


class _TileSize:
    """Tile-size limits of the target NeuronCore (architecture guides; hardware.md section 4)."""

    pmax = 128
    psum_fmax = 512  # deprecated (0.4): use psum_bank_fmax
    psum_bank_fmax = 512  # fp32 elements per PSUM bank per partition
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    bn_stats_fmax = 512
    psum_min_align = 4
    sbuf_min_align = 4

    @staticmethod
    def _core():
        from trnsim.nki.current.kernel import default_target
        from trnsim.nki.trace import current_trace

        trace = current_trace(required=False)
        return trace.core if trace is not None else default_target()

    @property
    def psum_bank_fmax_bytes(self) -> int:
        return self._core().psum_bank_bytes_per_partition

    @property
    def psum_num_banks(self) -> int:
        return self._core().psum_banks  # trnsim reserves no bank for transposes

    @property
    def sbuf_size_bytes(self) -> int:
        """Total SBUF capacity, all partitions."""
        return self._core().sbuf_bytes

    @property
    def sbuf_fmax_bytes(self) -> int:
        """Usable bytes per partition (the compiler's reserve excluded)."""
        return self._core().sbuf_usable_bytes_per_partition

    @property
    def sbuf_fmax(self) -> int:
        return self.sbuf_fmax_bytes // 4

    @property
    def total_available_sbuf_size(self) -> int:
        """Deprecated (0.4): usable bytes per partition."""
        return self.sbuf_fmax_bytes

    def __repr__(self) -> str:
        return "nl.tile_size"


tile_size = _TileSize()
