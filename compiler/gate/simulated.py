"""``check`` by simulation: the plan's structure is verified as in ``trimtab.gate.analytic.verify``
(inventory, budget, cost, memory, routing), and its SLOs by simulating it under the spec's traffic on several
seeds.

Seeds default to ones the planner did not use (``trimtab.sim.validate.check_seeds``: CHECK_SEEDS seeds from
1000, past the plan's own). Per workload the runs are pooled into an attainment with one-sided 95 % bounds
(batch means): the workload fails when the upper bound is below its percentile (the runs show a miss), is
inconclusive when only the point estimate is below (a note; ``strict`` fails it, and also fails a workload
whose lower bound is below target, which is what ``plan`` requires). Each failure line states the pooled
attainment with its bounds, once, then the metric that misses in the worst seed and by how much
(``SeedsResult.failure``).
"""
from __future__ import annotations

from trimtab.gate.analytic import CheckReport, verify
from trimtab.ir.lower import lower
from trimtab.contract.schema import Goodput, Plan
from trimtab.profiles.loader import ProfileSet
from trimtab.sim.validate import CHECK_SEEDS, SeedsResult, check_seeds, simulate_seeds
from trimtab.spec.schema import Spec
from trimtab.spec.traces import Trace
from trimtab.ir.topology import build_topology


def check_simulated(plan: Plan, spec: Spec, *, profiles: ProfileSet | None = None, seed: int | None = None,
                    seeds: int = CHECK_SEEDS, requests: int | None = None, duration_s: float | None = None,
                    trace: Trace | None = None, arrival_cv: float | None = None, strict: bool = False,
                    progress=None, margin: str | None = None) -> tuple[CheckReport, SeedsResult]:
    """``seed``: the first seed (default: past the plan's); ``seeds``: how many runs. A trace replays the same
    arrivals whatever the seed, so it runs once. ``margin`` ("median" or "p90"): also fail a workload whose
    worst seed leaves less headroom to its SLO than the cost model's error (``trimtab.gate.margin``)."""
    ir = lower(spec, profiles)
    rep = verify(plan, ir, build_topology(spec, ir), slo=False)
    recorded = plan.simulation
    run_seeds = check_seeds(1 if trace is not None else seeds, seed,
                            tuple(recorded.seeds) if recorded else ())
    if requests is None and duration_s is None and recorded is not None:
        requests = recorded.requests
    res = simulate_seeds(plan, spec, ir, run_seeds, requests, duration_s=duration_s, trace=trace,
                         arrival_cv=arrival_cv, progress=progress)
    bad = list(rep.violations)
    notes = list(rep.notes) + [n for r in res.runs[:1] for n in r.notes]
    # a max_goodput plan's workloads it serves not at all (stated in its goodput, which ``verify`` checks
    # against the routes): nothing of theirs is offered in simulation (``trimtab.sim.engine.SHED``), so there
    # is no attainment to judge, as ``check --analytic`` skips their unrouted buckets
    unserved = Goodput.unserved(plan)
    for name in res.intervals:
        if name in unserved:
            continue
        v = res.verdict(name)
        if v == "fail" or (strict and not res.demonstrated(name)):
            bad.append(res.failure(name))
        elif v == "inconclusive":
            notes.append(f"workload {name}: below target within noise: {res.describe(name)}; run more seeds "
                         "(--seeds) to decide")
    if margin is not None:
        # lazy: keeps import trimtab light (gate.margin loads the plan extraction)
        from trimtab.gate.margin import margin_violations

        worst = {k: (max(r.workloads[k].ttft_at_target_ms for r in res.runs),
                     max(r.workloads[k].tpot_at_target_ms for r in res.runs)) for k in res.intervals}
        bad += margin_violations(plan, ir, worst, margin)
    return CheckReport(not bad, bad, notes, rep.assessment), res
