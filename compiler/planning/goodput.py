"""A ``max_goodput`` plan's search between the capacities the simulation confirmed and those it refuted.

The rounds correct a plan that misses by derating the deployment at fault to the fill it missed at, times a
margin (``trimtab.planning.rounds.sim_derate``), and the next solve serves what the lower capacity carries.
That correction is a guess on the safe side: on ``tests/sim/test_check_cli.py``'s spec the plan that missed
served 3.05 rps of its long prompts and the confirmed one 2.13. For ``min_cost`` the probes look below a
confirmed plan's cost; for ``max_goodput`` the question is how much more traffic the same budget carries, so
this search bisects each lowered capacity between the two (geometrically: derates are factors) and keeps a
plan only where the simulation confirms it and it serves more.
"""
from __future__ import annotations

import math
import time

from trimtab.cost.physics import breaches
from trimtab.planning.rounds import simulate_and_derate
from trimtab.solvers import NetExpired, SafetyNet, SolveOptions, Termination

# bisection steps after a confirmed plan: each a solve and, when it serves more, a simulation
STEPS = 2
# a plan serving less than this share more than the confirmed one is not worth a simulation
MORE = 1e-3


def served(plan_) -> float:
    return plan_.goodput.served_rps if plan_.goodput is not None else 0.0


def between(lo: dict[str, float], hi: dict[str, float]) -> dict[str, float]:
    """Each factor ``lo`` lowered below ``hi`` at their geometric mean; the rest as ``lo`` has them."""
    out = dict(lo)
    for cid, f in lo.items():
        g = hi.get(cid, 1.0)
        if f < g:
            out[cid] = math.sqrt(f * g)
    return out


def refine(planner, spec, ir, cands, be, opts: SolveOptions, lo: dict[str, float], hi: dict[str, float],
           confirmed: list, seeds, requests: int, runs, warnings: list[str], rnd: int,
           net: SafetyNet) -> tuple[float, float, int]:
    """Search between ``lo`` (the derates of the confirmed plan, ``confirmed[-1]``) and ``hi`` (those of the
    last plan the simulation refuted) for a plan serving more; one the simulation confirms is appended to
    ``confirmed`` and becomes the new ``lo``, one it refutes the new ``hi``. Returns the seconds solving and
    simulating and the simulations run. Raises ``NetExpired`` where ``net`` expired before a step."""
    solve_s = sim_s = 0.0
    sims = 0
    best = served(confirmed[-1][2])
    for k in range(STEPS):
        mid = between(lo, hi)
        if mid == lo:
            break
        if net.expired():
            raise NetExpired(f"before goodput step {k + 1}'s solve", sims)
        res = planner.solve(ir, cands, mid, be, net.options(opts))
        solve_s += res.seconds
        if res.termination == Termination.TIME_LIMIT:
            raise NetExpired(f"in goodput step {k + 1}'s solve, stopped after {res.seconds:.1f} s", sims)
        if not res.has_solution:
            break
        plan_, a = planner.build(ir, cands, res, rnd + k, warnings)
        if served(plan_) <= best * (1 + MORE) or a.misses() or breaches(plan_, ir):
            hi = mid  # serves no more at these capacities, or the cost model or physics refutes it already
            continue
        if net.expired():
            raise NetExpired(f"before goodput step {k + 1}'s simulation", sims)
        ts = time.perf_counter()
        sim, _ = simulate_and_derate(plan_, spec, ir, seeds, requests, mid, planner.fill(cands, res, mid), {},
                                     runs)
        sim_s += time.perf_counter() - ts
        sims += 1
        if sim.ok:
            confirmed.append((plan_.cost_usd_per_hour, rnd + k, plan_, a, res, sim))
            best, lo = served(plan_), mid
        else:
            hi = mid
    return solve_s, sim_s, sims
