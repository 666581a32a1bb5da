"""Solve result -> ``Plan`` (the inverse of formulation), with predictions from ``assess``."""
from __future__ import annotations

import math
from dataclasses import replace

from trimtab.milp.assess import FORK_DEPLOYMENTS, Assessment, assess, capacity_at_slo, mix_predictions
from trimtab.cost.factory import host_tier_tokens, live_tiers, prefix_hit, replica_model
from trimtab.cost.predict import fidelity_warnings
from trimtab.deployment.shape import Candidate, CandidateSet, DeploymentSpecView, RouteView
from trimtab.deployment.price import fleet_usd_per_hour
from trimtab.milp.formulate import n_var, x_var
from trimtab.ir.model import ProblemIR
from trimtab.deployment.kvtiers import allocate, usable_host_gib
from trimtab.contract.schema import (Bucket, Deployment, ErrorBar, Goodput, KvTiers, Placement, Plan,
                                     Prediction, PrefixReuse, Route, Simulation, SolverInfo)
from trimtab.solvers.base import SolveResult
from trimtab.contract.realise import realise
from trimtab.cost.physics import breaches
from trimtab.errors import InternalError
from trimtab.ir.topology import build_topology
from trimtab.milp.disagg import colocation
from trimtab.milp.pair_routes import pair_routes
from trimtab.milp.placement import place_kv, placement_inputs
from trimtab.milp.spread import place_spread
from trimtab.profiles.error_bars import METRICS, bundled_path, error_bar, load_error_bars
from trimtab.util.jobs import fork_map

ROUTE_TOL = 1e-7  # rps below which a route is solver noise


def plan_buckets(ir: ProblemIR) -> dict[str, list[Bucket]]:
    """The plan's ``buckets``: each workload's length ranges as the planner cut them."""
    return {w.name: [Bucket(name=b.name, share=b.prob, input_tokens_min=int(b.isl_min),
                            input_tokens_max=int(b.isl_max), input_tokens_mean=b.isl_mean,
                            output_tokens_mean=b.osl_mean, output_tokens_max=int(b.osl_max))
                     for b in w.buckets]
            for w in ir.workloads}


def chosen(ir: ProblemIR, cands: CandidateSet,
           res: SolveResult) -> tuple[list[tuple[Candidate, int]], list[RouteView]]:
    deps = []
    for c in cands.candidates:
        n = int(round(res.values.get(n_var(c.id), 0.0)))
        if n > 0:
            deps.append((c, n))
    routes = []
    for w in ir.workloads:
        for b in w.buckets:
            for c, _ in deps:
                x = res.values.get(x_var(w.name, b.name, c.id), 0.0)
                if x > ROUTE_TOL and c.role == "unified":
                    routes.append(RouteView(w.name, b.name, c.id, x / w.rate_rps))
    if any(c.role != "unified" for c, _ in deps):
        flows: dict = {}
        for w in ir.workloads:
            for b in w.buckets:
                for c, _ in deps:
                    x = res.values.get(x_var(w.name, b.name, c.id), 0.0)
                    if x > ROUTE_TOL and c.role != "unified":
                        flows.setdefault((w.name, b.name), ([], []))[c.role == "decode"].append((c.id, x))
        routes += pair_routes(ir, flows, {c.id: c for c, _ in deps})
    if ir.objective == "max_goodput":  # served in part: shares are what is served, not normalised to 1
        return deps, routes
    return deps, _normalise(routes)


def _normalise(routes: list[RouteView]) -> list[RouteView]:
    """Shares per workload summing to exactly 1 after dropping solver noise."""
    total: dict[str, float] = {}
    for r in routes:
        total[r.workload] = total.get(r.workload, 0.0) + r.share
    return [replace(r, share=r.share / total[r.workload]) for r in routes]


