"""`nki.isa` (nisa) of the current API (nki 0.3 - 0.6): destination-first instructions.

Every call writes into the tensor passed first (``dst``) and returns None; operands are NkiTensor
views. Instructions lower through `trnsim.nki.isa.lowering`, shared with the legacy API.
"""

from trnsim.errors import InvalidArgumentError
from trnsim.nki.api_boundary import module_getattr
from trnsim.nki.current.isa.calls import NkiInstruction
from trnsim.nki.current.isa.compute import (
    activate2,
    activation,
    activation_reduce,
    bn_aggr,
    bn_stats,
    dropout,
    exponential,
    memset,
    reciprocal,
    scalar_tensor_tensor,
    tensor_copy,
    tensor_copy_predicated,
    tensor_partition_reduce,
    tensor_reduce,
    tensor_scalar,
    tensor_scalar_cumulative,
    tensor_scalar_reduce,
    tensor_tensor,
    tensor_tensor_scan,
)
from trnsim.nki.current.isa.data_movement import (
    core_barrier,
    dma_compute,
    dma_copy,
    dma_transpose,
    sendrecv,
)
from trnsim.nki.current.isa.enums import (
    dge_mode,
    dma_engine,
    engine,
    gpsimd_engine,
    matmul_perf_mode,
    nc_version,
    oob_mode,
    reduce_cmd,
    scalar_engine,
    tensor_engine,
    unknown_engine,
    vector_engine,
)
from trnsim.nki.current.isa.registers import (
    VirtualRegister,
    register_alloc,
    register_load,
    register_move,
    register_store,
)
from trnsim.nki.current.isa.special import (
    affine_select,
    iota,
    local_gather,
    max8,
    nc_find_index8,
    nc_match_replace8,
    nc_n_gather,
    nc_stream_shuffle,
    nc_transpose,
    nonzero_with_count,
    rand2,
    rand_get_state,
    rand_set_state,
    range_select,
    rng,
    select_reduce,
    sequence_bounds,
    set_rng_seed,
    topk,
)
from trnsim.nki.current.isa.tensor_engine import nc_matmul, nc_matmul_mx, quantize_mx
from trnsim.nki.trace import current_trace


class NkiValidationError(InvalidArgumentError):
    """Raised when hardware constraints are violated (trnsim raises TrnsimError subclasses)."""


def get_nc_version() -> nc_version:
    return nc_version(current_trace().core.version)


def get_nc_sub_version() -> int:
    return 0



__getattr__ = module_getattr("nisa", "legacy", __name__)

__all__ = [
    "NkiInstruction",
    "NkiValidationError",
    "VirtualRegister",
    "activate2",
    "activation",
    "activation_reduce",
    "affine_select",
    "bn_aggr",
    "bn_stats",
    "core_barrier",
    "dge_mode",
    "dma_compute",
    "dma_copy",
    "dma_engine",
    "dma_transpose",
    "dropout",
    "engine",
    "exponential",
    "get_nc_sub_version",
    "get_nc_version",
    "gpsimd_engine",
    "iota",
    "local_gather",
    "matmul_perf_mode",
    "max8",
    "memset",
    "nc_find_index8",
    "nc_match_replace8",
    "nc_matmul",
    "nc_matmul_mx",
    "nc_n_gather",
    "nc_stream_shuffle",
    "nc_transpose",
    "nc_version",
    "nonzero_with_count",
    "oob_mode",
    "quantize_mx",
    "rand2",
    "rand_get_state",
    "rand_set_state",
    "range_select",
    "reciprocal",
    "reduce_cmd",
    "register_alloc",
    "register_load",
    "register_move",
    "register_store",
    "rng",
    "scalar_engine",
    "scalar_tensor_tensor",
    "select_reduce",
    "sendrecv",
    "sequence_bounds",
    "set_rng_seed",
    "tensor_copy",
    "tensor_copy_predicated",
    "tensor_engine",
    "tensor_partition_reduce",
    "tensor_reduce",
    "tensor_scalar",
    "tensor_scalar_cumulative",
    "tensor_scalar_reduce",
    "tensor_tensor",
    "tensor_tensor_scan",
    "topk",
    "unknown_engine",
    "vector_engine",
]
