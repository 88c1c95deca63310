"""Kernel-call replay and the HBM operand index: lowering without per-instruction rewriting.

The 24 layers of BERT-large (32 of Llama-2-7B) call the same kernels with the same shapes; only
the HBM tensors they read and write differ. The first call of each kind is traced and kept as a
`Template`; a later identical call is the template's instructions with only the HBM operands the
template recorded renamed (where each sits is found once, when the template is made, not
searched again on every copy), deferred: built when read (`trnsim.isa.instruction_list`), and
the timing path reads only the few that touch HBM.

The same positions make the `HbmIndex`: for each instruction that touches HBM, which operand
slots hold HBM access patterns. The passes that run after lowering (live ranges, keeping
intermediates on chip, sharing HBM buffers) read and rename through it instead of walking every
field of every instruction.
"""

from __future__ import annotations

import operator
from collections import deque
from itertools import repeat

from trnsim.isa import AccessPattern, Instruction, InstructionList, Memory, operand_fields

# (field name, index in a tuple field or -1 for a field holding one access pattern)
Slot = tuple[str, int]

_SCALARS = frozenset({int, float, str, bool})  # operand-field values that hold no pattern


def hbm_slots(ins) -> tuple[Slot, ...]:
    """Where `ins` holds HBM access patterns."""
    fields = ins.__dict__
    slots: list[Slot] = []
    for name in operand_fields(type(ins)):
        value = fields[name]
        kind = type(value)
        if kind is AccessPattern:  # (the common kinds by identity, the rare ones by isinstance)
            if value.memory is Memory.HBM:
                slots.append((name, -1))
        elif value is None or kind in _SCALARS:
            continue
        elif isinstance(value, AccessPattern):
            if value.memory is Memory.HBM:
                slots.append((name, -1))
        elif isinstance(value, tuple):
            slots.extend((name, i) for i, item in enumerate(value)
                         if isinstance(item, AccessPattern) and item.memory is Memory.HBM)
    return tuple(slots)


def hbm_operands(ins, slots: tuple[Slot, ...]):
    """The HBM access patterns at `slots` of `ins`."""
    fields = ins.__dict__
    return [fields[name] if index < 0 else fields[name][index] for name, index in slots]


class HbmIndex:
    """(instruction index, HBM slots) of each instruction of a program that touches HBM, in order,
    and whether any instruction of the program is control flow (`control`: its program order is
    not its execution order). Whatever adds instructions to the program adds them here too
    (`scan`, `add`), so the passes that need straight-line programs read a fact, not a scan."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, tuple[Slot, ...]]] = []
        self.control = False
        # per replayed call (`Template.replay`): (its first entry, its first instruction, its
        # template, the HBM patterns its instructions hold in the template's plan order), for
        # `rename` to rename a call by its template's plan instead of slot by slot
        self.replays: list[tuple[int, int, Template, list[AccessPattern]]] = []
        self._ranges: tuple[list, dict[str, tuple[int, int]]] | None = None  # see live_ranges

    @classmethod
    def of(cls, instructions, start: int = 0) -> HbmIndex:
        index = cls()
        index.scan(instructions, start)
        return index

    def scan(self, instructions, start: int) -> None:
        """Add `instructions`, the program's from index `start` on."""
        for offset, ins in enumerate(instructions):
            slots = hbm_slots(ins)
            if slots:
                self.entries.append((start + offset, slots))
        self.control = self.control or control_flow(set(map(type, instructions)))
        self._ranges = None

    def add(self, template: Template, start: int,
            patterns: list[AccessPattern] | None = None) -> None:
        """Add a call of `template` whose instructions start at program index `start`;
        `patterns`: a replay's, the HBM patterns it placed (`Template.replay`)."""
        if patterns is not None:
            self.replays.append((len(self.entries), start, template, patterns))
        self.entries += [(start + offset, slots) for offset, slots in template.hbm]
        self.control = self.control or template.control
        self._ranges = None

    def live_ranges(self, instructions, names) -> dict[str, tuple[int, int]]:
        """(first, last) instruction index touching each tensor of `names`. The ranges of all
        HBM tensors are found in one walk and kept until the index changes (keeping tensors on
        chip, then sharing HBM buffers, asks twice)."""
        if self._ranges is None or self._ranges[0] is not instructions:
            ranges: dict[str, tuple[int, int]] = {}
            done = 0
            for first, start, template, patterns in self.replays:
                _touch_entries(ranges, instructions, self.entries[done:first])
                # a replayed call's, by its template's touches (no instruction built):
                # in order of first touch, as the walk meets them
                for k, low, high in template.touches:
                    tensor = patterns[k].tensor
                    found = ranges.get(tensor)
                    ranges[tensor] = ((start + low, start + high) if found is None
                                      else (found[0], max(found[1], start + high)))
                done = first + len(template.hbm)
            _touch_entries(ranges, instructions, self.entries[done:])
            self._ranges = (instructions, ranges)
        return {tensor: span for tensor, span in self._ranges[1].items() if tensor in names}

    def rename(self, instructions: list, rename: dict[str, str]) -> None:
        """Point the HBM operands of tensors in `rename` at their new names, in place. A call a
        replay made (`Template.replay`: its instructions' fields are their own) is renamed in
        its instructions' fields by its template's plan, once per distinct pattern of the call,
        each pattern made from the template's (the layers' calls renamed onto one shared slot
        share it); any other instruction is replaced by a renamed copy (instructions are frozen,
        and a traced one may be held elsewhere), each pattern renamed once."""
        self._ranges = None
        memo: dict[int, AccessPattern] = {}  # by id: `replaced` keeps every pattern alive
        replaced: list = []
        shared: dict[tuple[int, str], AccessPattern] = {}  # by template pattern and new name
        done = 0
        for first, start, template, patterns in self.replays:
            _renamed_entries(instructions, self.entries[done:first], rename, memo, replaced)
            _rename_replay(instructions, start, template, patterns, rename, shared)
            done = first + len(template.hbm)
        _renamed_entries(instructions, self.entries[done:], rename, memo, replaced)


