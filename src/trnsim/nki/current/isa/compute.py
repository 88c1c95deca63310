"""Destination-first nisa compute instructions (VectorE, ScalarE, GpSimd): element-wise, scalar
broadcast, reductions, activations, copies.

Each function checks its operands and lowers through `trnsim.nki.isa.lowering`, the same code the
legacy API's pending results use, so both APIs emit identical instructions.
"""

from __future__ import annotations

from trnsim.errors import InvalidArgumentError
from trnsim.isa import (
    Activate2,
    Exponential,
    TensorScalarCumulative,
    activation_function,
    alu_op,
)
from trnsim.nki.api_boundary import require_version
from trnsim.nki.current.isa.calls import dst_arg, engine_arg, nisa_call, operand_arg, src_arg
from trnsim.nki.isa import lowering
from trnsim.nki.isa.enums import reduce_cmd_name
from trnsim.nki.language.compound import _free_axes
from trnsim.nki.tile import Tile
from trnsim.nki.trace import current_trace


def _reduce_dst(value, what: str = "reduce_res"):
    return src_arg(value, what) if value is not None else None


def _reduce_op(reduce_op, reduce_res, reduce_cmd: str):
    """An activation's reduction: add unless given, only when something is reduced."""
    if reduce_op is None and (reduce_res is not None or reduce_cmd != "idle"):
        return "add"
    return reduce_op


@nisa_call("nisa.tensor_copy")
def tensor_copy(dst, src, engine=None, name=None):
    chosen = engine_arg(engine)
    if chosen is not None and chosen.value == "scalar":
        require_version(current_trace().core, 3, "nisa.tensor_copy(engine=scalar)")
    lowering.tensor_copy(dst_arg(dst), src_arg(src, "src"), engine=chosen)


@nisa_call("nisa.memset")
def memset(dst, value, engine=None, name=None):
    target = dst_arg(dst)
    if target.dtype_spec.packed > 1 and float(value) != 0.0:
        raise InvalidArgumentError(f"nisa.memset: x4-packed {target.dtype_spec.name} can only be set "
                                   f"to 0; got {value}")
    lowering.memset(target, value, engine=engine_arg(engine))


@nisa_call("nisa.tensor_copy_predicated")
def tensor_copy_predicated(dst, src, predicate, reverse_pred=False, name=None):
    lowering.tensor_copy_predicated(dst_arg(dst), operand_arg(src, "src"),
                                    src_arg(predicate, "predicate"), reverse=reverse_pred)


@nisa_call("nisa.tensor_tensor")
def tensor_tensor(dst, data1, data2, op, engine=None, name=None):
    lowering.tensor_tensor(dst_arg(dst), src_arg(data1, "data1"), src_arg(data2, "data2"), op,
                           engine=engine_arg(engine))


@nisa_call("nisa.tensor_scalar")
def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False,
                  engine=None, name=None):
    lowering.tensor_scalar(dst_arg(dst), src_arg(data, "data"), op0, operand_arg(operand0, "operand0"),
                           reverse0=reverse0, op1=op1, operand1=operand_arg(operand1, "operand1"),
                           reverse1=reverse1, engine=engine_arg(engine))


@nisa_call("nisa.scalar_tensor_tensor")
def scalar_tensor_tensor(dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False,
                         name=None):
    lowering.scalar_tensor_tensor(dst_arg(dst), src_arg(data, "data"), op0,
                                  operand_arg(operand0, "operand0"), op1,
                                  src_arg(operand1, "operand1"), reverse0=reverse0, reverse1=reverse1)


@nisa_call("nisa.tensor_scalar_reduce")
def tensor_scalar_reduce(dst, data, op0, operand0, reduce_op, reduce_res=None, reverse0=False,
                         reduce_cmd="reset_reduce", reduce_init=None, reduce_res_negate=False,
                         name=None):
    cmd = reduce_cmd_name(reduce_cmd)
    if cmd not in ("reset_reduce", "reduce", "load_reduce"):
        raise InvalidArgumentError(f"nisa.tensor_scalar_reduce: reduce_cmd {cmd!r} (use reset_reduce, "
                                   f"reduce or load_reduce)")
    if (cmd == "load_reduce") != (reduce_init is not None):
        raise InvalidArgumentError("nisa.tensor_scalar_reduce: reduce_init is given exactly when "
                                   "reduce_cmd is load_reduce")
    lowering.tensor_scalar(dst_arg(dst), src_arg(data, "data"), op0, operand_arg(operand0, "operand0"),
                           reverse0=reverse0, reduce_op=reduce_op, reduce_dst=_reduce_dst(reduce_res),
                           reduce_cmd=cmd, reduce_init=operand_arg(reduce_init, "reduce_init"),
                           reduce_negate=bool(reduce_res_negate))


@nisa_call("nisa.tensor_reduce")
def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None):
    src = src_arg(data, "data")
    lowering.tensor_reduce(dst_arg(dst), src, op, _free_axes(src, axis), negate=negate)


