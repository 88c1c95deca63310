"""Python's cycle collector paused while the simulator or the compiler builds many objects.

Planning a program (one `Plan` per distinct instruction, one `Region` per distinct footprint)
and lowering a model allocate hundreds of thousands of objects, none of them garbage. Each
collection those allocations trigger walks every tracked object of the process, a captured
model's graph and weights included: on a Llama-2-7B decoder layer that was 45% of a timing run's
first-run CPU (planning 53,548 instructions: 1.77 s with the collector, 0.98 s without).
Cycles made meanwhile are collected after the block, by the collector's next ordinary run.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off inside the block (restored after, if it was on)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
