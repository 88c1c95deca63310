"""`nki.typing` (nt): tensor type annotations and placeholders, e.g. nt.tensor[[128, 512], nl.float32].

Passing a placeholder instead of an array to a benchmarked or profiled kernel runs it timing-only.
"""

from __future__ import annotations

from dataclasses import dataclass

from trnsim.errors import InvalidArgumentError


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: object
    buffer: str = "shared_hbm"


class tensor:
    def __class_getitem__(cls, item) -> TensorSpec:
        if not isinstance(item, tuple) or len(item) < 2:
            raise InvalidArgumentError("use nt.tensor[shape, dtype], e.g. nt.tensor[[128, 512], nl.float32]")
        shape, dtype, *rest = item
        shape = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
        return TensorSpec(shape, dtype, *(str(r) for r in rest[:1]))


mutable_tensor = tensor
