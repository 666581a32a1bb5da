"""The Python API: the only module that wires the stages together.

    spec = load_spec("examples/quickstart.yaml")
    result = plan(spec)                 # PlanResult: .plan, .ir, .candidates, .assessment, ...
    report = check(result.plan, spec)   # CheckReport: .ok, .violations (the gate `trimtab check` runs)
    alt = what_if(spec, {"workloads.chat.rate_rps": 8, "gpus.h100-sxm.count": 0})
    changes = diff_plans(result.plan, alt.plan)

Stages: load_spec -> lower -> one driver (``trimtab.planning.driver.drive``) with the planner the spec needs
(``trimtab.planning.planners.UnifiedPlanner`` or ``trimtab.planning.lora.LoraPlanner``): candidates ->
(precheck) ->
formulate -> backend.solve -> extract -> assess -> simulate on seeds -> place (CP-SAT) -> physics guard.
"""
from __future__ import annotations

import time
from dataclasses import replace

from trimtab.contract.schema import Plan
from trimtab.errors import InputError, Problem, SafetyNetError
from trimtab.gate.analytic import CheckReport, check as check_analytic, plan_references
from trimtab.gate.simulated import check_simulated
from trimtab.contract.diff import diff_plans
from trimtab.planning.driver import PlanResult, drive
from trimtab.ir.lower import lower
from trimtab.profiles.loader import ProfileSet
from trimtab.sim import DEFAULT_SEED, simulate
from trimtab.sim.validate import CHECK_SEEDS
from trimtab.solvers import NetExpired, NettedBackend, SafetyNet, get_backend, spec_options
from trimtab.spec.load import load_spec, spec_profiles
from trimtab.spec.schema import Spec
from trimtab.spec.overrides import apply_overrides


def plan(spec: Spec, *, backend: str | None = None, time_limit_s: float | None = None,
         profiles: ProfileSet | None = None, validate: bool = True, seed: int = DEFAULT_SEED,
         progress=None) -> PlanResult:
    """Cheapest deployment meeting every SLO. Raises InfeasibleError (exit 3) or NoSolutionError (exit 4).

    ``validate``: simulate each analytically sound plan (``trimtab.sim``) on PLAN_SEEDS seeds from ``seed``
    with the default request count, and re-solve with the deployments at fault derated while a workload's
    attainment is not shown to reach its target (lower 95 % bound; ``trimtab.sim.validate``). One driver
    (``trimtab.planning.driver.drive``) for every spec; adapters and tenants get the LoRA planner.
    ``progress``: called with each step's name as it starts (``drive``)."""
    t0 = time.perf_counter()
    profiles = profiles or spec_profiles(spec)
    ir = lower(spec, profiles)
    if spec.schedule is not None:  # plans per window (docs/online.md)
        # lazy: keeps import trimtab light (the planners load on use)
        from trimtab.planning.schedule import SchedulePlanner

        sp = SchedulePlanner(spec)
        res = drive(sp, spec, ir, backend=backend, time_limit_s=time_limit_s, validate=validate, seed=seed,
                    t0=t0, progress=progress)
        return replace(res, plan=sp.with_windows_validated(res.plan))
    if ir.redundancy == "n+1":  # losing any one node keeps every SLO (compiler/planning/redundancy.py)
        # lazy: keeps import trimtab light (the planners load on use)
        from trimtab.planning.redundancy import redundant_planner

        return drive(redundant_planner(spec, ir), spec, ir, backend=backend, time_limit_s=time_limit_s,
                     validate=validate, seed=seed, t0=t0, profiles=profiles, progress=progress)
    if ir.lora is not None:
        # lazy: keeps import trimtab light (the planners load on use)
        from trimtab.planning.lora import LoraPlanner as P
    else:
        # lazy: keeps import trimtab light (the planners load on use)
        from trimtab.planning.planners import UnifiedPlanner as P
    return drive(P(), spec, ir, backend=backend, time_limit_s=time_limit_s, validate=validate, seed=seed,
                 t0=t0, profiles=profiles, progress=progress)


def explain(spec: Spec, *, backend: str | None = None, time_limit_s: float | None = None,
            profiles: ProfileSet | None = None):
    """Why ``spec`` is infeasible and what to relax, or what binds a feasible plan's cost (cost model only),
    for the problem the spec poses: with adapters or tenants, the adapter-placement problem. Its solves (one
    per relaxation tried, per binding row) are under one wall-clock safety net (``time_limit_s``, else the
    spec's ``solver.time_limit_s``; ``trimtab.solvers.NettedBackend``): once it expires, or a solve stops on
    it, ``SafetyNetError`` (exit 4), never an explanation worded by the machine's load."""
    # lazy: keeps import trimtab light (the planners load on use)
    from trimtab.planning.explain import explain as explain_unified

    t0 = time.perf_counter()
    ir = lower(spec, profiles or spec_profiles(spec))
    opts = spec_options(spec, time_limit_s)
    net = SafetyNet(opts.time_limit_s, t0)
    be = NettedBackend(get_backend(backend or spec.solver.backend), net, "the explanation")
    try:
        if ir.redundancy == "n+1":
            return _explain_redundant(spec, ir, be, opts)
        if ir.lora is not None:
            # lazy: keeps import trimtab light (the planners load on use)
            from trimtab.planning.lora import LoraPlanner

            return LoraPlanner().explain(ir, be, opts)
        return explain_unified(ir, be, opts)
    except NetExpired as exc:
        raise SafetyNetError([f"explain stopped by the wall-clock time limit (--time-limit or "
                              f"solver.time_limit_s: {net.limit_s:g} s, a safety net) after "
                              f"{net.spent():.1f} s, {exc}", "no explanation written (where a run the wall "
                              "clock stopped had got to depends on the machine's load); raise --time-limit"],
                             str(exc)) from None


