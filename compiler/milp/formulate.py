"""Formulation: ``ProblemIR`` + ``CandidateSet`` -> solver-neutral ``MilpModel``.

Notation:
    W: workloads; B_w: length buckets of w, with rate[b] = rate_rps[w] x prob[b]
    C: candidates (workload, GPU type, TP, PP, token budget); G: GPU types in the spec
    n[c] in Z+: replicas of c;  x[b,c] >= 0: request rate of bucket b routed to c (rps)
    cap[b,c] > 0: per-replica rate at which c meets w's SLO on bucket b (cost model), times derate[c] <= 1
    gpus[c] = tp x pp;  usd[c] = gpus[c] x price[gpu(c)]
Constraints:
    sum_c x[b,c] == rate[b]                         for b             (demand[w/b])
    sum_b x[b,c] / cap[b,c] <= n[c]                 for c             (capacity[c])
    sum_{c on g} gpus[c] n[c] <= count[g]           for g             (inventory[g], relaxable)
    sum_c usd[c] n[c] <= budget                                       (budget, relaxable)
    KV tiers (rows kv_offload[g], kv_borrow[g]): see add_kv_tier_rows;
    P/D disaggregation (prefill and decode candidates, rows pd_balance and kv_link): see trimtab.milp.disagg;
    their replicas count in inventory, budget and cost like any candidate's.
Objective ``min_cost``:
    min sum_c usd[c] n[c] + EPS_GPU x sum_c gpus[c] n[c]   (cost, then fewer GPUs)
Routing balance (``min_cost``; ``trimtab.milp.solve.balance_routes``, an LP after the MILP): the MILP's routes
are any split that fits the capacities, often one deployment at 100 % beside another half idle. With every
n[c] fixed at the MILP's value, and u[w] in [0, 1] the highest utilisation among w's deployments,
    sum_b x[b,c] / cap[b,c] <= u[w] n[c]           for unified c of w    (capacity[c], n fixed)
    min sum_w u[w]
spreads each workload's traffic so that its busiest deployment is as idle as the replicas bought allow: the
same cost and replicas, with the most headroom on every deployment the load can be moved off.
Objective ``max_goodput`` (two solves, ``trimtab.milp.solve.solve_ir``): demand rows become ``<=`` (a bucket
may be served in part), then
    1. max sum_{b,c} x[b,c]                                 (served requests per second, all workloads)
    2. min cost  s.t.  sum_{b,c} x[b,c] >= (1 - GOODPUT_TOL) x goodput of 1   (goodput[total])
so among the plans that serve the most traffic under the budget and GPU counts, the cheapest.

``elastic=True`` bounds replicas by what carries all of the candidate's workload instead of by the inventory,
so that ``MilpModel.elastic`` (a slack on each relaxable row, i.e. inventory and budget, minimised over their
right-hand sides) finds the smallest relaxation: the explanation of an infeasible spec
(``trimtab.planning.explain.elastic_changes`` reads each slack's row ``origin``). Every variable keeps a
finite upper
bound (slacks: the row's largest activity), which CP-SAT needs.
"""
from __future__ import annotations

import math

from trimtab.deployment.shape import CandidateSet
from trimtab.ir.model import ProblemIR
from trimtab.spec.paths import SpecPath
from trimtab.solvers.base import SolveResult
from trimtab.solvers.model import Constraint, MilpModel
from trimtab.cost.factory import HOST_KV_SHARE
from trimtab.milp.disagg import add_rows

EPS_GPU = 1e-6  # $/h per GPU: below a cent even for 4,096 GPUs, so it only breaks ties
GOODPUT_TOL = 1e-6  # stage 2 of max_goodput keeps at least (1 - tol) of the best served rate
OBJECTIVES = ("min_cost", "max_goodput")


def n_var(cid: str) -> str:
    return f"replicas[{cid}]"


