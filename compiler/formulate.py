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
Objective:
    min sum_c usd[c] n[c] + EPS_GPU x sum_c gpus[c] n[c]   (cost, then fewer GPUs)

``elastic=True`` adds a slack to each relaxable constraint and minimises the slacks (scaled by their
right-hand sides) instead: the explanation of an infeasible spec.
"""
from __future__ import annotations

from compiler.candidates import CandidateSet
from compiler.ir import ProblemIR
from solvers.model import Constraint, MilpModel

EPS_GPU = 1e-6  # $/h per GPU: below a cent even for 4,096 GPUs, so it only breaks ties


def n_var(cid: str) -> str:
    return f"replicas[{cid}]"


def x_var(workload: str, bucket: str, cid: str) -> str:
    return f"route[{workload}/{bucket},{cid}]"


def slack_var(cname: str) -> str:
    return f"slack[{cname}]"


def formulate(ir: ProblemIR, cands: CandidateSet, derate: dict[str, float] | None = None,
              elastic: bool = False) -> MilpModel:
    derate = derate or {}
    m = MilpModel(name=f"trimtab:{ir.name}")
    by_gpu: dict[str, list] = {}
    for c in cands.candidates:
        pool = ir.gpu(c.gpu)
        ub = None if elastic else pool.count // c.gpus
        m.add_var(n_var(c.id), "integer", 0, ub)
        by_gpu.setdefault(c.gpu, []).append(c)
    for w in ir.workloads:
        for b in w.buckets:
            terms = []
            for c in cands.candidates:
                if c.workload == w.name and c.capacity(b.name) > 0:
                    terms.append((m.add_var(x_var(w.name, b.name, c.id), "continuous"), 1.0))
            m.add(Constraint(f"demand[{w.name}/{b.name}]", "demand", tuple(terms), "==", w.rate_rps * b.prob,
                             origin=f"workloads[{w.index}] ({w.name}).rate_rps"))
    for c in cands.candidates:
        f = derate.get(c.id, 1.0)
        expr = [(x_var(c.workload, b, c.id), 1.0 / (cap * f)) for b, cap in c.capacity_rps]
        expr.append((n_var(c.id), -1.0))
        m.add(Constraint(f"capacity[{c.id}]", "capacity", tuple(expr), "<=", 0.0,
                         origin=f"workloads ({c.workload}).slo"))
    relax: list[tuple[Constraint, float]] = []
    for pool in ir.gpus:
        cs = by_gpu.get(pool.type, [])
        con = Constraint(f"inventory[{pool.type}]", "inventory", tuple((n_var(c.id), float(c.gpus)) for c in cs),
                         "<=", float(pool.count), origin=f"gpus[{pool.index}] ({pool.type}).count", relaxable=True)
        relax.append((con, max(pool.count, 1)))
    if ir.budget_usd_per_hour is not None:
        con = Constraint("budget", "budget", tuple((n_var(c.id), c.usd_per_hour) for c in cands.candidates),
                         "<=", ir.budget_usd_per_hour, origin="budget_usd_per_hour", relaxable=True)
        relax.append((con, ir.budget_usd_per_hour))
    objective = [(n_var(c.id), c.usd_per_hour + EPS_GPU * c.gpus) for c in cands.candidates]
    if elastic:
        objective = []
        for con, scale in relax:
            s = m.add_var(slack_var(con.name), "integer" if con.family == "inventory" else "continuous")
            objective.append((s, 1.0 / scale))
            m.add(Constraint(con.name, con.family, con.expr + ((s, -1.0),), con.sense, con.rhs, con.origin, True))
        # Among equally small relaxations prefer the cheaper plan.
        objective += [(n_var(c.id), 1e-9 * c.usd_per_hour) for c in cands.candidates]
    else:
        for con, _ in relax:
            m.add(con)
    m.objective = tuple(objective)
    return m
