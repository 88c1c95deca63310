"""Which NeuronCores a process may use: NEURON_RT_VISIBLE_CORES / NEURON_RT_NUM_CORES.

Semantics as the Neuron runtime documents them: VISIBLE_CORES is an index, a range ("0-3") or a
comma list and takes precedence; NUM_CORES asks for that many cores (0 or unset = all); asking
for more cores than the instance has fails with the runtime's "Requested/Available" wording.
"""

from __future__ import annotations

import os

from trnsim.errors import CoresUnavailableError, InvalidArgumentError

VISIBLE_ENV = "NEURON_RT_VISIBLE_CORES"
NUM_ENV = "NEURON_RT_NUM_CORES"
__all__ = ["CoresUnavailableError", "parse_core_list", "visible_cores"]


def parse_core_list(text: str) -> list[int]:
    cores: list[int] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        try:
            if "-" in part:
                low, high = (int(x) for x in part.split("-", 1))
                if high < low:
                    raise ValueError
                cores.extend(range(low, high + 1))
            else:
                cores.append(int(part))
        except ValueError:
            raise InvalidArgumentError(f"{VISIBLE_ENV}={text!r}: expected an index, a range like "
                                       f"0-3 or a comma list") from None
    if not cores or any(c < 0 for c in cores) or len(set(cores)) != len(cores):
        raise InvalidArgumentError(f"{VISIBLE_ENV}={text!r}: expected distinct non-negative cores")
    return sorted(cores)


def visible_cores(total: int, instance_name: str, environ=None) -> list[int]:
    """The core indices this process may use on an instance with `total` (logical) cores."""
    environ = os.environ if environ is None else environ
    visible = environ.get(VISIBLE_ENV)
    if visible:
        cores = parse_core_list(visible)
        if cores[-1] >= total:
            raise CoresUnavailableError(
                f"{VISIBLE_ENV}={visible} on {instance_name}: Requested:{len(cores)} (up to core "
                f"{cores[-1]}) Available:{total}; core", cores[-1], total - 1,
                context=f"{instance_name} has NeuronCores 0-{total - 1}")
        return cores
    number = environ.get(NUM_ENV, "0") or "0"
    try:
        count = int(number)
    except ValueError:
        raise InvalidArgumentError(f"{NUM_ENV}={number!r}: expected a whole number") from None
    if count < 0:
        raise InvalidArgumentError(f"{NUM_ENV}={number!r}: expected a whole number >= 0")
    if count > total:
        raise CoresUnavailableError(f"{NUM_ENV}={count} on {instance_name}: Requested:{count} "
                                    f"Available:{total}; cores", count, total)
    return list(range(count or total))