def _touch_entries(ranges: dict[str, tuple[int, int]], instructions, entries) -> None:
    """Extend `ranges` (first, last index per tensor) by the HBM operands of `entries`."""
    for i, slots in entries:
        fields = instructions[i].__dict__
        for name, index in slots:
            tensor = (fields[name] if index < 0 else fields[name][index]).tensor
            found = ranges.get(tensor)
            ranges[tensor] = (i, i) if found is None else (found[0], i)


def _renamed_entries(instructions: list, entries, rename: dict[str, str],
                     memo: dict[int, AccessPattern], replaced: list) -> None:
    """Replace each instruction of `entries` whose HBM slots hold a tensor of `rename` by a
    renamed copy."""
    new, set_fields = object.__new__, object.__setattr__
    for i, slots in entries:
        ins = instructions[i]
        fields = ins.__dict__
        changed = _renamed_fields(fields, slots, rename, memo)
        if changed:
            copy = new(type(ins))
            set_fields(copy, "__dict__", fields | changed)
            instructions[i] = copy
            replaced.append(ins)


def _rename_replay(instructions: list, start: int, template: Template,
                   patterns: list[AccessPattern], rename: dict[str, str],
                   shared: dict[tuple[int, str], AccessPattern]) -> None:
    """Rename, in the fields of a replayed call's instructions (from `start`), the `patterns`
    it placed, by its template's plan; `patterns` then holds the renamed ones. A renamed
    pattern is its template pattern on the new tensor (a replay's pattern is its template's on
    the call's tensor: the same but for the name), kept in `shared` by the template pattern's
    id (templates outlive the rename)."""
    renamed = list(patterns)
    for k, ap in enumerate(patterns):
        name = rename.get(ap.tensor)
        if name is not None:
            base = template.patterns[k][0]
            found = shared.get((id(base), name))
            if found is None:
                found = shared[id(base), name] = base.renamed(name)
            renamed[k] = found
    if all(map(operator.is_, renamed, patterns)):
        return
    # only the instructions built so far (one not built takes the renamed patterns when it is:
    # `Replayed`); a call built in full, all of its instructions that hold them
    read = instructions.built_offsets(start) if isinstance(instructions, InstructionList) \
        else None
    swaps = template.swaps
    for offset in swaps if read is None else sorted(read & swaps.keys()):
        _swap_in(instructions[start + offset].__dict__, swaps[offset], renamed, patterns)
    patterns[:] = renamed