def x_var(workload: str, bucket: str, cid: str) -> str:
    return f"route[{workload}/{bucket},{cid}]"


def slack_var(cname: str) -> str:
    return f"slack[{cname}]"


def capacity_fill(cands: CandidateSet, res: SolveResult, derate: dict[str, float]) -> dict[str, float]:
    """Per deployment bought (unified, prefill and decode pools): the left side of its ``capacity`` row over
    its replicas (1: full). P/D pools too, so that a simulated miss on one derates it below the load it
    carries (a derate above it leaves the plan as it was: one round per 3-5 % step before)."""
    out = {}
    for c in cands.candidates:
        n = res.values.get(n_var(c.id), 0.0)
        if n >= 0.5:
            f = derate.get(c.id, 1.0)
            out[c.id] = sum(res.values.get(x_var(c.workload, b, c.id), 0.0) / (cap * f)
                            for b, cap in c.capacity_rps) / round(n)
    return out


def _replicas_to_carry_all(ir: ProblemIR, c, derate: float) -> int:
    """Replicas of ``c`` that carry all of its workload's traffic: more are never useful."""
    w = ir.workload(c.workload)
    need = sum(w.rate_rps * b.prob / (c.capacity(b.name) * derate)
               for b in w.buckets if c.capacity(b.name) > 0)
    return math.ceil(need * (1 + 1e-9)) + 1


def formulate(ir: ProblemIR, cands: CandidateSet, derate: dict[str, float] | None = None,
              elastic: bool = False, objective: str | None = None,
              goodput_floor: float | None = None) -> MilpModel:
    """The MILP of ``ir`` over ``cands``. ``objective`` defaults to the spec's; with ``max_goodput``,
    ``goodput_floor=None`` gives stage 1 (max served rate) and a number gives stage 2 (min cost at
    that rate)."""
    derate = derate or {}
    objective = objective or ir.objective
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}")
    goodput = objective == "max_goodput"
    m = MilpModel(name=f"trimtab:{ir.name}")
    by_gpu: dict[str, list] = {}
    for c in cands.candidates:
        pool = ir.gpu(c.gpu)
        ub = _replicas_to_carry_all(ir, c, derate.get(c.id, 1.0)) if elastic else pool.count // c.gpus
        m.add_var(n_var(c.id), "integer", 0, ub)
        by_gpu.setdefault(c.gpu, []).append(c)
    pd = cands.disagg  # prefill/decode sides (trimtab.milp.disagg)
    served: list[tuple[str, float]] = []
    for w in ir.workloads:
        for b in w.buckets:
            terms = []
            for c in cands.candidates:
                if c.workload != w.name or c.capacity(b.name) <= 0:
                    continue
                if c.role == "unified":
                    terms.append((m.add_var(x_var(w.name, b.name, c.id), "continuous", family="route"), 1.0))
                    continue
                # a P/D side's route: the bucket's rate through its pair, counted served once (prefill)
                v = m.add_var(x_var(w.name, b.name, c.id), "continuous", 0.0, w.rate_rps * b.prob, "route")
                if c.role == "prefill":
                    terms.append((v, 1.0))
            served += terms
            m.add(Constraint(f"demand[{w.name}/{b.name}]", "demand", tuple(terms), "<=" if goodput else "==",
                             w.rate_rps * b.prob, origin=SpecPath.workload(w, "rate_rps")))
    for c in cands.unified:
        f = derate.get(c.id, 1.0)
        expr = [(x_var(c.workload, b, c.id), 1.0 / (cap * f)) for b, cap in c.capacity_rps]
        expr.append((n_var(c.id), -1.0))
        m.add(Constraint(f"capacity[{c.id}]", "capacity", tuple(expr), "<=", 0.0,
                         origin=SpecPath.workload(ir.workload(c.workload), "slo"), key=c))
    add_kv_tier_rows(m, ir, cands)
    if pd:
        add_rows(m, ir, pd, derate, n_var)
    relax: list[Constraint] = []
    for pool in ir.gpus:
        cs = by_gpu.get(pool.type, [])
        con = Constraint(f"inventory[{pool.type}]", "inventory",
                         tuple((n_var(c.id), float(c.gpus)) for c in cs), "<=", float(pool.count),
                         origin=SpecPath.gpu(pool, "count"), relaxable=True, key=pool.type)
        relax.append(con)
    if ir.budget_usd_per_hour is not None:
        con = Constraint("budget", "budget", tuple((n_var(c.id), c.usd_per_hour) for c in cands.candidates),
                         "<=", ir.budget_usd_per_hour, origin=SpecPath("budget_usd_per_hour"), relaxable=True)
        relax.append(con)
    if goodput and goodput_floor is not None:
        m.add(Constraint("goodput[total]", "goodput", tuple(served), ">=", goodput_floor,
                         origin=SpecPath("objective")))
    cost = [(n_var(c.id), c.usd_per_hour + EPS_GPU * c.gpus) for c in cands.candidates]
    if goodput and goodput_floor is None and not elastic:
        m.sense = "max"
        objective = list(served)
    else:
        objective = cost
    for con in relax:
        m.add(con)
    m.objective = tuple(objective)
    return m


