"""Timelines kept for functional reruns: a straight-line program alone on its core is timed once.

A functional run steps the scheduler beside the numbers, and a compiled model's every call is a
functional run of the same program. The timeline of a straight-line program on a core whose DMA
does not share an HBM timeline with other cores is a pure function of its plans and the core
(`CoreScheduler.step` reads nothing else; values never steer it): the first functional run's
records are kept beside the program's plans (`trnsim.sim.plan.planned`), and a later functional
run of the same plans takes a copy of them instead of stepping every instruction again.

The records live as long as the planner that made the plans (a weak key): a program that is
replanned (changed instructions or tensors, another core) gets a new planner and is timed again.
``TRNSIM_SIM_LOOP=check`` never replays (it exists to step both loops).
"""

from __future__ import annotations

import weakref
from array import array

import numpy as np

from trnsim.sim import compiled

# the per-record columns a scheduler leaves (what `Profile` reads), in `CoreScheduler` names
COLUMNS = ("uids", "starts", "ends", "dones", "codes", "causes")


class Timeline:
    """One finished straight-line run's records, read-only, with the plans they were made by."""

    __slots__ = ("clock", "columns", "core", "moved_record", "moved_times", "plans")

    def __init__(self, scheduler, plans: list) -> None:
        self.plans = plans
        self.core = scheduler.core
        self.columns = {}
        for name in COLUMNS:
            column = np.array(getattr(scheduler, name))
            column.flags.writeable = False
            self.columns[name] = column
        self.moved_record = bytes(scheduler.moved_record)
        self.moved_times = bytes(scheduler.moved_times)
        self.clock = scheduler.clock

    def restore(self, scheduler) -> None:
        """Leave `scheduler` (fresh, prepared for these plans) with the kept records."""
        for name, column in self.columns.items():
            setattr(scheduler, name, column)  # read-only arrays: `Profile` takes them as they are
        scheduler.moved_record = array("q", self.moved_record)
        scheduler.moved_times = array("d", self.moved_times)
        scheduler.clock = self.clock


_KEPT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # planner -> Timeline


def kept(scheduler, plans: list) -> Timeline | None:
    """The timeline kept for these plans on this scheduler's core, if replaying is allowed."""
    if compiled.loop_choice() == "check":
        return None
    found = _KEPT.get(scheduler.planner)
    if found is None or found.plans is not plans or found.core is not scheduler.core:
        return None
    return found


def keep(scheduler, plans: list) -> None:
    """Keep a finished straight-line run's records for later functional runs of its plans."""
    if len(scheduler.uids) == len(plans):
        _KEPT[scheduler.planner] = Timeline(scheduler, plans)
