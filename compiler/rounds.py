"""The planners' correction rounds: after a solve, assess the plan analytically and then by simulation; where a
workload misses, lower the capacity of the deployment at fault (``derate``) so the next solve buys more of it.

Shared by ``compiler.api.plan`` and the multi-LoRA planner (``compiler.lora.plan``), so both correct the same way.
"""
from __future__ import annotations

MAX_ROUNDS = 8
DERATE = 0.85  # capacity factor applied to a deployment at fault per analytic miss
SIM_DERATE = (0.92, 0.85)  # for a deployment at fault in simulation: attainment within 2 points of target, or not
SIM_ROUNDS = 6  # extra rounds allowed for re-solves after a simulated miss


def derate_analytic(misses, derate: dict[str, float]) -> None:
    """Lower the capacity of each missing workload's worst deployment (in place)."""
    for p in misses:
        if p.worst_deployment:
            derate[p.worst_deployment] = derate.get(p.worst_deployment, 1.0) * DERATE


def simulate_and_derate(plan, spec, ir, seed: int, requests: int, derate: dict[str, float]):
    """Simulate ``plan`` exactly as it will be written (rounded floats, so ``check`` replays this run) and, for
    each workload below its target, derate its worst deployment (in place). Returns the simulation result."""
    from compiler.plan.emit import plan_to_data
    from compiler.plan.schema import Plan
    from compiler.sim import simulate

    sim = simulate(Plan.model_validate(plan_to_data(plan)), spec, ir=ir, seed=seed, requests=requests,
                   timeline=False)
    for w in sim.workloads.values():
        if not w.passed and w.worst_deployment:
            f = SIM_DERATE[0] if w.target - w.attainment <= 0.02 else SIM_DERATE[1]
            derate[w.worst_deployment] = derate.get(w.worst_deployment, 1.0) * f
    return sim
