"""`nki.isa` (nisa) of the legacy `neuronxcc.nki` API: instruction-level calls returning tiles."""

from trnsim.nki.api_boundary import module_getattr
from trnsim.nki.isa.enums import (
    dge_mode,
    dma_engine,
    engine,
    gpsimd_dma,
    gpsimd_engine,
    matmul_perf_mode,
    nc_version,
    oob_mode,
    reduce_cmd,
    scalar_engine,
    sync_engine,
    tensor_engine,
    unknown_engine,
    vector_engine,
)
from trnsim.nki.isa.legacy import (
    activation,
    activation_reduce,
    affine_select,
    bn_aggr,
    bn_stats,
    builtin_custom_op,
    dma_copy,
    dma_transpose,
    dropout,
    get_nc_version,
    iota,
    local_gather,
    max8,
    memset,
    nc_find_index8,
    nc_match_replace8,
    nc_matmul,
    nc_stream_shuffle,
    nc_transpose,
    range_select,
    reciprocal,
    scalar_tensor_tensor,
    select_reduce,
    tensor_copy,
    tensor_copy_dynamic_dst,
    tensor_copy_dynamic_src,
    tensor_copy_predicated,
    tensor_partition_reduce,
    tensor_reduce,
    tensor_scalar,
    tensor_scalar_reduce,
    tensor_tensor,
    tensor_tensor_scan,
)
from trnsim.nki.isa.legacy_more import sequence_bounds, tensor_scalar_cumulative
from trnsim.nki.language.dtypes import fp32

constants = None  # replaced below: nisa.constants.engine etc.


class _Constants:
    engine = engine
    reduce_cmd = reduce_cmd
    dge_mode = dge_mode
    oob_mode = oob_mode
    nc_version = nc_version


constants = _Constants()

__getattr__ = module_getattr("nisa", "current", __name__)

__all__ = [name for name in dir() if not name.startswith("_")]
