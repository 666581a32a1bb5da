"""Decomposition of the ``min_cost`` MILP by workload, when the shared rows do not bind.

Entry point: ``solve_split(ir, cands, backend, options, derate) -> SolveResult | None`` (None: solve whole).

Every variable of the formulation belongs to one workload (its candidates' replicas and routes); only the
inventory rows (per GPU type) and the budget row couple workloads. Solving each workload on its own, with
those rows kept (each alone is a relaxation of the shared row), gives per-workload optima whose sum is a lower
bound on the whole problem's optimum. When the union of the per-workload solutions also satisfies the shared
rows, it is feasible for the whole problem and so optimal, to the largest per-workload gap (the sum of the
parts' gaps, each relative to its part, is at most the largest of them relative to the whole). Otherwise the
caller solves the whole MILP as before.

Used only where it pays and is sound: ``min_cost``, at least two workloads, at least ``MIN_CANDIDATES``
candidates, and no inter-rack KV-link row (shared by every workload's P/D candidates).
"""
from __future__ import annotations

from dataclasses import replace

from compiler.deployment import CandidateSet
from compiler.formulate import formulate, n_var
from compiler.ir import ProblemIR
from solvers.base import Backend, SolveOptions, SolveResult, Status, Termination

MIN_CANDIDATES = 300  # below this the whole MILP solves in well under a second


def solve_split(ir: ProblemIR, cands: CandidateSet, backend: Backend, options: SolveOptions,
                derate: dict[str, float] | None = None, memo: dict | None = None) -> SolveResult | None:
    """``memo`` (one per planning run, across its rounds): each workload's MILP solved to optimality is kept under
    the derates of its own candidates; a later round whose derates leave them unchanged takes that solution
    instead of solving the same MILP again (the backend is deterministic: the same answer). Rounds change the
    derates of a few workloads, so from the second round on most of the 100 MILPs of a large spec are not
    re-solved."""
    pd = tuple(getattr(cands, "disagg", ()))
    if (ir.objective != "min_cost" or len(ir.workloads) < 2 or len(cands.candidates) < MIN_CANDIDATES
            or (pd and getattr(ir, "inter_rack_gbps", None))
            or any(c.kv_offload_gib or c.kv_borrow_gib for c in cands.candidates)):  # KV-tier rows are shared
        return None
    mine: dict[str, list] = {w.name: [] for w in ir.workloads}
    mine_pd: dict[str, list] = {w.name: [] for w in ir.workloads}
    for group, cs in ((mine, cands.candidates), (mine_pd, pd)):
        for c in cs:
            if c.workload not in group:
                return None
            group[c.workload].append(c)
    values: dict[str, float] = {}
    objective, seconds, gaps = 0.0, 0.0, []
    statuses, terms = set(), set()
    derate = derate or {}
    for w in ir.workloads:
        key = (id(ir), id(cands), backend.name, options.mip_rel_gap, options.threads, w.name,
               tuple(derate.get(c.id, 1.0) for c in (*mine[w.name], *mine_pd[w.name])))
        hit = memo.get(key) if memo is not None else None
        if hit is not None and hit[0] is ir and hit[1] is cands:  # (the objects themselves: ids can be reused)
            r = hit[2]
        else:
            sub = replace(cands, candidates=tuple(mine[w.name]), pruned=(), best=())
            if pd:
                sub = replace(sub, disagg=tuple(mine_pd[w.name]))
            left = max(options.time_limit_s - seconds, 0.01)
            r = backend.solve(formulate(replace(ir, workloads=(w,)), sub, derate),
                              SolveOptions(left, options.mip_rel_gap, options.threads, options.verbose))
            seconds += r.seconds
            if memo is not None and r.status == Status.OPTIMAL and r.termination == Termination.CONVERGED:
                memo[key] = (ir, cands, r)
        if not r.has_solution or r.objective is None:
            return None  # infeasible or out of time: the whole solve says why
        values.update(r.values)
        objective += r.objective
        gaps.append(r.gap)
        statuses.add(r.status)
        terms.add(r.termination)
    # The shared rows, checked on the union.
    used: dict[str, float] = {}
    usd = 0.0
    for c in cands.candidates + pd:
        n = round(values.get(n_var(c.id), 0.0))
        used[c.gpu] = used.get(c.gpu, 0) + n * c.gpus
        usd += n * c.usd_per_hour
    if any(used.get(p.type, 0) > p.count for p in ir.gpus):
        return None
    if ir.budget_usd_per_hour is not None and usd > ir.budget_usd_per_hour * (1 + 1e-9):
        return None
    status = Status.OPTIMAL if statuses == {Status.OPTIMAL} else Status.FEASIBLE
    gap = None if any(g is None for g in gaps) else max(gaps, default=0.0)
    term = Termination.TIME_LIMIT if Termination.TIME_LIMIT in terms else Termination.CONVERGED
    return SolveResult(status, term, values, objective, gap, seconds, backend.name,
                       f"decomposed into {len(ir.workloads)} workload MILPs")
