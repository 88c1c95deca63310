"""Lowering: a kernel-level graph -> one `isa.Program`, by calling `trnsim.kernels` in one trace.

Every ``k.*`` node becomes one call of its kernel inside a single NKI trace, so the whole model is
one instruction stream and the simulator sees weight DMAs of the next kernel overlap the current
kernel's compute (the schedule pass's intent). Instructions carry the node (``k.matmul:name``) as
their label and the model's source line as their source, for the per-op breakdown and errors.
HBM tensors: model inputs, weights (constants with data; laid out as the layout pass decided),
one tensor per kernel result, and views that are strided access patterns into their base.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from trnsim import kernels
from trnsim.compiler.errors import IRError
from trnsim.compiler.interpret import EVAL
from trnsim.compiler.ir import Graph, Node
from trnsim.compiler.kernel_ops import KERNEL_OPS
from trnsim.compiler.lowering.hbm import reuse_internal_hbm
from trnsim.compiler.lowering.lnc import Handover, Part, split_call, tiles_in, worth_splitting
from trnsim.compiler.lowering.onchip import keep_on_chip
from trnsim.compiler.lowering.replay import HbmIndex, Template
from trnsim.compiler.lowering.steps import to_callable
from trnsim.errors import TrnsimError
from trnsim.isa import CoreBarrier, InstructionList, Memory, Program, Repeats
from trnsim.nki.tile import Axis, Tile
from trnsim.nki.trace import Trace, tracing
from trnsim.numerics import cast
from trnsim.numerics import dtype as as_dtype
from trnsim.sim.collector import collector_paused

VIEWS = ("reshape", "permute", "expand", "slice")
LEAVES = ("scalar", "full", "arange")


@dataclass
class KernelCall:
    """One kernel of the lowered model: for reports and errors."""

    label: str  # "k.matmul:matmul_5", the instructions' label
    op: str
    node: str
    source: str | None
    flops: int = 0


@dataclass
class Lowered:
    program: Program
    inputs: list[str]  # HBM tensor names of the graph inputs, in call order
    outputs: list[str]  # HBM tensor names of the graph outputs, in order
    kernels: list[KernelCall] = field(default_factory=list)
    # LNC=2: core 1's program beside `program` (core 0's), and the HBM tensors they share
    partner: Program | None = None
    shared: tuple[str, ...] = ()

    @property
    def programs(self) -> list[Program]:
        return [self.program] + ([self.partner] if self.partner is not None else [])


def lower(graph: Graph, core, *, name: str | None = None, lnc: int = 1) -> Lowered:
    """Trace every kernel of `graph` into one program for NeuronCore `core`; with `lnc=2`, into
    one program per physical core of a logical NeuronCore, each kernel split between them
    (`trnsim.compiler.lowering.lnc`)."""
    # the collector paused: see `trnsim.sim.collector` (on BERT-large it doubled the first
    # lowering's time); the program's millions of objects then join the oldest generation
    with collector_paused(promote=True):
        return _Lowering(graph, core, name or graph.name, lnc).run()


class _Lowering:
    def __init__(self, graph: Graph, core, name: str, lnc: int = 1) -> None:
        self.graph = graph
        self.traces = [Trace(name, core) for _ in range(lnc)]
        for trace in self.traces:  # replays are deferred: built when read (`InstructionList`)
            trace.builder.program.instructions = InstructionList()
        for other in self.traces[1:]:
            other.shared_outputs = self.traces[0].shared_outputs
        self.trace = self.traces[0]
        self.declared: dict[str, Tile] = {}  # HBM tensors of the lowering (shared under LNC=2)
        self.handover = Handover()
        self.crossing: set[str] = set()  # tensors one core reads after the other wrote them
        self.env: dict[int, Tile] = {}
        self.kn_weights: dict[int, Tile] = {}
        self.calls: list[KernelCall] = []
        self.output_ids = {id(n) for n in graph.outputs}
        self.users = graph.users()
        # per core: kernel-call signature -> its first call's instructions, to replay
        self.templates: list[dict[tuple, Template]] = [{} for _ in self.traces]
        # per core: the instructions touching HBM, filled call by call (`replay.HbmIndex`), and
        # how many instructions the calls emitted (all of them, unless something else emitted)
        self.hbm = [HbmIndex() for _ in self.traces]
        self.emitted = [0 for _ in self.traces]
        # per core: where each template's traced call sits in the program and its HBM-touching
        # offsets, and the spans its replays fill (`isa.Repeats`, for the planner)
        self.sources: list[dict[tuple, tuple[int, tuple[int, ...]]]] = [{} for _ in self.traces]
        self.repeats: list[list[tuple[int, int, int, tuple[int, ...]]]] = [[] for _ in self.traces]
        self.write_through: dict[int, Tile] = {}  # copy-view node id -> buffer its producer filled

    def run(self) -> Lowered:
        with tracing(self.trace):
            for node in self.graph.nodes:
                if node.op == "input":
                    self.env[id(node)] = self._declare(node.name, node.shape, node.dtype,
                                                       kind="input")
                elif node.op in ("constant", *LEAVES):
                    continue  # materialised on first use (weights may need a layout first)
                elif node.op in VIEWS:
                    self.env[id(node)] = self._view(node)
                elif node.op in KERNEL_OPS:
                    self._kernel(node)
                else:
                    raise IRError(f"{node!r}: {node.op} is not kernel level; run the pass pipeline")
            outputs = [self._output(n, i) for i, n in enumerate(self.graph.outputs)]
        for trace in self.traces:
            trace.flush()
        inputs = [self.env[id(n)]._storage.name for n in self.graph.inputs]
        programs = [trace.builder.program for trace in self.traces]
        # the passes below rename HBM operands only (the spans' varying offsets): the record
        # stays true
        for program, spans in zip(programs, self.repeats, strict=True):
            program.repeats = Repeats(program.instructions, spans) if spans else None
        if len(programs) == 1:
            program = programs[0]
            index = self.hbm[0] if self.emitted[0] == len(program.instructions) else None
            index = index or HbmIndex.of(program.instructions)
            keep_on_chip(program, self.trace.core, index=index)
            reuse_internal_hbm(program, index=index)
            return Lowered(program, inputs, outputs, self.calls)
        # ASSUMPTION: under LNC=2 what crosses cores goes through HBM, and HBM buffers are not
        # reused (reuse across two instruction streams would need barriers of its own)
        for program in programs:
            keep_on_chip(program, self.trace.core, exclude=self.crossing, partial=True)
        return Lowered(programs[0], inputs, outputs, self.calls, partner=programs[1],
                       shared=tuple(self.declared))

    def _declare(self, name: str, shape, dtype, *, kind: str, data=None) -> Tile:
        """An HBM tensor of the lowering, declared alike in every core's program."""
        tile = self.trace.hbm_tensor(name, shape, dtype, kind=kind, data=data)
        for other in self.traces[1:]:
            twin = other.hbm_tensor(name if kind == "output" else tile._storage.name, shape,
                                    dtype, kind=kind, data=data)
            if twin._storage.name != tile._storage.name:
                raise IRError(f"LNC=2 lowering: tensor {tile._storage.name!r} is "
                              f"{twin._storage.name!r} on core 1")
        self.declared[tile._storage.name] = tile
        return tile

    # --- operands -------------------------------------------------------------------------
    def tile(self, node: Node) -> Tile:
        found = self.env.get(id(node))
        if found is None:
            found = self.env[id(node)] = self._leaf(node)
        return found

    def _leaf(self, node: Node) -> Tile:
        if node.op != "constant" and node.op not in LEAVES:
            raise IRError(f"{node!r} ({node.op}) is used before it is computed")
        return self._declare(node.name, node.shape or (1,), node.dtype, kind="constant",
                             data=_Lazy(self.graph, node, False, node.dtype))

    def weight_kn(self, node: Node) -> Tile:
        """A [.., n, k] weight stored transposed ([.., k, n]) once, at load time."""
        found = self.kn_weights.get(id(node))
        if found is None:
            shape = (*node.shape[:-2], node.shape[-1], node.shape[-2])
            found = self.kn_weights[id(node)] = self._declare(
                f"{node.name}{KN_SUFFIX}", shape, node.dtype, kind="constant",
                data=_Lazy(self.graph, node, True, node.dtype))
        return found

    def _view(self, node: Node) -> Tile:
        if id(node) in self.write_through:
            return self.write_through[id(node)]
        if node.attrs.get("fold", "copy") == "copy":
            out = self._result(node)
            self.call(node, kernels.copy, out, self._logical_view(node))
            return out
        return self._strided(node)

    def _logical_view(self, node: Node, src: Tile | None = None) -> Tile:
        """The view applied to its input's tile (a reshape copies in row-major element order,
        so for a copy the source is returned as is)."""
        src = self.tile(node.inputs[0]) if src is None else src
        a = node.attrs
        if node.op == "reshape":
            return src
        if node.op == "permute":
            axes = tuple(src._axes[d] for d in a["dims"])
        elif node.op == "slice":
            key = [slice(None)] * len(src._axes)
            key[a["axis"]] = slice(a["start"], a["end"], a["step"])
            return src[tuple(key)]
        else:  # expand: new leading axes and size-1 axes broadcast with stride 0
            lead = len(node.shape) - len(src._axes)
            axes = tuple(Axis(n, 0, 0) for n in node.shape[:lead]) + tuple(
                Axis(n, 0, 0) if axis.size == 1 and n != 1 else axis
                for axis, n in zip(src._axes, node.shape[lead:], strict=True))
        return Tile(self.trace, src._storage, axes, src.dtype_spec, src._poffset, src._foffset,
                    name=src.name)

    def _strided(self, node: Node) -> Tile:
        """The view as a strided access of its root buffer (node.attrs['access'])."""
        root, chain = node, []
        while root.op in VIEWS and root.attrs.get("fold", "copy") != "copy":
            chain.append(root)
            root = root.inputs[0]
        base = self.tile(root)
        if not _is_whole(base):
            # the root is itself a strided view (a constant-index gather, a kernel writing in its
            # consumer's layout): the layout pass's access assumes a dense root, so the views are
            # applied to the root's own pattern instead, or the root is made dense first
            composed = self._compose(reversed(chain), base)
            if composed is not None:
                return composed
            dense = self._declare(f"{root.name}_dense", root.shape or (1,), root.dtype,
                                  kind="internal")
            self.call(root, kernels.copy, dense, base)
            self.env[id(root)] = base = dense
        offset, dims = node.attrs["access"]
        axes = tuple(Axis(int(size), 0, int(stride)) for stride, size in dims)
        if tuple(a.size for a in axes) != node.shape:
            axes = _reshape_axes(axes, node.shape)
        return Tile(self.trace, base._storage, axes, base.dtype_spec, 0, base._foffset + int(offset),
                    name=base.name)

    def _compose(self, chain, tile: Tile) -> Tile | None:
        """`chain`'s views (root side first) applied to `tile`; None if a reshape cannot be a
        strided view of it."""
        for view in chain:
            if view.op == "reshape":
                axes = _restride(tile._axes, view.shape)
                if axes is None:
                    return None
                tile = Tile(self.trace, tile._storage, axes, tile.dtype_spec, tile._poffset,
                            tile._foffset, name=tile.name)
            else:
                tile = self._logical_view(view, tile)
        return tile

    # --- kernels ---------------------------------------------------------------------------
    def _result(self, node: Node) -> Tile:
        kind = "output" if id(node) in self.output_ids else "internal"
        return self._declare(node.name, node.shape or (1,), node.dtype, kind=kind)

    def _kernel(self, node: Node) -> None:
        """Lower a ``k.*`` node through its record (`trnsim.compiler.kernel_ops`)."""
        out = self._permuted_result(node) or self._result(node)
        self.env[id(node)] = out
        KERNEL_OPS[node.op].lower(self, node, out)

    def slot_update(self, node: Node) -> tuple[Tile, tuple, Node] | None:
        """``x[..., a:b, ...] = src`` on a tensor nothing reads afterwards (a KV cache written at
        its next position) functionalises to concat(x[:a], src, x[b:]) rebuilding x: write src
        into x's buffer instead of copying x (x, its tile and where src goes; None if not that).
        """
        axis = node.attrs["axis"] % node.rank
        base = src = None
        offset = start = 0
        for part in node.inputs:
            a = part.attrs
            if part.op == "slice" and a["axis"] % part.rank == axis and a["step"] == 1 \
                    and a["start"] == offset and part.inputs[0].shape == node.shape \
                    and base in (None, part.inputs[0]) and a.get("fold", "copy") != "copy" \
                    and self.users.get(part, []) == [node]:
                base = part.inputs[0]
            elif src is None:
                src, start = part, offset
            else:
                return None
            offset += part.shape[axis]
        if base is None or src is None or base.op not in ("input", *KERNEL_OPS):
            return None
        # only the kept parts may read x's old value: not src (a shifting buffer's copy would
        # overlap itself), nothing else, and x is no output
        if any(user is src or user not in node.inputs for user in self.users.get(base, [])) \
                or id(base) in self.output_ids:
            return None
        tile = self.tile(base)
        if not _is_whole(tile) or tile._storage.memory is not Memory.HBM:
            return None
        if tile._storage.is_input:  # the program may update its own copy of an input
            tile = Tile(self.trace, dataclasses.replace(tile._storage, is_input=False), tile._axes,
                        tile.dtype_spec, tile._poffset, tile._foffset, name=tile.name)
        key = [slice(None)] * node.rank
        key[axis] = slice(start, start + src.shape[axis])
        return tile, tuple(key), src

    def constant_index_view(self, node: Node) -> Tile | None:
        """Advanced indexing by constant index tensors that walk the table affinely (masks built
        with arange indices, e.g. BERT's mask[b_idx[:, None, None, None], k_idx]) is a view."""
        a = node.attrs
        if a["kind"] != "index" or not all(n.op in ("constant", *LEAVES) for n in node.inputs[1:]):
            return None
        table = node.inputs[0]
        indices = [np.asarray(leaf_data(self.graph, n)).reshape(n.shape) for n in node.inputs[1:]]
        if any(i.dtype == bool for i in indices):
            return None
        positions = np.arange(int(np.prod(table.shape)), dtype=np.int64).reshape(table.shape)
        key: list = [slice(None)] * table.rank
        for d, index in zip(a["dims"], indices, strict=True):
            key[d] = index.astype(np.int64)
        try:
            offsets = positions[tuple(key)]
        except IndexError:
            return None
        if offsets.shape != node.shape:
            return None
        strides = []
        for axis in range(offsets.ndim):
            step = [0] * offsets.ndim
            if offsets.shape[axis] > 1:
                step[axis] = 1
                strides.append(int(offsets[tuple(step)] - offsets.flat[0]))
            else:
                strides.append(0)
        grid = np.indices(offsets.shape, dtype=np.int64)
        affine = offsets.flat[0] + sum(g * st for g, st in zip(grid, strides, strict=True))
        if not np.array_equal(affine, offsets):
            return None
        base = self.tile(table)
        if not _is_whole(base):
            return None
        axes = tuple(Axis(n, 0, st) for n, st in zip(node.shape, strides, strict=True))
        return Tile(self.trace, base._storage, axes, base.dtype_spec, 0,
                    base._foffset + int(offsets.flat[0]), name=base.name)

    def _permuted_result(self, node: Node) -> Tile | None:
        """Write a kernel's result straight in the layout a permute -> reshape(copy) chain wants.

        Attention's merge-heads ([B, H, S, D] -> permute -> [B*S, H*D]) would otherwise cost a
        full extra read and write of the activations; the kernel instead writes its [B, H, S, D]
        result as a strided view of the [B, S, H, D] buffer, and both views become free.
        """
        if id(node) in self.output_ids or len(self.users.get(node, [])) != 1:
            return None
        permute = self.users[node][0]
        if permute.op != "permute" or id(permute) in self.output_ids \
                or len(self.users.get(permute, [])) != 1:
            return None
        reshape = self.users[permute][0]
        if reshape.op != "reshape" or reshape.attrs.get("fold") != "copy":
            return None
        buffer = self._result(reshape)
        dims = permute.attrs["dims"]
        dense, step = [0] * len(permute.shape), 1
        for i in range(len(permute.shape) - 1, -1, -1):
            dense[i] = step
            step *= permute.shape[i]
        strides = [0] * len(dims)
        for i, d in enumerate(dims):  # permute axis i is node axis d
            strides[d] = dense[i]
        self.write_through[id(reshape)] = buffer
        axes = tuple(Axis(n, 0, st) for n, st in zip(node.shape, strides, strict=True))
        return Tile(self.trace, buffer._storage, axes, buffer.dtype_spec, name=buffer.name)

    def epilogue(self, attrs: dict, first: int):
        program = tuple(attrs.get("epilogue") or ())
        return to_callable(program, has_acc=True, first_operand=first) if program else None

    def call(self, node: Node, fn, *args, **kwargs) -> None:
        """Trace one kernel call (under LNC=2, each core's part of it)."""
        label = f"{node.op}:{node.name}"
        if len(self.traces) == 1:
            flops = self._call_on(0, node, label, fn, args, kwargs)
            self.calls.append(KernelCall(label, node.op, node.name, node.source, flops))
            return
        whole = [Part(args, kwargs)]  # unsplit: core 0
        if fn is kernels.collective:
            # every physical core of a rank takes part in its collectives (the fabric reads
            # core 0's input and writes the result to both, which then hold it alike)
            for name in self._crossings(whole * len(self.traces)):
                self._barrier(name, label, node.source)
            flops = sum(self._call_on(core, node, label, fn, *_rebound(trace, whole[0]))
                        for core, trace in enumerate(self.traces))
            self.calls.append(KernelCall(label, node.op, node.name, node.source, flops))
            return
        parts = split_call(fn, args, kwargs)
        if parts is not None and not worth_splitting(fn, args, kwargs, self.trace.core) \
                and (self._crossings(parts) or not self._crossings(whole)):
            parts = None  # small: split only to follow operands the cores already hold apart
        parts = parts or whole
        for name in self._crossings(parts):
            self._barrier(name, label, node.source)
        flops = 0
        for core, part in enumerate(parts):
            flops += self._call_on(core, node, label, fn, *_rebound(self.traces[core], part))
            self.handover.wrote(core, part.args[0])
        self.calls.append(KernelCall(label, node.op, node.name, node.source, flops))

    def _barrier(self, name: str, label: str, source: str | None) -> None:
        """Both cores meet on tensor `name` (one wrote what the other will read)."""
        for trace in self.traces:
            with tracing(trace):
                trace.label, trace.source = label, source
                trace.emit_now(CoreBarrier, data=self.declared[name].access(),
                               cores=tuple(range(len(self.traces))), engine="gpsimd")
                trace.label = trace.source = None
        self.handover.met(name)
        self.crossing.add(name)

    def _crossings(self, parts: list[Part]) -> list[str]:
        """HBM tensors some core's part reads after the other core wrote them."""
        return sorted({tile._storage.name for core, part in enumerate(parts)
                       for tile in tiles_in((part.args[1:], part.kwargs))
                       if tile._storage.memory is Memory.HBM
                       and self.handover.crossing(core, tile)})

    def _call_on(self, core: int, node: Node, label: str, fn, args, kwargs) -> int:
        """Trace one kernel call on `core`, or replay an identical earlier one (the 24 layers of
        BERT-large emit the same instructions but for which HBM tensors they touch); its flops."""
        trace = self.traces[core]
        trace.flush()
        program = trace.builder.program
        start = len(program.instructions)
        names: list[str] = []
        key = (node.op, _attrs_key(node.attrs), _args_key(fn, args, kwargs, names))
        templates = self.templates[core]
        template = templates.get(key)
        if template is not None:
            template.replay(names, label, node.source, program.instructions, self.hbm[core])
            source, varying = self.sources[core][key]
            self.repeats[core].append((start, template.length, source, varying))
        else:
            trace.label, trace.source = label, node.source
            try:
                with tracing(trace):
                    fn(*args, **kwargs)
                    trace.flush()
            except TrnsimError as error:
                raise error.at(node.source) from None
            finally:
                trace.label = trace.source = None
            template = templates[key] = Template(program.instructions[start:], names)
            self.hbm[core].add(template, start)
            self.sources[core][key] = (start, tuple(i for i, _ in template.hbm))
        self.emitted[core] += template.length
        return template.flops

    def _output(self, node: Node, index: int) -> str:
        tile = self.tile(node) if node.op not in VIEWS else self.env[id(node)]
        storage = tile._storage
        if storage.buffer == "shared_hbm" and not storage.is_input and _is_whole(tile) \
                and self.trace.builder.program.tensors[storage.name].kind == "output":
            return storage.name
        out = self._declare(f"output{index}", node.shape or (1,), node.dtype, kind="output")
        self.call(node, kernels.copy, out, tile)
        return out._storage.name