def views(deps: list[tuple[Candidate, int]]) -> list[DeploymentSpecView]:
    return [DeploymentSpecView.of_candidate(c, n, colocated_with=colocation(c).get("colocated_with") or "")
            for c, n in deps]


def solver_info(res: SolveResult, rounds: int, cost: float) -> SolverInfo:
    """The plan's record of the solve it came from. The bound is rounded down to the plan's precision, so
    that it stays a bound, and stated at most ``cost``: the MILP's objective adds tie-breaking terms of under
    a cent an hour (``EPS_GPU``), which a bound on it may include."""
    bound = None if res.bound is None else min(math.floor(res.bound * 1e4) / 1e4, cost)
    return SolverInfo(backend=res.backend, status=res.status.value, gap=res.gap, bound=bound, rounds=rounds)


def build_plan(ir: ProblemIR, deps: list[tuple[Candidate, int]], routes: list[RouteView], res: SolveResult,
               rounds: int, warnings: list[str]) -> tuple[Plan, Assessment]:
    vs = views(deps)
    a = assess(ir, vs, routes)
    gpus: dict[str, int] = {}
    for c, n in deps:
        gpus[c.gpu] = gpus.get(c.gpu, 0) + n * c.gpus
    cost = fleet_usd_per_hour((n, c.usd_per_hour) for c, n in deps)
    kv_alloc = allocate(deps) if ir.kv_tiers != "off" else {}
    view = {v.name: v for v in vs}
    deployments = [
        Deployment.of_view(view[c.id], kv_cache_tokens=c.kv_cache_tokens,
                           load_rps_per_replica=a.deployments[c.id].rate_rps_per_replica,
                           utilization=a.deployments[c.id].utilization,
                           prefix_cache_tokens=a.deployments[c.id].prefix_cache_tokens,
                           group_replicas=colocation(c).get("group_replicas", 0), kv=_kv(ir, c, kv_alloc))
        for c, _ in sorted(deps, key=lambda d: d[0].id)]
    plan = Plan(
        spec=ir.name, input_hash=ir.input_hash, cost_usd_per_hour=round(cost, 4),
        gpus=dict(sorted(gpus.items())),
        solver=solver_info(res, rounds, round(cost, 4)),
        deployments=deployments,
        routes=[Route(workload=r.workload, bucket=r.bucket, deployment=r.deployment or None,
                      prefill=r.prefill or None, decode=r.decode or None, share=r.share)
                for r in sorted(routes,
                                key=lambda r: (r.workload, r.bucket, r.deployment, r.prefill, r.decode))],
        predictions=predictions(ir, a, vs, routes),
        buckets=plan_buckets(ir),
        warnings=warnings + fidelity_warnings(ir, deps),
        goodput=goodput_of(ir, routes) if ir.objective == "max_goodput" else None,
        prefix=prefix_of(ir, deps, a),
    )
    return plan, a


def _rounded(v: float | None) -> float | None:
    """A searched capacity to the search's own precision (1 %), so the plan's bytes do not carry its noise."""
    return None if v is None else float(f"{v:.3g}")


def prefix_of(ir: ProblemIR, deps: list[tuple[Candidate, int]], a: Assessment) -> dict[str, PrefixReuse]:
    """Per workload with prefix reuse: the hit rate assumed (declared or measured) and what each deployment's
    prefix cache gets of it (with its host-memory tier, if any: the two levels hit as one LRU of
    the larger)."""
    def host(c: Candidate) -> int:
        if c.kv_offload_gib <= 0 or live_tiers(ir):
            return 0
        return host_tier_tokens(replica_model(ir, c.model, c.gpu, c.tp, c.pp, c.dtype, c.max_num_seqs,
                                              c.max_batched_tokens, kv_offload_gib=c.kv_offload_gib,
                                              kv_dtype=c.kv_dtype))

    out = {}
    for w in ir.workloads:
        if not w.prefix_hit_rate:
            continue
        planned = {c.id: round(prefix_hit(w, max(a.deployments[c.id].prefix_cache_tokens, host(c))), 6)
                   for c, _ in deps if c.workload == w.name and c.id in a.deployments}
        out[w.name] = PrefixReuse(source=w.prefix_source, hit_rate=w.prefix_hit_rate,
                                  working_set_tokens=w.prefix_working_set,
                                  hit_rate_planned=dict(sorted(planned.items())))
    return out


