"""How one plan uses this machine: how many processes (the one reading of ``TRIMTAB_JOBS``), and the garbage
collector paused while it plans or simulates (``gc_paused``).

Used by the candidate fan-out (``trimtab.milp.fanout``), the simulator's forked runs
(``trimtab.sim.parallel``), the driver and ``trimtab.sim.simulate``; a foundation module so that no stage
imports another for it.
"""
from __future__ import annotations

import gc
import os
from contextlib import contextmanager


def jobs_default() -> int:
    """``TRIMTAB_JOBS`` when it is a positive integer (1: one process), else the CPUs this process may use."""
    env = os.environ.get("TRIMTAB_JOBS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


@contextmanager
def gc_paused():
    """Python's cyclic garbage collector off for the block (or the function it decorates), back on after it if
    it was on. Why: a plan's simulations create a few hundred thousand requests and heap entries a run and
    keep tens of thousands alive; each collection of the oldest generation walks every live object, and the
    number of allocations sets them off again and again, while what they find is next to nothing (887 objects
    left in cycles after the whole plan of specgen's target spec 0). Reference counting still frees everything
    else at once. Measured (docs/solvers.md "The garbage collector paused"): 6-13 % of a plan's wall time, the
    same peak memory; no float changes (the collector never touches values). Nested uses keep it off until the
    outermost ends; forked children (``trimtab.sim.parallel``, ``trimtab.milp.fanout``) inherit it."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
