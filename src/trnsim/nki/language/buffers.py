"""Buffer names, par_dim, SPMD placement markers and nl.tile_size."""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.errors import InvalidArgumentError

sbuf = "sbuf"
psum = "psum"
hbm = "private_hbm"  # legacy: hbm is an alias of private_hbm
private_hbm = "private_hbm"
shared_hbm = "shared_hbm"
BUFFERS = ("sbuf", "psum", "hbm", "private_hbm", "shared_hbm")


@dataclass(frozen=True)
class par_dim:
    """Marks the partition dimension in a shape: (4, nl.par_dim(128), 512)."""

    size: int

    def __int__(self) -> int:
        return self.size

    def __index__(self) -> int:
        return self.size


@dataclass(frozen=True)
class nc:
    """kernel[nl.nc(2)]: spread the launch grid's instances over NeuronCores."""

    count: int

    def __mul__(self, size: int) -> spmd_dim:  # nl.nc(2) * 2 is nl.spmd_dim(nl.nc(2), 2)
        return spmd_dim(self, size)

    def __rmul__(self, size: int) -> spmd_dim:  # 2 * nl.nc(2) is nl.spmd_dim(2, nl.nc(2))
        return spmd_dim(size, self)


@dataclass(frozen=True)
class spmd_dim:
    """A grid dimension spread over NeuronCores: ``spmd_dim(n, nc(k))`` has n*k instances, core
    = index % k (the cores interleave); ``spmd_dim(nc(k), n)`` has k*n, core = index // n (each
    core takes a contiguous block). An int placement k (older form) means n instances over k
    cores in blocks."""

    size: int | nc
    placement: nc | int | None = None

    def layout(self) -> tuple[int, int, bool]:
        """(instances, cores, interleaved)."""
        if isinstance(self.size, nc):
            return self.size.count * int(self.placement or 1), self.size.count, False
        if isinstance(self.placement, nc):
            return int(self.size) * self.placement.count, self.placement.count, True
        return int(self.size), int(self.placement or 1), False


def split_shape(shape) -> tuple[tuple[int, ...], int]:
    """(plain int shape, index of the partition dim). Without par_dim, dim 0 is the partition."""
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    marks = [i for i, s in enumerate(shape) if isinstance(s, par_dim)]
    return tuple(dimension(s, shape) for s in shape), (marks[0] if marks else 0)


def dimension(size, shape) -> int:
    """One dimension of a tile shape: a positive integer (a float such as 256.7 or a negative
    size is an error, as the NKI compiler reports it, never truncated)."""
    if isinstance(size, par_dim):
        size = size.size
    if isinstance(size, bool) or not hasattr(size, "__index__"):
        raise InvalidArgumentError(f"shape {_shown(shape)}: dimension {size!r} is not an integer")
    size = size.__index__()
    if size <= 0:
        raise InvalidArgumentError(f"shape {_shown(shape)}: dimension {size} must be positive")
    return size


def _shown(shape) -> str:
    return "(" + ", ".join(str(getattr(s, "size", s)) for s in shape) + ")"


class tile_size:
    """Tile-size limits (NeuronCore-v2/v3 values from the architecture guides)."""

    pmax = 128
    psum_fmax = 512
    psum_bank_fmax = 512
    psum_bank_fmax_bytes = 2048
    psum_num_banks = 8
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    bn_stats_fmax = 512
    psum_min_align = 4
    sbuf_min_align = 4
    total_available_sbuf_size = 176 * 1024  # NC-v2: 192 KiB per partition minus 16 KiB reserved
    sbuf_size_bytes = 192 * 1024
    sbuf_fmax_bytes = 176 * 1024
    sbuf_fmax = 176 * 1024 // 4