def _kv(ir: ProblemIR, c: Candidate, alloc: dict) -> KvTiers | None:
    """The deployment's KV tiers (docs/kv-tiers.md); None when the spec leaves them off."""
    if ir.kv_tiers == "off":
        return None
    lent, lenders = alloc.get(c.id, (0.0, ()))
    live = live_tiers(ir) and (c.kv_offload_gib > 0 or c.kv_borrow_gib > 0 or lent > 0)
    return KvTiers(hbm_tokens=c.kv_cache_tokens, offload_gib=c.kv_offload_gib, borrowed_gib=c.kv_borrow_gib,
                   borrowed_from=list(lenders), lent_gib=lent, live=live)


def goodput_of(ir: ProblemIR, routes: list[RouteView]) -> Goodput:
    per = {w.name: 0.0 for w in ir.workloads}
    for r in routes:
        w = ir.workload(r.workload)
        if w is not None and r.workload in per:
            per[r.workload] += r.share * w.rate_rps
    return Goodput(served_rps=sum(per.values()), offered_rps=sum(w.rate_rps for w in ir.workloads),
                   workloads=per)


def with_placement(plan: Plan, placements: dict) -> Plan:
    """The plan with each deployment's ``placement`` filled from ``trimtab.milp.placement.place``."""
    deps = [d.model_copy(update={"placement": [
        Placement(replica=p.replica, stage=p.stage, node=p.node, gpus=list(p.gpus))
        for p in placements.get(d.name, ())]}) for d in plan.deployments]
    return plan.model_copy(update={"deployments": deps})


def predictions(ir: ProblemIR, a: Assessment, views: list[DeploymentSpecView],
                routes: list[RouteView]) -> dict[str, Prediction]:
    """The plan's ``predictions``: per workload its percentiles over its whole length mix
    (``mix_predictions``), its worst bucket's and deployment's (``assess``: what ``slo_met`` judges), and the
    cost model's measured error for the deployments serving it (``error_bar_of``)."""
    fin = (lambda v: v if math.isfinite(v) else None)
    mix = mix_predictions(ir, views, routes)
    by_name = {v.name: v for v in views}
    out = {}
    for w in ir.workloads:
        p = a.workloads[w.name]
        t, d = mix.get(w.name, (p.ttft_ms, p.tpot_ms))
        serving = [by_name[n] for r in routes if r.workload == w.name
                   for n in (r.deployment, r.prefill, r.decode) if n in by_name]
        out[w.name] = Prediction(ttft_ms=fin(t), tpot_ms=fin(d), percentile=p.percentile, slo_met=p.slo_met,
                                 utilization=p.utilization, ttft_ms_worst_bucket=fin(p.ttft_ms),
                                 tpot_ms_worst_deployment=fin(p.tpot_ms),
                                 error_bar=error_bar_of(ir, serving) if serving else None)
    return out


