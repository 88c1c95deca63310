"""Python's cycle collector paused while the simulator or the compiler builds many objects.

Planning a program (one `Plan` per distinct instruction, one `Region` per distinct footprint)
and lowering a model allocate hundreds of thousands of objects, none of them garbage. Each
collection those allocations trigger walks every tracked object of the process, a captured
model's graph and weights included: on a Llama-2-7B decoder layer that was 45% of a timing run's
first-run CPU (planning 53,548 instructions: 1.77 s with the collector, 0.98 s without).
Cycles made meanwhile are collected after the block, by the collector's next ordinary run.

That next run is a young-generation collection, and every object made in the block is young: it
walks them all (3 of the 25 CPU s of lowering the 5.5M instructions of a 2048-token Llama-2-7B
prefill), and the generation above walks them again. A block whose objects are long-lived (a
lowered program, its plans) can instead hand them straight to the oldest generation (`promote`), which
only a full collection walks: CPython's own freeze/unfreeze pair, done only when nothing else
is frozen (a process that froze its objects before forking keeps them frozen).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused(*, promote: bool = False) -> Iterator[None]:
    """The cyclic garbage collector off inside the block (restored after, if it was on).
    `promote`: the objects the block made (all young ones) join the oldest generation after it."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if promote and not gc.get_freeze_count():
                gc.freeze()  # every tracked object to the permanent generation (no walk) ...
                gc.unfreeze()  # ... and from there to the oldest
            gc.enable()
