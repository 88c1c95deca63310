"""Results computed again from unchanged inputs: the compiler keeps the first, not the repeat.

neuronx-cc runs middle-end transformations on NKI kernels unless a kernel opts out
(``@nki.compiler.skip_middle_end_transformations`` in [L] nki.compiler). The documentation does
not list those transformations; that common-subexpression elimination and loop-invariant code
motion are among them is trnsim's inference from the fused Mamba tutorial's figures
(nki/guides/tutorials/fused_mamba.rst): ``mamba_v2`` moves the loads of ``delta``/``u`` out of
the ``state`` loop, after which ``delta * u`` is the same in every state, and its
VectorE time per (channel tile, state) falls from ~4.7k cycles (``mamba_v1``: 2.34 ms at 92%
VectorE-active, 512 iterations) to ~3.5k (1.61 ms at 99.6%), one ``2N`` tensor_tensor less.

trnsim does the same while tracing: an element-wise instruction (tensor_tensor, tensor_scalar,
activation without accumulators) that would write a fresh whole tile from the very access
patterns, operands and input versions an earlier one used, while that earlier result is still
untouched, is not emitted again; the new tile becomes a view of the earlier result. A result
whose inputs live outside the loop it was computed in is kept, like a hoisted one, until the
inputs' scope ends (its SBUF bytes are charged for that long).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from trnsim.isa import AccessPattern, Memory

if TYPE_CHECKING:
    from trnsim.isa import Instruction
    from trnsim.nki.tile import Tile
    from trnsim.nki.trace import Trace


def emit_once(trace: Trace, result: Tile, inputs: tuple[Tile, ...], cls: type[Instruction],
              **fields) -> None:
    """Emit the instruction writing the tile `result` (its ``dst``) from `inputs`, unless the same
    result is still held in a tile: then `result` becomes that tile (its own bytes are freed)
    and nothing is emitted."""
    dst = result  # (`fields` holds its access pattern as ``dst``)
    key = _key(trace, dst, inputs, fields)
    key = None if key is None else (cls.__name__, *key)
    held = trace.invariants.get(key) if key is not None else None
    if held is not None:
        tile, version = held
        storage = tile._storage
        if not storage.freed and trace.write_versions.get(storage.name) == version:
            trace.note_uses([tile.access(), *(v for k, v in fields.items()
                                              if k != "dst" and isinstance(v, AccessPattern))])
            trace.release(dst)
            dst._become(tile)
            return
        del trace.invariants[key]
    trace.emit_now(cls, **fields)
    if key is None:
        return
    storage = dst._storage
    trace.invariants[key] = (dst, trace.write_versions.get(storage.name))
    if len(trace.invariants) >= max(_PRUNE_AT, trace.invariants_prune_at):
        _prune(trace)
    depth = max((len(t._storage.scope) for t in inputs), default=0)
    for scope in trace.scopes[depth:]:  # kept, like a hoisted result, while its inputs live
        if storage in scope.tiles:
            scope.tiles.remove(storage)
            if depth:
                trace.scopes[depth - 1].tiles.append(storage)


_PRUNE_AT = 4096  # results held before those whose tiles were freed are dropped


def _prune(trace: Trace) -> None:
    """Forget results whose tiles are gone (a long trace would otherwise keep them all)."""
    for key in [k for k, (tile, _) in trace.invariants.items() if tile._storage.freed]:
        del trace.invariants[key]
    trace.invariants_prune_at = 2 * len(trace.invariants)  # amortised O(1) per result


def _key(trace: Trace, dst: Tile, inputs: tuple[Tile, ...], fields: dict) -> tuple | None:
    """What identifies the computation, or None when it is not one trnsim may reuse: `dst` must
    be a whole, automatically allocated SBUF tile nothing wrote yet, every input an on-chip tile
    other than `dst` (its version says whether it changed since), no operand register-addressed,
    and no dynamic loop around (its body runs again after later writes)."""
    storage = dst._storage
    ap = fields["dst"]
    # (the destination's tests first: most results go into a view of a tile written before)
    if (storage is None or storage.memory is not Memory.SBUF or storage.name not in trace._sbuf_by_name
            or storage.name in trace._written_onchip
            or ap.partition_start != 0 or ap.partitions != storage.partitions
            or not ap.is_contiguous or ap.offset != storage.offset
            or ap.free_size * ap.dtype.itemsize != storage.bytes_per_partition):
        return None
    if any(scope.kind.endswith(" body") for scope in trace.scopes):
        return None
    registers = getattr(trace, "_register_offsets", {})
    if any(isinstance(v, AccessPattern) and v in registers for v in fields.values()):
        return None
    if any(t._storage is None or t._storage.memory is Memory.HBM or t._storage is storage
           for t in inputs):
        return None
    bases = {t._storage.name: t._storage.offset for t in inputs}
    names = set(bases)
    operands = tuple((name, value) for name, value in sorted(fields.items(), key=lambda kv: kv[0])
                     if name != "dst")
    if any(isinstance(v, AccessPattern) and v.tensor not in names for _, v in operands):
        return None  # an operand this call did not name as an input: not tracked
    # views relative to their tile: a tile spilled and reloaded elsewhere is the same input
    operands = tuple((name, replace(v, offset=v.offset - bases[v.tensor])
                      if isinstance(v, AccessPattern) else v) for name, v in operands)
    versions = tuple(sorted((n, trace.write_versions.get(n, 0)) for n in names))
    return (operands, ap.dtype.name, tuple(dst.shape), versions)
