"""Destination-first nisa instructions that generate, gather, select, sort and draw random values."""

from __future__ import annotations

from math import prod

from trnsim.errors import InvalidArgumentError
from trnsim.isa import (
    NGather,
    NonzeroWithCount,
    RandomBits,
    RandomRange,
    RngSeed,
    RngState,
    SequenceBounds,
    TopK,
)
from trnsim.nki.current.isa.calls import dst_arg, engine_arg, nisa_call, operand_arg, src_arg
from trnsim.nki.isa import lowering
from trnsim.nki.isa.enums import reduce_cmd_name
from trnsim.nki.isa.legacy import range_select_fill, transpose_engine
from trnsim.nki.trace import current_trace


def _pattern(pattern, free_elements: int, call: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(steps, sizes) of an iota/affine_select pattern [[step, num], ...] (up to 4-D)."""
    pairs = [(int(step), int(num)) for step, num in pattern]
    if not 1 <= len(pairs) <= 4:
        raise InvalidArgumentError(f"{call}: pattern has {len(pairs)} dimensions (1 to 4)")
    sizes = tuple(num for _, num in pairs)
    if prod(sizes) != free_elements:
        raise InvalidArgumentError(f"{call}: the pattern's sizes {list(sizes)} hold {prod(sizes)} "
                                   f"elements, the destination {free_elements} per partition")
    return tuple(step for step, _ in pairs), sizes


@nisa_call("nisa.iota")
def iota(dst, pattern, offset=0, channel_multiplier=0, name=None):
    target = dst_arg(dst)
    steps, sizes = _pattern(pattern, target.size // target.shape[0], "nisa.iota")
    lowering.iota(target, base=offset, partition_step=channel_multiplier, steps=steps,
                  free_shape=sizes)


@nisa_call("nisa.affine_select")
def affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op="equal",
                  offset=0, name=None):
    target, src = dst_arg(dst), src_arg(on_true_tile, "on_true_tile")
    steps, sizes = _pattern(pattern, src.size // src.shape[0], "nisa.affine_select")
    lowering.affine_select(target, src, cmp=cmp_op, base=offset, partition_step=channel_multiplier,
                           steps=steps, fill=float(on_false_value), free_shape=sizes)


@nisa_call("nisa.nc_transpose")
def nc_transpose(dst, data, engine=None, name=None):
    src = src_arg(data, "data")
    chosen = transpose_engine(engine, src.shape[0], src.size // src.shape[0])
    lowering.transpose(dst_arg(dst), src, chosen)


@nisa_call("nisa.local_gather")
def local_gather(dst, src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, name=None):
    lowering.local_gather(dst_arg(dst), src_arg(src_buffer, "src_buffer"), src_arg(index, "index"),
                          elems_per_index=num_elem_per_idx, valid_indices=num_valid_indices)


@nisa_call("nisa.nc_n_gather")
def nc_n_gather(dst, data, indices, name=None):
    current_trace().emit_now(NGather, dst=dst_arg(dst).access(), src=src_arg(data, "data").access(),
                             indices=src_arg(indices, "indices").access())


@nisa_call("nisa.nc_stream_shuffle")
def nc_stream_shuffle(dst, src, shuffle_mask, name=None):
    lowering.stream_shuffle(dst_arg(dst), src_arg(src, "src"), shuffle_mask)


@nisa_call("nisa.range_select")
def range_select(dst, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd="reset_reduce",
                 reduce_res=None, reduce_op="max", range_start=0, on_false_value=None, name=None):
    res = src_arg(reduce_res, "reduce_res") if reduce_res is not None else None
    lowering.range_select(dst_arg(dst), src_arg(on_true_tile, "on_true_tile"), cmp0=comp_op0,
                          bound0=src_arg(bound0, "bound0"), cmp1=comp_op1,
                          bound1=src_arg(bound1, "bound1"), range_start=range_start,
                          fill=range_select_fill(on_false_value), reduce_dst=res,
                          reduce_cmd=reduce_cmd_name(reduce_cmd))


@nisa_call("nisa.select_reduce")
def select_reduce(dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd="idle",
                  reduce_op="max", reverse_pred=False, name=None):
    res = src_arg(reduce_res, "reduce_res") if reduce_res is not None else None
    lowering.select_reduce(dst_arg(dst), src_arg(predicate, "predicate"), src_arg(on_true, "on_true"),
                           operand_arg(on_false, "on_false"), reverse=reverse_pred, reduce_dst=res,
                           reduce_cmd=reduce_cmd_name(reduce_cmd))


@nisa_call("nisa.max8")
def max8(dst, src, name=None):
    lowering.max8(dst_arg(dst), src_arg(src, "src"))


@nisa_call("nisa.nc_find_index8")
def nc_find_index8(dst, data, vals, name=None):
    lowering.find_index8(dst_arg(dst), src_arg(data, "data"), src_arg(vals, "vals"))


@nisa_call("nisa.nc_match_replace8")
def nc_match_replace8(dst, data, vals, imm, dst_idx=None, name=None):
    index = dst_arg(dst_idx, "dst_idx") if dst_idx is not None else None
    lowering.match_replace8(dst_arg(dst), src_arg(data, "data"), src_arg(vals, "vals"), imm, index)


@nisa_call("nisa.sequence_bounds")
def sequence_bounds(dst, segment_ids, name=None):
    current_trace().emit_now(SequenceBounds, dst=dst_arg(dst).access(),
                             src=src_arg(segment_ids, "segment_ids").access())


@nisa_call("nisa.nonzero_with_count")
def nonzero_with_count(dst, src, index_offset=0, padding_val=-1, name=None):
    current_trace().emit_now(NonzeroWithCount, dst=dst_arg(dst).access(),
                             src=src_arg(src, "src").access(), index_offset=int(index_offset),
                             padding=int(padding_val))


@nisa_call("nisa.topk")
def topk(val_dst, idx_dst, src, n, name=None):
    current_trace().emit_now(TopK, values=dst_arg(val_dst, "val_dst").access(),
                             indices=dst_arg(idx_dst, "idx_dst").access(),
                             src=src_arg(src, "src").access(), n=int(n))


@nisa_call("nisa.rng")
def rng(dst, engine="vector", name=None):
    current_trace().emit_now(RandomBits, dst=dst_arg(dst).access(),
                             engine=engine_arg(engine) or "vector")


@nisa_call("nisa.rand2")
def rand2(dst, min, max, name=None):
    current_trace().emit_now(RandomRange, dst=dst_arg(dst).access(),
                             low=lowering.operand(operand_arg(min, "min")),
                             high=lowering.operand(operand_arg(max, "max")))


@nisa_call("nisa.set_rng_seed")
def set_rng_seed(src_seeds, name=None):
    current_trace().emit_now(RngSeed, src=src_arg(src_seeds, "src_seeds").access(), engine="vector")


@nisa_call("nisa.rand_set_state")
def rand_set_state(src_seeds, engine="gpsimd", name=None):
    current_trace().emit_now(RngSeed, src=src_arg(src_seeds, "src_seeds").access(),
                             engine=engine_arg(engine) or "gpsimd")


@nisa_call("nisa.rand_get_state")
def rand_get_state(dst, engine="gpsimd", name=None):
    current_trace().emit_now(RngState, dst=dst_arg(dst).access(), engine=engine_arg(engine) or "gpsimd")

