"""Programs as JSON-ready data (artifacts and compile caches; never pickle).

Instructions are frozen dataclasses of plain values, access patterns, dtypes and engines, so a
program round-trips through a small tagged encoding. Constant tensor data is not encoded here:
the artifact stores it separately (safetensors) and `program_from_data` takes it back by name.
A program's `Repeats` record is not saved: a loaded program is planned instruction by
instruction (a record read from a file that no longer matches its instructions would plan them
wrongly, silently).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from trnsim.errors import InvalidArgumentError
from trnsim.isa.access import AccessPattern, Memory
from trnsim.isa.instruction import Engine, Instruction
from trnsim.isa.program import Program, TensorDecl
from trnsim.numerics import DType
from trnsim.numerics import dtype as as_dtype

FORMAT = 1


def opcode_table() -> dict[str, type[Instruction]]:
    """Every opcode a saved program may name, by name: the ISA's own registry, filled by importing
    trnsim's ISA modules (nothing a file names is imported)."""
    from trnsim import isa  # every module of the ISA, so every opcode is registered

    return dict(isa.OPCODES)


def encode(value: Any) -> Any:
    if isinstance(value, AccessPattern):
        return {"ap": [value.memory.value, value.dtype.name, value.partitions,
                       [list(d) for d in value.dims], value.offset, value.partition_start,
                       value.partition_step, value.tensor]}
    if isinstance(value, DType):
        return {"dtype": value.name}
    if isinstance(value, Engine):
        return {"engine": value.value}
    if isinstance(value, tuple):
        return {"tuple": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise InvalidArgumentError(f"cannot serialise {type(value).__name__} in a program")


def decode(value: Any) -> Any:
    if isinstance(value, dict):
        if "ap" in value:
            memory, dt, partitions, dims, offset, start, step, tensor = value["ap"]
            return AccessPattern(memory=Memory(memory), dtype=as_dtype(dt), partitions=partitions,
                                 dims=tuple(tuple(d) for d in dims), offset=offset,
                                 partition_start=start, partition_step=step, tensor=tensor)
        if "dtype" in value:
            return as_dtype(value["dtype"])
        if "engine" in value:
            return Engine(value["engine"])
        if "tuple" in value:
            return tuple(decode(v) for v in value["tuple"])
        raise InvalidArgumentError(f"unknown encoded value {sorted(value)}")
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def instruction_to_data(ins: Instruction) -> dict:
    fields = {f.name: encode(getattr(ins, f.name)) for f in dataclasses.fields(ins)}
    return {"opcode": ins.OPCODE, "fields": fields}


def instruction_from_data(data: dict, opcodes: dict[str, type[Instruction]]) -> Instruction:
    op = data.get("opcode")
    cls = opcodes.get(op)
    if cls is None:
        raise InvalidArgumentError(f"unknown opcode {op!r} in a saved program")
    return cls(**{k: decode(v) for k, v in data["fields"].items()})


def program_to_data(program: Program) -> dict:
    tensors = [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype.name, "kind": t.kind,
                **({"on_chip": True} if t.on_chip else {}),
                **({"on_chip_from": t.on_chip_from} if t.on_chip_from else {})}
               for t in program.tensors.values()]
    return {"format": FORMAT, "name": program.name, "target": program.target.name,
            "tensors": tensors,
            "instructions": [instruction_to_data(i) for i in program.instructions],
            "sbuf_peak": program.sbuf_peak_bytes_per_partition,
            "psum_peak": program.psum_peak_bytes_per_partition}


def program_from_data(data: dict, constants: dict | None = None) -> Program:
    from trnsim import hardware

    if data.get("format") != FORMAT:
        raise InvalidArgumentError(f"saved program format {data.get('format')!r} is not {FORMAT}")
    constants = constants or {}
    program = Program(name=data["name"], target=hardware.core(data["target"]))
    for t in data["tensors"]:
        array = constants.get(t["name"]) if t["kind"] == "constant" else None
        if t["kind"] == "constant" and array is None:
            raise InvalidArgumentError(f"saved program needs constant {t['name']!r}, which is missing")
        program.tensors[t["name"]] = TensorDecl(t["name"], tuple(t["shape"]), as_dtype(t["dtype"]),
                                                t["kind"], array, t.get("on_chip", False),
                                                t.get("on_chip_from", 0))
    opcodes = opcode_table()
    program.instructions = [instruction_from_data(i, opcodes) for i in data["instructions"]]
    program.sbuf_peak_bytes_per_partition = data.get("sbuf_peak", 0)
    program.psum_peak_bytes_per_partition = data.get("psum_peak", 0)
    return program