KN_SUFFIX = "_kn"


def _rebound(trace: Trace, part: Part) -> tuple[tuple, dict]:
    """A part's arguments with its HBM tiles bound to `trace` (the core it runs on)."""
    def bind(value):
        if isinstance(value, Tile):
            if value._trace is trace:
                return value
            return Tile(trace, value._storage, value._axes, value.dtype_spec, value._poffset,
                        value._foffset, name=value.name)
        if isinstance(value, list):
            return [bind(v) for v in value]
        if isinstance(value, tuple):
            return tuple(bind(v) for v in value)
        return value

    return bind(part.args), {k: bind(v) for k, v in part.kwargs.items()}


def _attrs_key(attrs: dict) -> str:
    """Node attributes that shape a kernel's instructions (not its neighbours' names)."""
    return repr(sorted((k, v) for k, v in attrs.items() if k not in ("prefetch", "access")))


def _tile_key(tile: Tile, names: list[str]) -> tuple:
    storage = tile._storage
    name = storage.name
    if name not in names:
        names.append(name)
    return (names.index(name), storage.memory.value, storage.buffer, tile.dtype_spec.name,
            tuple((a.size, a.pstep, a.fstep) for a in tile._axes), tile._poffset, tile._foffset)


def _args_key(fn, args, kwargs, names: list[str]) -> tuple:
    """A hashable description of a kernel call's arguments; HBM tensors by position in `names`
    (so calls that differ only in which tensors they read and write share one key)."""
    def describe(value):
        if isinstance(value, Tile):
            return _tile_key(value, names)
        if isinstance(value, (list, tuple)):
            return tuple(describe(v) for v in value)
        if callable(value):
            return "callable"  # epilogues and programs follow from the node's attributes
        return value

    return (fn.__module__, fn.__name__, describe(args),
            tuple((k, describe(v)) for k, v in sorted(kwargs.items())))




