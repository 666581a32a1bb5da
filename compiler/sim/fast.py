"""One deployment's event loop in compiled code (``trimtab.sim._loop``, compiler/sim/_loop.c), where it gives
exactly the Python loop's result.

Why: the validating simulations are most of a large plan's time, and nearly all of it is the event loop
(issue 35: 200,000 requests per seed, about three engine steps each, a few microseconds of Python per step).
The compiled loop keeps the scheduler's state in C and asks Python only for what the cost model says: the
step time of each step with prompt tokens (the model's ``iteration_s``) and each decode batch's line (the
replica's ``_linear`` table, shared with the Python loop). It covers the plain replica: no prefix cache, no KV
tier, no timeline (the planner's validating runs take none), in a run with the base ``Simulation``'s event
hooks (the schedule simulation's scale events act across replicas: not those) or a unified deployment of a
simulation with P/D pairs (``Simulation._base_run``). Everything else stays with the Python loop
(``Simulation._run_one``), which is the reference: tests/sim/test_fast_loop.py runs both on the same arrivals
and compares every field of every request and replica.

``ENABLED`` (default: the ``TRIMTAB_SIM_LOOP`` environment variable is not ``python``) switches it off for
those comparisons.
"""
from __future__ import annotations

import os
from array import array

from trimtab.sim.replica import Replica, Request

try:
    from trimtab.sim import _loop
except ImportError:  # an install without a C compiler: the Python loop alone
    _loop = None

ENABLED = os.environ.get("TRIMTAB_SIM_LOOP", "") != "python"

# Replica counters the compiled loop returns, in its order (then the requests done, in order)
COUNTERS = ("k", "busy", "n_dec", "C", "kv_pref", "Csh", "p_step", "t0", "busy_s", "prefill_s",
            "kv_area", "batch_area", "kv_max", "preemptions", "steps")


# What one deployment's event loop calls: a subclass that keeps them all runs it as the base class does
BASE_HOOKS = ("_loop", "_on_event", "_on_arrival", "_admit", "_turned_away", "_kick")


def base_hooks(cls: type, base: type) -> bool:
    """Whether simulation class ``cls`` keeps every event hook of ``base`` (the engine's ``Simulation``): the
    P/D and schedule simulations do not (their events act across replicas)."""
    return all(getattr(cls, h) is getattr(base, h) for h in BASE_HOOKS)


def available() -> bool:
    """Whether the compiled loop is built and switched on."""
    return _loop is not None and ENABLED


def _plain(rep) -> bool:
    """A replica the compiled loop models: the base class, fresh, with no prefix cache, KV tier or timeline,
    and integer batch limits."""
    return (type(rep) is Replica and rep.pfx is None and rep.tl is None and not rep.tier and not rep.reload
            and rep.k == 0 and not rep.busy and not rep.steps and rep.Csh == 0
            and type(rep.mns) is int and type(rep.mbt) is int)


def applies(sim, d: int) -> bool:
    """Whether deployment ``d``'s run in ``sim`` (a ``Simulation`` with the base class's event hooks: the
    caller checks) is one the compiled loop gives exactly."""
    if not available() or sim._rows is not None:
        return False
    reps = sim.replicas[d] if 0 <= d < len(sim.replicas) else None
    return bool(reps) and all(_plain(r) for r in reps)


def run(sim, order: list[int]) -> tuple[list[Request], float, bool] | None:
    """``Simulation._run_one(order)`` by the compiled loop: (the requests in arrival order, the time of the
    last event, whether it stopped at the drain limit), the replicas' counters set as the Python loop leaves
    them (their queues left empty: a run that stopped at the drain limit leaves requests in flight, which
    nothing reads once the run is over); None where it does not apply."""
    if not order:
        return None
    d = sim._dep[order[0]]
    if not applies(sim, d):
        return None
    reps = sim.replicas[d]
    rep0 = reps[0]
    got = _loop.run(sim._ts, sim._ws, sim._isl, sim._osl, sim._dep, array("q", order), len(reps), rep0.cap,
                    rep0.admit_cap, sim._caps[d], rep0.mns, rep0.mbt, rep0.ahead, rep0.seqs_arg, rep0.it,
                    rep0.line, sim._route, sim.t_stop, Request)
    requests, counters, t_last, stopped = got
    for rep, vals in zip(reps, counters):
        for name, v in zip(COUNTERS, vals):
            setattr(rep, name, v)
        rep.done = vals[-1]
        rep.sched.clear()
    return requests, t_last, stopped