# the instruction kinds whose program order is not their execution order (`trnsim.isa.control`)
CONTROL_KINDS = ("control", "dynamic")


def control_flow(classes) -> bool:
    """Whether any of these instruction classes is control flow (`CONTROL_KINDS`)."""
    return any(getattr(cls, "KIND", "") in CONTROL_KINDS for cls in classes)


class Template:
    """A traced kernel call's instructions, kept to replay later identical calls.

    A replay appends a deferred span to the program's `InstructionList` (`Replayed`: each of its
    instructions is built when read, as its own object): a copy of the template instruction's
    fields with the call's label and source, and the HBM operands of the call's tensors swapped
    in by a plan made here: the distinct HBM access patterns (`patterns`, each with the position
    of its tensor in `names`, -1 for a tensor that is no argument) and, per instruction touching
    them, which fields take which (`plan`). `HbmIndex.rename` renames a replayed call's
    instructions by the same plan."""

    __slots__ = ("classes", "control", "fields", "flops", "hbm", "length", "names", "patterns",
                 "placed", "plan", "swaps", "touches")

    def __init__(self, instructions: list, names: list[str]) -> None:
        self.names = tuple(names)  # the call's HBM tensors, in the order its key numbered them
        self.length = len(instructions)
        # (only classes that count flops are asked: most inherit Instruction's 0)
        self.flops = sum(ins.flops() for ins in instructions
                         if type(ins).flops is not Instruction.flops)
        self.classes = [type(ins) for ins in instructions]
        self.fields = [ins.__dict__ for ins in instructions]
        index = HbmIndex.of(instructions)
        self.hbm = index.entries  # offsets within the call
        self.control = index.control
        self.patterns, self.plan = _rename_plan(self.fields, self.hbm, self.names)
        self.placed = [ap for ap, _ in self.patterns]  # the patterns the template's fields hold
        self.swaps = dict(self.plan)  # offset -> its swaps
        self.touches = _touches(self.fields, self.hbm, self.placed)

    def replay(self, names: list[str], label: str, source: str | None, out: list,
               index: HbmIndex) -> None:
        """Append the template's instructions, relabelled and touching `names`, to `out` (the
        program's instruction list: deferred, built when read, in an `InstructionList`) and
        their HBM slots to `index`."""
        start = len(out)
        if tuple(names) != self.names:
            patterns = [ap if i < 0 or ap.tensor == names[i] else ap.renamed(names[i])
                        for ap, i in self.patterns]
        else:
            patterns = list(self.placed)
        call = Replayed(self, {"label": label, "source": source}, patterns)
        if isinstance(out, InstructionList):
            out.defer(self.length, call)
        else:
            out += call.all()
        index.add(self, start, patterns)


class Replayed:
    """The maker of a replayed call's instructions (`InstructionList.defer`): the template's
    fields with the call's label and source, and the HBM patterns the call places (`patterns`,
    pattern k where the template holds its pattern k; `HbmIndex.rename` renames them in this
    list, and in the instructions built before it)."""

    __slots__ = ("extra", "patterns", "template")

    def __init__(self, template: Template, extra: dict, patterns: list[AccessPattern]) -> None:
        self.template = template
        self.extra = extra
        self.patterns = patterns

    def one(self, offset: int) -> Instruction:
        template = self.template
        fields = template.fields[offset] | self.extra
        swaps = template.swaps.get(offset)
        if swaps is not None:
            _swap_in(fields, swaps, self.patterns, template.placed)
        ins = object.__new__(template.classes[offset])
        object.__setattr__(ins, "__dict__", fields)
        return ins

    def all(self) -> list[Instruction]:
        # loops in C over the template: one dict and one object per instruction, no Python
        # step per instruction (~0.85 us each, mostly allocation)
        template = self.template
        dicts = list(map(dict.__or__, template.fields, repeat(self.extra)))
        if not all(map(operator.is_, self.patterns, template.placed)):
            for offset, swaps in template.plan:
                _swap_in(dicts[offset], swaps, self.patterns, template.placed)
        instructions = list(map(object.__new__, template.classes))
        deque(map(object.__setattr__, instructions, repeat("__dict__"), dicts), maxlen=0)
        return instructions