@nisa_call("nisa.tensor_partition_reduce")
def tensor_partition_reduce(dst, op, data, name=None):
    target, src = dst_arg(dst), src_arg(data, "data")
    name_ = getattr(op, "__name__", op)
    if str(name_) == "average":  # nl.average: the sum over partitions, scaled by 1/P
        lowering.tensor_partition_reduce(target, src, "add")
        lowering.tensor_scalar(target, target, "multiply", 1.0 / src.shape[0])
        return
    lowering.tensor_partition_reduce(target, src, op)


@nisa_call("nisa.tensor_scalar_cumulative")
def tensor_scalar_cumulative(dst, src, op0, op1, imm0, imm1=None, reduce_cmd="reset_reduce",
                             name=None):
    current_trace().emit_now(
        TensorScalarCumulative, dst=dst_arg(dst).access(), src=src_arg(src, "src").access(),
        op0=alu_op(op0).name, op1=alu_op(op1).name,
        imm0=lowering.operand(operand_arg(imm0, "imm0")),
        imm1=lowering.operand(operand_arg(imm1, "imm1")), reduce_cmd=reduce_cmd_name(reduce_cmd))


@nisa_call("nisa.tensor_tensor_scan")
def tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False,
                       name=None):
    lowering.tensor_tensor_scan(dst_arg(dst), src_arg(data0, "data0"), src_arg(data1, "data1"),
                                operand_arg(initial, "initial"), op0, op1, reverse0=reverse0,
                                reverse1=reverse1)


@nisa_call("nisa.activation")
def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
               reduce_cmd="idle", name=None):
    func, _ = activation_function(op)
    cmd = reduce_cmd_name(reduce_cmd)
    _check_bias(bias)
    lowering.activation(dst_arg(dst), src_arg(data, "data"), func, scale=operand_arg(scale, "scale"),
                        bias=operand_arg(bias, "bias"),
                        reduce_op=_reduce_op(reduce_op, reduce_res, cmd), reduce_cmd=cmd,
                        reduce_dst=_reduce_dst(reduce_res))


def _check_bias(bias) -> None:
    """NeuronCore-v2's activation bias is a [P, 1] tensor; a scalar bias needs v3 (nisa docs)."""
    if bias is not None and not isinstance(bias, Tile):
        require_version(current_trace().core, 3, "nisa.activation with a scalar bias")


@nisa_call("nisa.activation_reduce")
def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None):
    func, _ = activation_function(op)
    _check_bias(bias)
    lowering.activation(dst_arg(dst), src_arg(data, "data"), func, scale=operand_arg(scale, "scale"),
                        bias=operand_arg(bias, "bias"), reduce_op=reduce_op,
                        reduce_cmd="reset_reduce", reduce_dst=_reduce_dst(reduce_res))


@nisa_call("nisa.activate2")
def activate2(dst, op, data, imm0, imm1, op0, op1, relu_param=0.0, reverse0=False, reverse1=False,
              reduce_op=None, reduce_res=None, reduce_cmd="idle", name=None):
    func = "prelu" if getattr(op, "__name__", op) == "prelu" else activation_function(op)[0]
    cmd = reduce_cmd_name(reduce_cmd)
    res = _reduce_dst(reduce_res)
    current_trace().emit_now(
        Activate2, dst=dst_arg(dst).access(), src=src_arg(data, "data").access(), func=func,
        op0=alu_op(op0).name, imm0=lowering.operand(operand_arg(imm0, "imm0")),
        op1=alu_op(op1).name, imm1=lowering.operand(operand_arg(imm1, "imm1")),
        relu_param=lowering.operand(operand_arg(relu_param, "relu_param")), reverse0=reverse0,
        reverse1=reverse1, reduce_op=lowering.op_name(_reduce_op(reduce_op, reduce_res, cmd)),
        reduce_cmd=cmd, reduce_dst=res.access() if res is not None else None)


@nisa_call("nisa.exponential")
def exponential(dst, src, max_value=0.0, reduce_res=None, reduce_cmd="idle", reduce_init=0.0,
                name=None):
    res = _reduce_dst(reduce_res)
    current_trace().emit_now(
        Exponential, dst=dst_arg(dst).access(), src=src_arg(src, "src").access(),
        max_value=lowering.operand(operand_arg(max_value, "max_value")),
        reduce_dst=res.access() if res is not None else None, reduce_cmd=reduce_cmd_name(reduce_cmd),
        reduce_init=lowering.operand(operand_arg(reduce_init, "reduce_init")))


@nisa_call("nisa.reciprocal")
def reciprocal(dst, data, name=None):
    lowering.reciprocal(dst_arg(dst), src_arg(data, "data"))


@nisa_call("nisa.dropout")
def dropout(dst, data, prob, name=None):
    lowering.dropout(dst_arg(dst), src_arg(data, "data"), operand_arg(prob, "prob"))


@nisa_call("nisa.bn_stats")
def bn_stats(dst, data, name=None):
    lowering.bn_stats(dst_arg(dst), src_arg(data, "data"))


@nisa_call("nisa.bn_aggr")
def bn_aggr(dst, data, name=None):
    lowering.bn_aggr(dst_arg(dst), src_arg(data, "data"))
