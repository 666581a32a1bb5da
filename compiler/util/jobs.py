"""How one plan uses this machine: how many processes (the one reading of ``TRIMTAB_JOBS``), the garbage
collector paused while it plans or simulates (``gc_paused``), and independent pure calls over forked processes
(``fork_map``).

Used by the candidate fan-out (``trimtab.milp.fanout``, through ``fork_map``), the simulator's forked runs
(``trimtab.sim.parallel``), the driver, ``trimtab.sim.simulate``, and the plan's capacities and predictions at
its mix (``trimtab.milp.extract.with_capacities``, ``trimtab.milp.assess.mix_predictions``); a foundation
module so that no stage imports another for it.
"""
from __future__ import annotations

import gc
import multiprocessing
import os
from contextlib import contextmanager

_WORK: tuple | None = None  # (function, items) the forked workers of ``fork_map`` inherit


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


def _call(i: int):
    assert _WORK is not None
    return _WORK[0](_WORK[1][i])


def fork_map(fn, items: list, min_items: int, jobs: int | None = None, chunksize: int | None = None) -> list:
    """``[fn(x) for x in items]``, spread over ``jobs`` (default ``jobs_default()``) forked processes where
    there are at least ``min_items`` items and this process may fork (not a pool's daemonic worker); here
    otherwise. ``chunksize``: items a worker takes at a time (default a quarter of an even share; 1 where the
    items' costs differ widely). For pure calls of the cost model only (no solver: a child forked beside
    a solver's worker threads could wait on threads it does not have). The workers inherit ``fn`` and
    ``items`` (nothing is pickled on the way out) and send the results back pickled: the same values, in the
    same order, for any number of processes."""
    global _WORK
    jobs = min(jobs_default() if jobs is None else jobs, len(items))
    if (jobs < 2 or len(items) < min_items or multiprocessing.current_process().daemon
            or "fork" not in multiprocessing.get_all_start_methods()):
        return [fn(x) for x in items]
    _WORK = (fn, items)
    try:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            return pool.map(_call, range(len(items)), chunksize=chunksize or max(1, len(items) // (4 * jobs)))
    finally:
        _WORK = None