# A template's rename plan: per instruction offset, its fields that hold HBM patterns, each as
# (field, pattern number) for a field holding one pattern, or (field, its tuple, ((item, pattern
# number), ...)) for a tuple field
Swap = tuple[str, int] | tuple[str, tuple, tuple[tuple[int, int], ...]]


def _rename_plan(fields: list[dict], hbm, names: tuple[str, ...]
                 ) -> tuple[list[tuple[AccessPattern, int]], list[tuple[int, tuple[Swap, ...]]]]:
    """The distinct HBM patterns of the call (by identity, as a replay shares them) with their
    tensor's position in `names` (-1: not one of the call's arguments, the same in every call,
    such as a kernel's own scratch tensor; `HbmIndex.rename` may still rename it), and where
    each instruction holds them."""
    position = {name: i for i, name in enumerate(names)}
    patterns: list[tuple[AccessPattern, int]] = []
    number: dict[int, int] = {}
    plan = []
    for offset, slots in hbm:
        values = fields[offset]
        swaps: dict[str, list[tuple[int, int]]] = {}
        for name, index in slots:
            ap = values[name] if index < 0 else values[name][index]
            k = number.get(id(ap))
            if k is None:
                k = number[id(ap)] = len(patterns)
                patterns.append((ap, position.get(ap.tensor, -1)))
            swaps.setdefault(name, []).append((index, k))
        if swaps:
            plan.append((offset, tuple((name, items[0][1]) if items[0][0] < 0 else
                                       (name, values[name], tuple(items))
                                       for name, items in swaps.items())))
    return patterns, plan


def _touches(fields: list[dict], hbm, placed: list[AccessPattern]
             ) -> list[tuple[int, int, int]]:
    """(pattern number, first offset, last offset) of each HBM pattern of a call, in the order
    a walk over its instructions and slots first meets them (`HbmIndex.live_ranges`)."""
    number = {id(ap): k for k, ap in enumerate(placed)}
    spans: dict[int, list[int]] = {}
    for offset, slots in hbm:
        values = fields[offset]
        for name, index in slots:
            k = number[id(values[name] if index < 0 else values[name][index])]
            found = spans.get(k)
            if found is None:
                spans[k] = [offset, offset]
            else:
                found[1] = offset
    return [(k, low, high) for k, (low, high) in spans.items()]


def _swap_in(fields: dict, swaps: tuple[Swap, ...], renamed: list[AccessPattern],
             placed: list[AccessPattern]) -> None:
    """Put pattern k's `renamed[k]` where one instruction's `fields` hold it (`swaps`, from a
    template's plan) instead of `placed[k]`; a tuple field is rebuilt only when one of its
    patterns changes."""
    for swap in swaps:
        if len(swap) == 2:
            fields[swap[0]] = renamed[swap[1]]
        else:
            name, _, where = swap
            if any(renamed[k] is not placed[k] for _, k in where):
                items = list(fields[name])
                for i, k in where:
                    items[i] = renamed[k]
                fields[name] = tuple(items)


def _renamed_fields(fields: dict, slots, rename: dict[str, str], memo: dict[int, AccessPattern]
                    ) -> dict:
    """The fields at `slots` whose HBM tensor `rename` renames, with it renamed."""
    changed: dict = {}
    for name, index in slots:
        if index < 0:
            ap = fields[name]
            if ap.tensor in rename:
                changed[name] = _renamed(ap, rename, memo)
        else:
            items = changed.get(name) or fields[name]
            ap = items[index]
            if ap.tensor in rename:
                items = list(items)
                items[index] = _renamed(ap, rename, memo)
                changed[name] = tuple(items)
    return changed


def _renamed(ap: AccessPattern, rename: dict[str, str], memo: dict[int, AccessPattern]
             ) -> AccessPattern:
    found = memo.get(id(ap))
    if found is None:
        found = memo[id(ap)] = ap.renamed(rename[ap.tensor])
    return found
