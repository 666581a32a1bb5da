"""The Python API: the only module that wires the stages together.

    spec = load_spec("examples/quickstart.yaml")
    result = plan(spec)                 # PlanResult: .plan, .ir, .candidates, .assessment, ...
    report = check(result.plan, spec)   # CheckReport: .ok, .violations
    alt = what_if(spec, {"workloads.chat.rate_rps": 8, "gpus.h100-sxm.count": 0})
    changes = diff_plans(result.plan, alt.plan)

Stages: load_spec -> lower -> build_candidates -> (precheck) -> formulate -> backend.solve -> extract ->
assess -> place (CP-SAT: replicas onto nodes and GPU indices); when assessing the solved plan finds a workload over its SLO (deployments mixing length buckets
queue differently from each bucket alone), the capacities of the deployment at fault are lowered and the
model re-solved, for at most MAX_ROUNDS rounds.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from compiler.assess import Assessment
from compiler.candidates import CandidateSet, build_candidates
from compiler.check import CheckReport, check
from compiler.diff import diff_plans
from compiler.errors import InfeasibleError, NoSolutionError
from compiler.explain import precheck, relaxations
from compiler.formulate import capacity_fill, solve_ir
from compiler.ir import ProblemIR
from compiler.lower import lower
from compiler.plan.extract import build_plan, chosen, finish_plan
from compiler.plan.schema import Plan
from compiler.sim import DEFAULT_SEED, default_requests
from compiler.sim.validate import validation_seeds
from compiler.profiles import ProfileSet, load_profiles
from compiler.rounds import MAX_ROUNDS, SIM_ROUNDS, derate_analytic, simulate_and_derate
from compiler.spec.load import load_spec
from compiler.spec.schema import Spec
from compiler.whatif import apply_overrides
from solvers import SolveOptions, SolveResult, get_backend



@dataclass(frozen=True)
class PlanResult:
    plan: Plan
    ir: ProblemIR
    candidates: CandidateSet
    assessment: Assessment
    solve: SolveResult
    rounds: int
    seconds: dict[str, float] = field(default_factory=dict)  # per stage wall time


def plan(spec: Spec, *, backend: str | None = None, time_limit_s: float | None = None,
         profiles: ProfileSet | None = None, validate: bool = True, seed: int = DEFAULT_SEED) -> PlanResult:
    """Cheapest deployment meeting every SLO. Raises InfeasibleError (exit 3) or NoSolutionError (exit 4).

    ``validate``: simulate each analytically sound plan (``compiler.sim``) on PLAN_SEEDS seeds from ``seed``
    with the default request count, and re-solve with the deployments at fault derated while a workload's
    attainment is not shown to reach its target (lower 95 % bound; ``compiler.sim.validate``)."""
    t0 = time.perf_counter()
    profiles = profiles or load_profiles()
    ir = lower(spec, profiles)
    if ir.lora is not None:  # adapters or tenants: shared candidates and the placement MILP (compiler/lora)
        from compiler.lora.plan import plan_lora
        return plan_lora(spec, ir, backend=backend, time_limit_s=time_limit_s, validate=validate, seed=seed, t0=t0)
    t1 = time.perf_counter()
    cands = build_candidates(ir)
    t2 = time.perf_counter()
    problems = precheck(ir, cands)
    if problems:
        raise InfeasibleError(problems)
    be = get_backend(backend or spec.solver.backend)
    opts = SolveOptions(time_limit_s=time_limit_s or spec.solver.time_limit_s)
    derate: dict[str, float] = {}
    solve_s = 0.0
    sim_rounds = 0
    sim_requests = default_requests(ir)
    seeds = validation_seeds(seed)
    last_sim = None
    best = None
    warnings = list(ir.warnings)
    for rnd in range(1, MAX_ROUNDS + (SIM_ROUNDS if validate else 0) + 1):
        remaining = opts.time_limit_s - solve_s
        res = solve_ir(ir, cands, be, SolveOptions(max(remaining, 0.01), opts.mip_rel_gap, opts.threads), derate)
        solve_s += res.seconds
        if not res.has_solution:
            if best is not None:
                break  # keep the last plan; its misses are stated below
            if res.status.value == "infeasible":
                raise InfeasibleError(["no deployment meets every SLO within the GPU counts and budget:"]
                                      + ["  " + r for r in relaxations(ir, cands, be, opts)])
            raise NoSolutionError([f"solver {be.name} stopped without a plan ({res.termination.value}"
                                   + (f": {res.message}" if res.message else "") + f") after {res.seconds:.1f} s;"
                                   " raise --time-limit or try --solver cbc"])
        deps, routes = chosen(ir, cands, res)
        plan_, a = build_plan(ir, deps, routes, res, solve_s, rnd, warnings)
        best = (plan_, a, res, rnd)
        misses = a.misses()
        last_sim = None
        if not misses:
            if not validate or ir.objective == "max_goodput":
                break  # (the simulator offers every workload's full rate; a goodput plan serves part of it)
            # Validate by simulation; where a workload misses, derate the deployments at fault and re-solve.
            last_sim = simulate_and_derate(plan_, spec, ir, seeds, sim_requests, derate, capacity_fill(cands, res, derate))
            if last_sim.ok:
                break
            sim_rounds += 1
            continue
        derate_analytic(misses, derate)
    plan_, a, res, rnd = best
    if a.misses():
        extra = [f"{p.workload}: could not be brought within its SLO after {rnd} rounds ({p.reason})"
                 for p in a.misses()]
        plan_, a = build_plan(ir, *chosen(ir, cands, res), res, solve_s, rnd, warnings + extra)
    elif last_sim is not None and not last_sim.ok:
        extra = [f"{line.removeprefix('workload ')}; not brought within its SLO by simulation after {rnd} rounds"
                 for line in last_sim.failures()]
        plan_, a = build_plan(ir, *chosen(ir, cands, res), res, solve_s, rnd, warnings + extra)
    plan_ = finish_plan(plan_, spec, ir, last_sim, sim_requests, sim_rounds)
    t3 = time.perf_counter()
    return PlanResult(plan_, ir, cands, a, res, rnd,
                      {"lower": t1 - t0, "candidates": t2 - t1, "solve": solve_s, "total": t3 - t0})


def what_if(spec: Spec, overrides: dict[str, object], **kwargs) -> PlanResult:
    """Plan a copy of ``spec`` with dotted-path overrides, e.g. ``{"workloads.chat.rate_rps": 8}``."""
    return plan(apply_overrides(spec, overrides), **kwargs)


__all__ = ["CheckReport", "PlanResult", "check", "diff_plans", "load_spec", "plan", "what_if"]