def error_bar_of(ir: ProblemIR, serving: list[DeploymentSpecView]) -> ErrorBar:
    """The error bar of a workload served by ``serving`` (profiles/error_bars.yaml,
    ``trimtab.profiles.error_bars``): per metric the least accurate class among them, with the pooled figure
    where a class has too few runs."""
    bars = load_error_bars()
    keys = sorted({(d.gpu, d.tp, ir.models[d.model].num_experts.value > 1) for d in serving})
    every = {m: [error_bar(bars, g, tp, moe, ir.engine.name, m) for g, tp, moe in keys] for m in METRICS}
    t, d = (max(every[m], key=lambda b: (b.stat.median_pct, b.cls)) for m in METRICS)
    notes = sorted({f"{b.metric}: {b.note}" for m in METRICS for b in every[m] if b.note})
    return ErrorBar(classes=sorted({b.cls for b in every["ttft"]}),
                    ttft_pct=t.stat.median_pct, ttft_p90_pct=t.stat.p90_pct, ttft_runs=t.stat.runs,
                    tpot_pct=d.stat.median_pct, tpot_p90_pct=d.stat.p90_pct, tpot_runs=d.stat.runs,
                    notes=notes,
                    source=f"profiles/{bundled_path().name}: {bars.benchmark}, {bars.date}")


def with_capacities(plan: Plan, ir: ProblemIR) -> Plan:
    """``plan`` with each unified deployment's ``capacity_rps_per_replica``: requests per second one replica
    serves at its SLO with its planned mix (``capacity_at_slo``). Computed once, for the plan the planner
    returns (``finish_plan``), not for every plan a round builds: each is a search of ~10 assessments per
    deployment, a second of a 100-deployment plan, spread over the processes from
    FORK_DEPLOYMENTS deployments on (``fork_map``: the same values)."""
    routes = [RouteView(r.workload, r.bucket, r.deployment or "", r.share, r.prefill or "", r.decode or "")
              for r in plan.routes]
    unified = [d for d in plan.deployments if d.role == "unified"]
    caps = iter(fork_map(lambda d: _rounded(capacity_at_slo(ir, DeploymentSpecView.of_plan(d), routes)),
                         unified, FORK_DEPLOYMENTS))
    deps = [d.model_copy(update={"capacity_rps_per_replica": next(caps)}) if d.role == "unified" else d
            for d in plan.deployments]
    return plan.model_copy(update={"deployments": deps})


def finish_plan(plan: Plan, spec, ir: ProblemIR, last_sim, sim_requests: int, sim_rounds: int) -> Plan:
    """The last stage of every planner: place the replicas on nodes (CP-SAT when greedy packing fails) and
    record the validating simulation runs (``trimtab.sim.validate.SeedsResult``), so ``check`` knows which
    seeds the plan was fitted on."""
    broken = breaches(plan, ir)
    if broken:
        raise InternalError(["internal error: the plan breaks the speed-of-light bound (a cost-model bug; "
                             "please report it with the spec):"] + ["  " + b.line() for b in broken])
    topo = build_topology(spec, ir)
    groups, flows = placement_inputs(plan, ir)  # P/D: co-located groups, rack affinity of KV-heavy pairs
    kv = {d.name: (d.kv.borrowed_gib, d.kv.lent_gib, d.kv.offload_gib)
          for d in plan.deployments if d.kv is not None}
    host = {n.name: usable_host_gib(ir, n) for n in topo.nodes} if kv else {}
    views_ = [DeploymentSpecView.of_plan(d) for d in plan.deployments]
    if ir.redundancy == "n+1":  # each deployment spread over its nodes (trimtab.milp.spread; docs/online.md)

        plan = with_placement(plan, place_spread(views_, topo)).model_copy(update={"redundancy": "n+1"})
    else:
        plan = with_placement(plan, place_kv(views_, topo, kv, host, groups=groups, flows=flows))
    if last_sim is not None:
        plan = plan.model_copy(update={"simulation": Simulation(
            seeds=list(last_sim.seeds), requests=sim_requests, rounds=sim_rounds, passed=last_sim.ok,
            attainment={k: round(iv.mean, 4) for k, iv in sorted(last_sim.intervals.items())},
            attainment_lower={k: round(iv.lower, 4) for k, iv in sorted(last_sim.intervals.items())},
            undersampled=last_sim.undersampled())})

    # the engine's commands, after placement (multi-node replicas)
    return realise(with_capacities(plan, ir), ir)
