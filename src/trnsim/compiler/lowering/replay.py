"""Kernel-call replay and the HBM operand index: lowering without per-instruction rewriting.

The 24 layers of BERT-large (32 of Llama-2-7B) call the same kernels with the same shapes; only
the HBM tensors they read and write differ. The first call of each kind is traced and kept as a
`Template`; a later identical call copies the template's instructions, renaming only the HBM
operands the template recorded (where each sits is found once, when the template is made, not
searched again on every copy).

The same positions make the `HbmIndex`: for each instruction that touches HBM, which operand
slots hold HBM access patterns. The passes that run after lowering (live ranges, keeping
intermediates on chip, sharing HBM buffers) read and rename through it instead of walking every
field of every instruction.
"""

from __future__ import annotations

from trnsim.isa import AccessPattern, Memory, operand_fields

# (field name, index in a tuple field or -1 for a field holding one access pattern)
Slot = tuple[str, int]


def hbm_slots(ins) -> tuple[Slot, ...]:
    """Where `ins` holds HBM access patterns."""
    fields = ins.__dict__
    slots: list[Slot] = []
    for name in operand_fields(type(ins)):
        value = fields[name]
        if isinstance(value, AccessPattern):
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
    """(instruction index, HBM slots) of each instruction of a program that touches HBM, in order."""

    def __init__(self) -> None:
        self.entries: list[tuple[int, tuple[Slot, ...]]] = []

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

    def live_ranges(self, instructions, names) -> dict[str, tuple[int, int]]:
        """(first, last) instruction index touching each tensor of `names`."""
        ranges: dict[str, tuple[int, int]] = {}
        for i, slots in self.entries:
            fields = instructions[i].__dict__
            for name, index in slots:
                tensor = (fields[name] if index < 0 else fields[name][index]).tensor
                if tensor in names:
                    found = ranges.get(tensor)
                    ranges[tensor] = (i, i) if found is None else (found[0], i)
        return ranges

    def rename(self, instructions: list, rename: dict[str, str]) -> None:
        """Point the HBM operands of tensors in `rename` at their new names, in place (each
        changed instruction is replaced by a renamed copy; instructions are frozen)."""
        memo: dict[int, AccessPattern] = {}  # by id: `replaced` keeps every pattern alive
        replaced = []
        for i, slots in self.entries:
            ins = instructions[i]
            changed = _renamed_fields(ins.__dict__, slots, rename, memo)
            if changed:
                new = object.__new__(type(ins))
                new.__dict__.update(ins.__dict__)
                new.__dict__.update(changed)
                instructions[i] = new
                replaced.append(ins)


class Template:
    """A traced kernel call's instructions, kept to replay later identical calls."""

    __slots__ = ("entries", "flops", "hbm", "length", "names")

    def __init__(self, instructions: list, names: list[str]) -> None:
        self.names = tuple(names)  # the call's HBM tensors, in the order its key numbered them
        self.length = len(instructions)
        self.flops = sum(ins.flops() for ins in instructions)
        self.entries = [(type(ins), ins.__dict__) for ins in instructions]
        self.hbm = HbmIndex.of(instructions).entries  # offsets within the call

    def replay(self, names: list[str], label: str, source: str | None, out: list,
               index: HbmIndex) -> None:
        """Append the template's instructions, relabelled and touching `names`, to `out` (the
        program's instruction list) and their HBM slots to `index`."""
        start = len(out)
        new = object.__new__
        for cls, fields in self.entries:
            ins = new(cls)
            d = ins.__dict__
            d.update(fields)
            d["label"] = label
            d["source"] = source
            out.append(ins)
        rename = {old: name for old, name in zip(self.names, names, strict=True) if old != name}
        memo: dict[int, AccessPattern] = {}
        entries = index.entries
        for offset, slots in self.hbm:
            entries.append((start + offset, slots))
            if rename:
                d = out[start + offset].__dict__
                changed = _renamed_fields(d, slots, rename, memo)
                if changed:
                    d.update(changed)


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