def leaf_data(graph: Graph, node: Node, *, kn: bool = False, rank: int = 0) -> np.ndarray:
    """The HBM contents of a constant or leaf node (weights transposed for kn layout; rank
    `rank`'s chunk of a tensor-parallel weight)."""
    data = graph.constant(node).value(rank) if node.op == "constant" else \
        EVAL[node.op](node, [], graph)
    if kn:
        data = np.swapaxes(data, -1, -2)  # a view: the simulator copies it into HBM anyway
    return data if data.shape else np.asarray(data).reshape(1)


class _Lazy:
    """A constant's data in its HBM dtype and layout, computed on first use and kept (timing-only
    runs never compute it; functional runs cast and transpose each weight once, not per call)."""

    def __init__(self, graph: Graph, node: Node, kn: bool, dtype, rank: int = 0) -> None:
        self._args = (graph, node, kn, dtype, rank)
        self._value: np.ndarray | None = None
        self.sharded = node.op == "constant" and graph.constant(node).shard is not None

    def __call__(self) -> np.ndarray:
        if self._value is None:
            graph, node, kn, dtype, rank = self._args
            data = np.ascontiguousarray(leaf_data(graph, node, kn=kn, rank=rank))  # fp32: fast
            target = as_dtype(dtype)
            self._value = cast(data, target) if data.dtype != target.np_dtype else data
            if not self.sharded:
                self._args = None  # other ranks' chunks still need the graph
        return self._value

    def for_rank(self, rank: int) -> _Lazy:
        """The same constant as tensor-parallel rank `rank` holds it."""
        if not self.sharded:
            raise ValueError("only a sharded constant has other ranks' data")
        graph, node, kn, dtype, _ = self._args
        return _Lazy(graph, node, kn, dtype, rank)


