"""The planners' correction rounds: after a solve, assess the plan analytically and then by simulation; where a
workload misses, lower the capacity of the deployment at fault (``derate``) so the next solve buys more of it.

Used by the one driver (``compiler.driver.drive``) for every kind of spec. Each function returns new derates; the
ones it is given are left as they were.
"""
from __future__ import annotations

MAX_ROUNDS = 8
DERATE = 0.85  # capacity factor applied to a deployment at fault per analytic miss
SIM_DERATE_RANGE = (0.85, 0.97)  # capacity factor for a deployment at fault in simulation (see sim_derate)
MARGIN_DERATE = 0.95
SIM_ROUNDS = 6  # extra rounds allowed for re-solves after a simulated miss


def derate_analytic(misses, derate: dict[str, float]) -> dict[str, float]:
    """``derate`` with the capacity of each missing workload's worst deployment lowered by DERATE."""
    out = dict(derate)
    for p in misses:
        if p.worst_deployment:
            out[p.worst_deployment] = out.get(p.worst_deployment, 1.0) * DERATE
    return out


def simulate_and_derate(plan, spec, ir, seeds: tuple[int, ...], requests: int, derate: dict[str, float],
                        fill: dict[str, float] | None = None):
    """Simulate ``plan`` exactly as it will be written (rounded floats, so ``check`` replays these runs) on
    ``seeds`` (``compiler.sim.validate``: stop after the first seed when it already shows a miss) and, for each
    workload whose lower confidence bound is below target, derate its worst deployment to ``sim_derate`` x the
    load it carries now: ``fill`` gives each deployment's share of its (derated) capacity in use, so a deployment
    that misses below its capacity gets a capacity the next solve must respect (a derate above the fill would
    change nothing). Returns (the ``SeedsResult``, the new derates)."""
    from compiler.plan.emit import plan_to_data
    from compiler.plan.schema import Plan
    from compiler.sim.validate import simulate_seeds

    res = simulate_seeds(Plan.model_validate(plan_to_data(plan)), spec, ir, seeds, requests, fail_fast=True)
    out = dict(derate)
    for name in res.intervals:
        worst = "" if res.demonstrated(name) else res.worst_deployment(name)
        if worst:
            used = min(1.0, (fill or {}).get(worst, 1.0))
            out[worst] = out.get(worst, 1.0) * sim_derate(res, name) * used
    return res, out


def sim_derate(res, name: str) -> float:
    """Capacity factor for a workload the runs do not show meeting its SLO: by how far its worst run's TTFT or
    TPOT at the percentile exceeds the SLO (latency grows at least linearly with load near capacity, so
    1 / (1 + excess) is enough or more), between SIM_DERATE_RANGE; MARGIN_DERATE when no metric exceeds on its
    own (a joint miss, or only the confidence margin missing)."""
    w = min(res.runs, key=lambda r: r.workloads[name].attainment).workloads[name]
    excess = max(w.ttft_at_target_ms / w.ttft_slo_ms, w.tpot_at_target_ms / w.tpot_slo_ms) - 1
    if not excess > 0:
        return MARGIN_DERATE
    lo, hi = SIM_DERATE_RANGE
    return min(hi, max(lo, 1 / (1 + excess)))
