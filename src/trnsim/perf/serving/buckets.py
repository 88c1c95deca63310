"""Sequence buckets, as Neuron's LLM stacks compile them.

Compiled graphs have static shapes, so NxD Inference (and vLLM on it) compiles the prompt
(context encoding) and generation (token generation) graphs once per bucket and pads each
request to the smallest bucket that holds it. With bucketing on and no explicit lists, both
lists are the powers of two from 128 up to the maximum length, the last bucket being the maximum
itself (aws-neuron-sdk: libraries/nxd-inference/api-guides/api-guide.rst, NeuronConfig
``enable_bucketing``).
"""

from __future__ import annotations

from collections.abc import Sequence

from trnsim.errors import InvalidArgumentError, LimitExceededError

SMALLEST_BUCKET = 128  # NxD Inference's first default bucket


def power_of_two_buckets(largest: int, smallest: int = SMALLEST_BUCKET) -> tuple[int, ...]:
    """Powers of two from `smallest` while below `largest`, then `largest` itself."""
    if largest < 1:
        raise InvalidArgumentError(f"largest bucket must be >= 1; got {largest}")
    buckets, size = [], smallest
    while size < largest:
        buckets.append(size)
        size *= 2
    buckets.append(largest)
    return tuple(buckets)


def parse_buckets(text: str | None, largest: int) -> tuple[int, ...]:
    """A comma list of bucket sizes (ascending; the last must hold `largest`), or the default."""
    if not text:
        return power_of_two_buckets(largest)
    try:
        sizes = tuple(sorted({int(t) for t in text.split(",") if t.strip()}))
    except ValueError:
        raise InvalidArgumentError(f"buckets: expected comma-separated integers, got "
                                   f"{text!r}") from None
    if not sizes or sizes[0] < 1:
        raise InvalidArgumentError(f"buckets must be positive; got {text!r}")
    if sizes[-1] < largest:
        raise InvalidArgumentError(f"largest bucket {sizes[-1]} cannot hold {largest} tokens")
    return sizes


def bucket_for(size: int, buckets: Sequence[int], what: str = "sequence") -> int:
    """The smallest bucket holding `size`."""
    for bucket in buckets:
        if bucket >= size:
            return bucket
    raise LimitExceededError(f"{what} length", size, buckets[-1] if buckets else 0,
                             context="largest compiled bucket")