def _is_whole(tile: Tile) -> bool:
    """The view covers its tensor densely, in order, from the start."""
    step, dense = 1, True
    for axis in reversed(tile._axes):
        if axis.size != 1 and axis.fstep != step:
            dense = False
        step *= axis.size
    return dense and tile._foffset == 0


def _restride(axes: tuple[Axis, ...], shape: tuple[int, ...]) -> tuple[Axis, ...] | None:
    """A strided HBM pattern read in another shape without copying (numpy's no-copy reshape:
    each run of old dims that merges or splits must be contiguous within itself), or None."""
    old = [(a.size, a.fstep) for a in axes if a.size != 1]
    new = [n for n in shape]
    out: list[int] = [0] * len(new)
    i = j = 0
    while i < len(old) or j < len(new):
        if j < len(new) and new[j] == 1:
            j += 1
            continue
        if i >= len(old) or j >= len(new):
            return None
        oi, nj, po, pn = i, j, old[i][0], new[j]
        i, j = i + 1, j + 1
        while po != pn:
            if po < pn:
                if i >= len(old):
                    return None
                po *= old[i][0]
                i += 1
            else:
                while j < len(new) and new[j] == 1:
                    j += 1
                if j >= len(new):
                    return None
                pn *= new[j]
                j += 1
        for k in range(oi, i - 1):  # the merged old dims must be contiguous with each other
            if old[k][1] != old[k + 1][1] * old[k + 1][0]:
                return None
        stride = old[i - 1][1]
        for k in range(j - 1, nj - 1, -1):
            out[k] = stride
            stride *= new[k]
    return tuple(Axis(n, 0, st) for n, st in zip(new, out, strict=True))


def _reshape_axes(axes: tuple[Axis, ...], shape: tuple[int, ...]) -> tuple[Axis, ...]:
    """Re-express a dense pattern in the node's shape (access lists may merge dims)."""
    step = axes[-1].fstep if axes else 1
    if any(a.fstep != step * int(np.prod([b.size for b in axes[i + 1:]], dtype=np.int64))
           for i, a in enumerate(axes) if a.size != 1):
        raise IRError(f"view access {[(a.fstep, a.size) for a in axes]} cannot take shape {shape}")
    out, stride = [], step
    for size in reversed(shape):
        out.append(Axis(size, 0, stride))
        stride *= size
    return tuple(reversed(out))
