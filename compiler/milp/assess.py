"""Assess a set of deployments and routes against the spec's traffic with the cost model.

``assess(ir, deployments, routes) -> Assessment`` is shared by plan extraction (the predictions a plan
states) and ``check`` (which recomputes them from the spec and the plan, trusting nothing stored in it).
Each replica of a deployment gets an equal share of the deployment's routed traffic.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import accumulate

from trimtab.cost.factory import traffic_class
from trimtab.deployment.shape import DeploymentLoad, DeploymentSpecView, RouteView, replica_model_of
from trimtab.ir.model import ProblemIR
from trimtab.cost.search import bisect_max, bisect_width, grow
from trimtab.util.jobs import fork_map

NO_ROUTE = "no route serves this workload"


@dataclass(frozen=True, slots=True)
class WorkloadPrediction:
    workload: str
    ttft_ms: float  # at the SLO percentile, worst bucket
    tpot_ms: float  # mean, worst deployment
    percentile: float
    slo_met: bool
    utilization: float  # highest prefill utilisation among its deployments
    worst_deployment: str  # the deployment that sets the worst latency
    reason: str


@dataclass(frozen=True)
class Assessment:
    deployments: dict[str, DeploymentLoad]
    workloads: dict[str, WorkloadPrediction]

    def misses(self) -> list[WorkloadPrediction]:
        """Workloads over their SLO (an unserved workload of a max_goodput plan is not a miss)."""
        return [p for p in self.workloads.values() if not p.slo_met and p.reason != NO_ROUTE]


def assess(ir: ProblemIR, deployments: list[DeploymentSpecView], routes: list[RouteView]) -> Assessment:
    deps = {d.name: d for d in deployments}
    per_dep: dict[str, list[tuple[RouteView, object]]] = {d: [] for d in deps}
    for r in routes:
        w = ir.workload(r.workload)
        b = w.bucket(r.bucket) if w else None
        if w is None or b is None or r.deployment not in deps or r.share <= 0:
            continue  # structural problems are reported by check's verifier
        per_dep[r.deployment].append((r, b))
    loads: dict[str, DeploymentLoad] = {}
    ttft: dict[tuple[str, str, str], float] = {}
    dep_tpot: dict[str, float] = {}
    for name in sorted(deps):
        d = deps[name]
        rm = replica_model_of(ir, d)
        items = per_dep[name]
        reps = max(d.replicas, 0)
        classes, keys = [], []
        for r, b in items:
            w = ir.workload(r.workload)
            rate = w.rate_rps * r.share / reps if reps else math.inf
            classes.append(traffic_class(b, rate, w, rm))
            keys.append((r.workload, r.bucket))
        if not classes:
            loads[name] = DeploymentLoad(name, 0.0, 0.0, 0.0, 0.0, rm.memory.kv_cache_tokens, 0.0, True,
                                         "no traffic")
            continue
        if reps == 0:
            loads[name] = DeploymentLoad(name, math.inf, 1.0, 0.0, 0.0, rm.memory.kv_cache_tokens, math.inf,
                                         False, "traffic routed to a deployment with 0 replicas")
            for k in keys:
                ttft[(k[0], k[1], name)] = math.inf
            dep_tpot[name] = math.inf
            continue
        percentiles = sorted({ir.workload(k[0]).slo.percentile for k in keys})
        state = None
        for p in percentiles:
            state = rm.evaluate(classes, p)
            for k, t in zip(keys, state.ttft_s):
                if ir.workload(k[0]).slo.percentile == p:
                    ttft[(k[0], k[1], name)] = t * 1e3
        dep_tpot[name] = state.tpot_s * 1e3
        loads[name] = DeploymentLoad(name, sum(c.rate_rps for c in classes), state.utilization,
                                     state.decode_batch, state.kv_tokens_used, rm.memory.kv_cache_tokens,
                                     state.tpot_s * 1e3, state.stable, state.reason,
                                     int(max(c.prefix_reserved for c in classes)))
    if any(r.prefill for r in routes):
        # lazy: keeps import trimtab light (milp.pair_routes is the planner's)
        from trimtab.milp.pair_routes import assess_pairs

        assess_pairs(ir, deps, routes, loads, ttft, dep_tpot)
    preds: dict[str, WorkloadPrediction] = {}
    for w in ir.workloads:
        mine = [(k, v) for k, v in ttft.items() if k[0] == w.name]
        if not mine:
            preds[w.name] = WorkloadPrediction(w.name, math.inf, math.inf, w.slo.percentile, False, 0.0, "",
                                               NO_ROUTE)
            continue
        (_, _, worst_t_dep), t = max(mine, key=lambda kv: (kv[1], kv[0]))
        dnames = sorted({k[2] for k, _ in mine})
        worst_d_dep = max(dnames, key=lambda n: (dep_tpot[n], n))
        tpot = dep_tpot[worst_d_dep]
        util = max(loads[n].utilization for n in dnames)
        met = t <= w.slo.ttft_ms and tpot <= w.slo.tpot_ms
        reason = ""
        unstable = [loads[n] for n in dnames if not loads[n].stable]
        if unstable:
            reason = f"{unstable[0].name}: {unstable[0].reason}"
            worst = unstable[0].name
        elif t > w.slo.ttft_ms:
            reason, worst = f"TTFT p{w.slo.percentile:g} {t:.0f} ms > SLO {w.slo.ttft_ms:g} ms", worst_t_dep
        elif tpot > w.slo.tpot_ms:
            reason, worst = f"TPOT {tpot:.1f} ms > SLO {w.slo.tpot_ms:g} ms", worst_d_dep
        else:
            worst = worst_t_dep
        preds[w.name] = WorkloadPrediction(w.name, t, tpot, w.slo.percentile, met, util, worst, reason)
    return Assessment(loads, preds)


def load_factor_to_meet(ir: ProblemIR, view: DeploymentSpecView, routes: list[RouteView], workload: str,
                        steps: int = 8) -> float:
    """Largest share f of ``routes`` (each to ``view``, a unified deployment) at which the cost model has
    ``view`` meet ``workload``'s SLO (this module's ``assess`` of that deployment alone, every route's share
    scaled by f; bisection to 2**-steps); 1.0 when it already does, 0.0 when even the lightest load tried
    misses (a prompt mix whose tail the deployment cannot serve at any load). What the analytic rounds derate
    by (``trimtab.planning.rounds.derate_analytic``), instead of a fixed step per round: a tail that barely
    responds to load needs a large step, and repeated small ones cost a solve each."""
    def meets(f: float) -> bool:
        scaled = [RouteView(r.workload, r.bucket, view.name, r.share * f) for r in routes]
        p = assess(ir, [view], scaled).workloads[workload]
        return p.reason != NO_ROUTE and p.slo_met

    if meets(1.0):
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(steps):
        mid = (lo + hi) / 2
        if meets(mid):
            lo = mid
        else:
            hi = mid
    return lo


def analytic_needs(ir: ProblemIR, plan, deployment: str, workload: str, fill: float, peers=(),
                   derate: dict[str, float] | None = None) -> dict[str, float]:
    """Capacity factors (candidate id -> factor < 1) at which the cost model has ``workload``'s traffic mix on
    ``deployment`` of ``plan`` meet its SLO: for that deployment, ``load_factor_to_meet`` of its routes x its
    ``fill`` (its share of its derated capacity in use); for each candidate of ``peers`` (``Candidate``
    records of the same workload, unified), the same mix of the workload's buckets (their shares on
    ``deployment``) at the per-replica rate that fills the candidate's derated capacity. The solver can only
    see capacities per bucket; a mix of prompt-length ranges on one replica has a longer tail than each alone,
    and a shape that misses with it hands it to a sibling shape that misses the same way in the next round
    unless every shape's factor is known at once (the target family's seed 16: 5 analytic rounds hopping over
    GPU types for one workload). Empty where this does not apply (a deployment of a prefill/decode pair, whose
    latency is set with its partner's)."""
    d = next((x for x in plan.deployments if x.name == deployment), None)
    if d is None or d.role != "unified":
        return {}
    mine = [r for r in plan.routes if r.deployment == deployment and r.share > 0]
    if not mine:
        return {}
    out: dict[str, float] = {}
    f = load_factor_to_meet(ir, DeploymentSpecView.of_plan(d),
                            [RouteView(r.workload, r.bucket, deployment, r.share) for r in mine], workload)
    if f < 1.0:
        out[deployment] = f * min(1.0, fill)
    w = ir.workload(workload)
    mix = [(r.bucket, r.share) for r in mine if r.workload == workload]
    total = sum(sh for _, sh in mix)
    if w is None or not total or w.rate_rps <= 0:
        return out
    for c in peers:
        if c.id == deployment or c.role != "unified":
            continue
        caps = [(b, sh / total, c.capacity(b) * (derate or {}).get(c.id, 1.0)) for b, sh in mix]
        if any(cap <= 0 for _, _, cap in caps):
            continue  # the candidate cannot take this mix at all: nothing to derate it for
        rate = 1.0 / sum(p / cap for _, p, cap in caps)  # per replica, at its full derated capacity
        routes = [RouteView(workload, b, c.id, p * rate / w.rate_rps) for b, p, _ in caps]
        g = load_factor_to_meet(ir, DeploymentSpecView.of_candidate(c, 1), routes, workload)
        if g < 1.0:
            out[c.id] = g
    return out


# Percentiles each deployment is evaluated at to trace its classes' latency distributions for the mix; the SLO
# percentile is added, so a workload served by one bucket on one deployment gets exactly its own prediction.
MIX_GRID = (50.0, 75.0, 90.0, 95.0, 99.0, 99.9)
FORK_DEPLOYMENTS = 40  # deployments from which ``mix_predictions`` and ``with_capacities`` fork


def _cdf_at(t: float, qs: list[float], ps: list[float]) -> float:
    """Share of a component's requests at or below ``t`` from its latency ``qs`` at percentiles ``ps``
    (fractions): linear between them, from 0 at t = 0 below the first, the last slope above the last, at most
    1."""
    if t <= qs[0]:
        return ps[0] * t / qs[0] if qs[0] > 0 else ps[0]
    for i in range(1, len(qs)):
        if t <= qs[i]:
            return ps[i - 1] + (ps[i] - ps[i - 1]) * (t - qs[i - 1]) / max(qs[i] - qs[i - 1], 1e-12)
    slope = (ps[-1] - ps[-2]) / max(qs[-1] - qs[-2], 1e-12)
    return min(1.0, ps[-1] + slope * (t - qs[-1]))


def mix_percentile(components: list[tuple[float, list[float]]], grid: list[float], p: float) -> float:
    """The ``p``-th percentile of a mixture: ``components`` are (weight, latency at each percentile of
    ``grid``), the percentiles ascending, ``p`` among them. The mixture's percentile lies between the
    components' own (where every component is below, so is the mixture); found by bisection on the mixture's
    CDF."""
    if not components:
        return math.inf

    k = grid.index(p)
    total = sum(w for w, _ in components)
    ps = [g / 100 for g in grid]
    lo, hi = min(q[k] for _, q in components), max(q[k] for _, q in components)
    if not math.isfinite(hi):
        return math.inf
    if hi - lo <= 1e-9 * max(hi, 1e-9):
        return hi
    below = lambda t: sum(w * _cdf_at(t, q, ps) for w, q in components) / total < p / 100  # noqa: E731
    return bisect_width(below, lo, hi, 1e-4 * hi)


def mix_predictions(ir: ProblemIR, deployments: list[DeploymentSpecView],
                    routes: list[RouteView]) -> dict[str, tuple[float, float]]:
    """Per workload: (TTFT ms, TPOT ms) at its SLO percentile over its whole mix of length buckets and
    deployments (each route weighted by its share of the workload's requests), where ``assess`` states its
    worst bucket's TTFT and its worst deployment's TPOT (what the planner holds each bucket to). Each
    deployment is evaluated at ``MIX_GRID`` and every workload's SLO percentile under its whole routed load;
    workloads served by a prefill/decode pair keep ``assess``'s figures (their TTFT joins two deployments'
    queues)."""
    deps = {d.name: d for d in deployments}
    per_dep: dict[str, list[tuple[RouteView, object]]] = {}
    for r in routes:
        w = ir.workload(r.workload)
        b = w.bucket(r.bucket) if w else None
        if w is not None and b is not None and r.deployment in deps and r.share > 0:
            per_dep.setdefault(r.deployment, []).append((r, b))
    ttft: dict[str, list] = {}
    tpot: dict[str, list] = {}
    grid = sorted(set(MIX_GRID) | {w.slo.percentile for w in ir.workloads})

    def states_of(name: str) -> list:  # the deployment's steady state at each percentile of the grid
        d = deps[name]
        rm = replica_model_of(ir, d)
        classes = [traffic_class(b, ir.workload(r.workload).rate_rps * r.share / d.replicas,
                                 ir.workload(r.workload), rm) for r, b in per_dep[name]]
        return [rm.evaluate(classes, g) for g in grid]

    names = [n for n in sorted(per_dep) if deps[n].replicas > 0]
    for name, states in zip(names, fork_map(states_of, names, FORK_DEPLOYMENTS)):
        items = per_dep[name]
        inf = [math.inf] * len(grid)
        for i, (r, _) in enumerate(items):
            q = list(accumulate((s.ttft_s[i] * 1e3 if s.stable else math.inf for s in states), max))
            ttft.setdefault(r.workload, []).append((r.share, q if all(map(math.isfinite, q)) else inf))
        for w in sorted({r.workload for r, _ in items}):  # (a set's order is the process's hash seed's)
            share = sum(r.share for r, _ in items if r.workload == w)
            q = list(accumulate((s.tpot_s * 1e3 if s.stable else math.inf for s in states), max))
            tpot.setdefault(w, []).append((share, q if all(map(math.isfinite, q)) else inf))
    pairs = {r.workload for r in routes if r.prefill}
    out = {}
    for w in ir.workloads:
        if w.name in pairs or w.name not in ttft:
            continue
        out[w.name] = (mix_percentile(ttft[w.name], grid, w.slo.percentile),
                       mix_percentile(tpot[w.name], grid, w.slo.percentile))
    return out



def capacity_at_slo(ir: ProblemIR, view: DeploymentSpecView, routes: list[RouteView],
                    rel_tol: float = 0.01) -> float | None:
    """Requests per second one replica of ``view`` (unified) serves with every workload routed to it meeting
    its SLO, its traffic mix as routed (every route's share scaled alike): the planner's own test (``assess``:
    each bucket at its percentile), searched to ``rel_tol`` (``trimtab.cost.search``). None without traffic,
    0.0 when even a trickle of this mix misses."""
    mine = [r for r in routes if r.deployment == view.name and r.share > 0]
    base = sum(ir.workload(r.workload).rate_rps * r.share for r in mine if ir.workload(r.workload))
    if not mine or base <= 0 or view.replicas <= 0:
        return None
    names = {r.workload for r in mine}

    def ok(f: float) -> bool:
        scaled = [RouteView(r.workload, r.bucket, view.name, r.share * f) for r in mine]
        a = assess(ir, [view], scaled)
        return all(a.workloads[w].slo_met for w in names)

    lo = 1e-3
    if not ok(lo):
        return 0.0
    lo, hi = grow(ok, lo, 1.0, 1e6)
    if ok(hi):  # past the growth limit: the SLO never binds on this mix
        return hi * base / view.replicas
    return bisect_max(ok, lo, hi, rel_tol) * base / view.replicas