def _explain_redundant(spec: Spec, ir, be, opts):
    """``explain`` of an n+1 spec (docs/online.md, "Redundancy"): feasibility and cost of the problem with its
    n+1 rows (``trimtab.planning.redundancy.redundant_planner``: its candidates, solve and infeasibility
    lines; with adapters or tenants, the adapter problem's); the binding analysis is that of the same spec
    without n+1, said so in a note, with that problem's cost."""
    # lazy: keeps import trimtab light (the planners load on use)
    from trimtab.planning.explain import Explanation, explain as explain_unified, stopped
    from trimtab.planning.redundancy import redundant_planner

    planner = redundant_planner(spec, ir)
    cands = planner.candidates(ir)
    problems = planner.precheck(ir, cands)
    res = None if problems else planner.solve(ir, cands, {}, be, opts)
    if res is None or not res.has_solution:
        if res is not None and res.status.value != "infeasible":
            return stopped(be, res)
        return Explanation(False, problems or planner.infeasible(ir, cands, be, opts),
                           notes=["redundancy: n+1: every SLO must hold with any one node lost; the lines "
                                  "above name what to relax for that, and what the spec would need without "
                                  "n+1"])
    # the plan this solve gives, as plan builds it
    cost = planner.build(ir, cands, res, 1, [])[0].cost_usd_per_hour
    if ir.lora is not None:
        # lazy: keeps import trimtab light (the planners load on use)
        from trimtab.planning.lora import LoraPlanner

        base = LoraPlanner().explain(replace(ir, redundancy="none"), be, opts)
    else:
        base = explain_unified(replace(ir, redundancy="none"), be, opts)
    note = ("redundancy: n+1: the cost is that of the cheapest plan that keeps every SLO with any one node "
            "lost; the binding analysis is of the same spec without n+1")
    if base.feasible:
        note += f" (whose cheapest plan costs {base.cost_usd_per_hour:.2f} $/h)"
    return Explanation(True, binding=base.binding, cost_usd_per_hour=cost, notes=[note],
                       binding_base_usd_per_hour=base.cost_usd_per_hour)


def check(plan: Plan, spec: Spec, *, analytic: bool = False, profiles: ProfileSet | None = None,
          seeds: int = CHECK_SEEDS, seed: int | None = None, strict: bool = False,
          margin: str | None = None) -> CheckReport:
    """The gate ``trimtab check`` runs, so that a script and CI judge a plan alike: the plan's structure
    against the spec, and its SLOs by simulation at seeds the planner did not use
    (``trimtab.gate.simulated``); ``analytic=True``: the SLOs by the cost model's predictions only (fast,
    ``trimtab.gate.analytic``). A plan made from another spec raises InputError (exit 1) naming the plan's
    field. ``margin`` ("median" or "p90"): also fail a workload whose SLO headroom is smaller than the cost
    model's error for its deployments (``trimtab.gate.margin``, ``check --margin``)."""
    if margin is not None and margin not in ("median", "p90"):
        raise InputError([Problem("margin", f"must be 'median' or 'p90', got {margin!r}")])
    if analytic:
        return with_margin(check_analytic(plan, spec, profiles), plan, spec, profiles, margin)
    foreign = plan_references(plan, lower(spec, profiles or spec_profiles(spec)))
    if foreign:
        raise InputError(foreign, "plan")
    return check_simulated(plan, spec, profiles=profiles, seed=seed, seeds=seeds, strict=strict,
                           margin=margin)[0]


def with_margin(rep: CheckReport, plan: Plan, spec: Spec, profiles: ProfileSet | None,
                margin: str | None) -> CheckReport:
    """An analytic check's report with ``check --margin``'s lines added (the cost model's worst buckets)."""
    if margin is None or rep.assessment is None:
        return rep
    # lazy: keeps import trimtab light (gate.margin loads the plan extraction)
    from trimtab.gate.margin import margin_violations

    seen = {k: (v.ttft_ms, v.tpot_ms) for k, v in rep.assessment.workloads.items()}
    bad = margin_violations(plan, lower(spec, profiles or spec_profiles(spec)), seen, margin)
    return replace(rep, ok=rep.ok and not bad, violations=rep.violations + bad)


def what_if(spec: Spec, overrides: dict[str, object], **kwargs) -> PlanResult:
    """Plan a copy of ``spec`` with dotted-path overrides, e.g. ``{"workloads.chat.rate_rps": 8}``."""
    return plan(apply_overrides(spec, overrides), **kwargs)


__all__ = ["CheckReport", "PlanResult", "check", "diff_plans", "explain", "load_spec", "plan", "simulate",
           "what_if"]