def add_kv_tier_rows(m: MilpModel, ir: ProblemIR, cands: CandidateSet) -> None:
    """KV tiers (docs/kv-tiers.md), per GPU type g, over the unified candidates:
        sum_{c on g} offload_gib[c] n[c] <= HOST_KV_SHARE x CPU memory of g's nodes   (kv_offload[g])
        sum_{c on g} borrow_gib[c] n[c] <= sum_{l on g} spare_gib[l] n[l]             (kv_borrow[g])
        n[c] <= sum_{l on g: spare_gib[l] >= borrow_gib[c],
                     gpus[l] + gpus[c] <= node} n[l]                                  (kv_borrow_pair[c])
    spare_gib[l]: HBM KV a replica of the HBM-only candidate l leaves free at its planned operating point
    (each bucket alone at its capacity, the worst one). Rows only where some candidate has such a tier."""
    for pool in ir.gpus:
        cs = [c for c in cands.unified if c.gpu == pool.type]
        off = tuple((n_var(c.id), c.kv_offload_gib) for c in cs if c.kv_offload_gib > 0)
        if off:
            m.add(Constraint(f"kv_offload[{pool.type}]", "kv_offload", off, "<=",
                             round(pool.cpu_memory_gib * HOST_KV_SHARE, 6),
                             origin=SpecPath.gpu(pool, note="nodes[].cpu_memory_gib")))
        bor = tuple((n_var(c.id), c.kv_borrow_gib) for c in cs if c.kv_borrow_gib > 0)
        if bor:
            lend = tuple((n_var(c.id), -c.kv_spare_gib) for c in cs if c.kv_spare_gib > 0)
            m.add(Constraint(f"kv_borrow[{pool.type}]", "kv_borrow", bor + lend, "<=", 0.0,
                             origin=SpecPath.gpu(pool, note="spare HBM KV of lenders")))
            # Each borrower replica pairs with a lender replica that can spare its GiB alone and fits beside
            # it on a node (borrowing runs over the node's NVLink; trimtab.milp.placement.place_kv places them
            # together).
            per_node = int(pool.profile.gpus_per_node.value)
            for c in cs:
                if c.kv_borrow_gib > 0:
                    ok = tuple((n_var(l.id), -1.0) for l in cs if l.kv_spare_gib >= c.kv_borrow_gib - 1e-9
                               and l.gpus + c.gpus <= per_node)
                    m.add(Constraint(f"kv_borrow_pair[{c.id}]", "kv_borrow", ((n_var(c.id), 1.0),) + ok, "<=",
                                     0.0, origin=SpecPath.gpu(pool, note="lenders on the node")))


