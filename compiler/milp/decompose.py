"""Decomposition of the ``min_cost`` MILP by workload, when the shared rows do not bind (or one is priced
out).

Entry point: ``solve_split(ir, cands, backend, options, derate) -> SolveResult | None`` (None: solve whole).

Every variable of the formulation belongs to one workload (its candidates' replicas and routes); only the
inventory rows (per GPU type) and the budget row couple workloads. Solving each workload on its own, with
those rows kept (each alone is a relaxation of the shared row), gives per-workload optima whose sum is a lower
bound on the whole problem's optimum. When the union of the per-workload solutions also satisfies the shared
rows, it is feasible for the whole problem and so optimal, to the largest per-workload gap (the sum of the
parts' gaps, each relative to its part, is at most the largest of them relative to the whole). When rows are
broken (and there is no budget row), ``trimtab.milp.columns`` prices the GPU types up until a union of the
parts' plans fits every row (or, where none does, solves the few workloads it cannot fit together while the
others choose among their plans), and the union is kept when its Lagrangian bound certifies it within
``PRICE_GAP`` (optimal to the MIP gap where the search reaches it); parts that have no other type and already
need more than one type has make the whole problem infeasible (``_cannot_fit``). Otherwise the caller solves
the whole MILP: on the specs that need pricing out it is the one the solver does not finish (its LP bound is
far below the parts' integer optima), so the decomposition is the answer wherever it can certify one.

Used only where it pays and is sound: ``min_cost``, at least two workloads, at least ``MIN_CANDIDATES``
candidates, and no inter-rack KV-link row (shared by every workload's P/D candidates).
"""
from __future__ import annotations

import math
import time

from trimtab.deployment.shape import CandidateSet
from trimtab.deployment.price import fleet_usd_per_hour, replica_usd_per_hour
from trimtab.milp.columns import NoFit, price_rows
from trimtab.milp.parts import Parts, Plan
from trimtab.milp.formulate import EPS_GPU, formulate, n_var
from trimtab.ir.model import ProblemIR
from trimtab.solvers.base import Backend, SolveOptions, SolveResult, Status, Termination

MIN_CANDIDATES = 300  # below this the whole MILP solves in well under a second
# A union of the parts within this certified gap is the answer where the price search cannot close the
# solver's own gap (rel_gap): the whole MILP of a spec that needs pricing out is the one the solver cannot
# finish (docs/solvers.md)
PRICE_GAP = 0.01


def solve_split(ir: ProblemIR, cands: CandidateSet, backend: Backend, options: SolveOptions,
                derate: dict[str, float] | None = None, memo: dict | None = None) -> SolveResult | None:
    """``memo`` (one per planning run, across its rounds): each workload's MILP solved to optimality is kept
    under the derates of its own candidates; a later round whose derates leave them unchanged takes that
    solution instead of solving the same MILP again (the backend is deterministic: the same answer). Rounds
    change the derates of a few workloads, so from the second round on most of the 100 MILPs of a large spec
    are not re-solved."""
    if (ir.objective != "min_cost" or len(ir.workloads) < 2 or len(cands.unified) < MIN_CANDIDATES
            or (cands.disagg and getattr(ir, "inter_rack_gbps", None))
            or any(c.kv_offload_gib or c.kv_borrow_gib for c in cands.unified)):  # KV-tier rows are shared
        return None
    derate = derate or {}
    memo = {} if memo is None else memo  # (within this solve at least: the price searches repeat prices)
    ps = Parts(ir, cands, backend, options, derate, memo)
    if not ps.split():
        return None

    def at_prices(prices: dict[str, float]) -> dict[str, tuple[Plan, float]] | None:
        """Every part at ``prices``: its plan at the spec's prices and a lower bound of its optimum at
        ``prices`` (``trimtab.milp.columns``)."""
        got = ps.solve([w.name for w in ir.workloads], prices)
        if any(r is None for r in got.values()):
            return None
        return {n: (ps.plan(n, r, prices), r.objective * (1 - (r.gap or 0.0))) for n, r in got.items()}

    first = ps.solve([w.name for w in ir.workloads])
    if any(r is None for r in first.values()):
        return ps.stopped[0] if ps.stopped else None
    parts: dict[str, SolveResult] = dict(first)
    bought = {n: ps.plan(n, r, {}).gpus for n, r in parts.items()}  # GPUs per type, per part
    used: dict[str, int] = {}
    for gpus in bought.values():
        for t, k in gpus.items():
            used[t] = used.get(t, 0) + k
    over = [p for p in ir.gpus if used.get(p.type, 0) > p.count]
    if ir.budget_usd_per_hour is not None:
        usd = fleet_usd_per_hour((round(parts[c.workload].values.get(n_var(c.id), 0.0)), c.usd_per_hour)
                                 for c in cands.candidates)
        if usd > ir.budget_usd_per_hour * (1 + 1e-9):
            return None
    note = f"decomposed into {len(ir.workloads)} workload MILPs"
    gap_bound = priced_bound = None
    if over:
        if ir.budget_usd_per_hour is not None:
            return None
        if len(over) == 1 and _cannot_fit(ir, over[0], cands.candidates, parts, bought):
            why = (f"{note}: the workloads that use {over[0].type} have no other type and need more than "
                   f"its {over[0].count} GPUs")
            return SolveResult(Status.INFEASIBLE, Termination.CONVERGED, seconds=ps.spent,
                               backend=backend.name, message=why)
        # the prices the last round ended at, where it priced rows of this IR and set (most parts are the
        # same and in the memo at those prices), else the LP relaxation's
        t0, spent0 = time.perf_counter(), ps.spent  # (the LP, masters and selections count too)
        last = memo.get(("prices", id(ir), id(cands)))
        near = last is not None and last[0] is ir and last[1] is cands
        start = last[2] if near else _lp_prices(ir, cands, derate, backend, options.after(ps.spent))
        if start is None:  # no fractional plan fits the rows, so no plan does
            ps.spent = spent0 + time.perf_counter() - t0
            return SolveResult(Status.INFEASIBLE, Termination.CONVERGED, seconds=ps.spent,
                               backend=backend.name, message=f"{note}: its LP relaxation is infeasible")
        floor = sum(r.objective * (1 - (r.gap or 0.0)) for r in parts.values())
        rows = price_rows({w.name: list(ps.known(w.name)) for w in ir.workloads},
                          {p.type: p.count for p in ir.gpus}, max(p.usd_per_hour for p in ir.gpus), floor,
                          start, at_prices, backend, options.after(ps.spent), options.mip_rel_gap,
                          near=near, joint=lambda names, others: ps.joint(names, others, PRICE_GAP / 2),
                          ceiling=_ceiling(ir, cands.candidates))
        ps.spent = spent0 + time.perf_counter() - t0
        if ps.stopped:
            return ps.stopped[0]
        if isinstance(rows, NoFit):
            far = ", ".join(f"{t} +{p:.4g}" for t, p in sorted(rows.prices.items()) if p)
            why = (f"{note}: no plan fits every GPU type's count (a Lagrangian bound): priced {far} "
                   f"$/GPU-h more, the workloads' own optima bound any plan that fits at "
                   f"{rows.bound:,.0f} $/h, above the {rows.ceiling:,.0f} $/h all the spec's GPUs cost")
            return SolveResult(Status.INFEASIBLE, Termination.CONVERGED, seconds=ps.spent,
                               backend=backend.name, message=why)
        if rows is None or rows.gap > max(options.mip_rel_gap, PRICE_GAP):
            return None
        parts, gap_bound, priced_bound = rows.chosen, rows.gap, rows.bound
        memo[("prices", id(ir), id(cands))] = (ir, cands, rows.prices)
        raised = ", ".join(f"{t} +{p:.4g}" for t, p in sorted(rows.prices.items()) if p)
        together = f", {rows.together} workloads solved together to fit" if rows.together else ""
        note += (f", GPU types priced out together ({raised} $/GPU-h; {rows.steps} price steps{together}, "
                 f"certified gap {gap_bound:.2e})")
    values: dict[str, float] = {}
    gaps, statuses, terms = [], set(), set()
    for w in ir.workloads:
        r = parts[w.name]
        values.update(r.values)
        gaps.append(r.gap)
        statuses.add(r.status)
        terms.add(r.termination)
    objective = sum(parts[w.name].objective for w in ir.workloads)  # (priced-out parts: at the spec's prices)
    proven = statuses == {Status.OPTIMAL} and (gap_bound is None or gap_bound <= options.mip_rel_gap)
    status = Status.OPTIMAL if proven else Status.FEASIBLE
    gap = None if any(g is None for g in gaps) else max(gaps, default=0.0)
    if gap is not None and gap_bound is not None:
        gap = max(gap, gap_bound)
    term = Termination.WORK_LIMIT if Termination.WORK_LIMIT in terms else Termination.CONVERGED
    # the whole MILP's bound: the priced-out rows' Lagrangian bound, else the parts' (which share no row)
    bounds = [parts[w.name].bound for w in ir.workloads]
    bound = priced_bound if priced_bound is not None else (
        None if any(b is None for b in bounds) else sum(bounds))
    return SolveResult(status, term, values, objective, gap, ps.spent, backend.name, note, bound=bound)


def _relaxation(ir: ProblemIR, cands: CandidateSet, derate: dict[str, float], backend: Backend,
                options: SolveOptions):
    """(the whole MILP of ``ir`` on ``cands`` at ``derate``, the solve of its LP relaxation)."""
    m = formulate(ir, cands, derate)
    return m, backend.solve(m.relaxed(), options)


def _lp_prices(ir: ProblemIR, cands: CandidateSet, derate: dict[str, float], backend: Backend,
               options: SolveOptions) -> dict[str, float] | None:
    """Each GPU type's inventory price in the whole MILP's LP relaxation (the row's dual, $ per GPU-hour);
    empty where the backend gives no duals; None where the relaxation is infeasible (then so is the MILP)."""
    m, r = _relaxation(ir, cands, derate, backend, options)
    if r.status == Status.INFEASIBLE:
        return None
    return {c.key: max(-r.duals.get(c.name, 0.0), 0.0) for c in m.constraints if c.family == "inventory"}


def lp_floor(ir: ProblemIR, cands: CandidateSet, backend: Backend, options: SolveOptions) -> float | None:
    """The optimum of the whole MILP's LP relaxation at the cost model's capacities (no derates): a lower
    bound of the optimum of every solve on ``cands`` at any derates (they only lower capacities), so of the
    objective each such solve returns; None where the relaxation is infeasible (then so is every such
    solve); -inf where the backend gives no optimum (no bound)."""
    _, r = _relaxation(ir, cands, {}, backend, options)
    if r.status == Status.INFEASIBLE:
        return None
    return r.objective if r.status == Status.OPTIMAL and r.objective is not None else -math.inf


def _ceiling(ir: ProblemIR, cands: tuple) -> float:
    """What a plan within every GPU type's count costs at most: each type's count at its dearest candidate's
    rate per GPU (the objective's ``EPS_GPU`` included)."""
    rate: dict[str, float] = {}
    for c in cands:
        rate[c.gpu] = max(rate.get(c.gpu, 0.0), c.usd_per_hour / c.gpus + EPS_GPU)
    return sum(p.count * rate.get(p.type, 0.0) for p in ir.gpus)


def _only_on(cands: tuple, pool) -> dict[str, bool]:
    """Per workload with candidates: whether every one of them is on ``pool``'s type, priced per GPU (a
    replica's $/h its GPUs x the type's price: cost and GPUs of any of its plans are then proportional)."""
    out: dict[str, bool] = {}
    for c in cands:
        per_gpu = abs(c.usd_per_hour - replica_usd_per_hour(pool.usd_per_hour, c.gpus)) \
            <= 1e-9 * max(c.usd_per_hour, 1.0)
        out[c.workload] = out.get(c.workload, True) and c.gpu == pool.type and per_gpu
    return out


def _cannot_fit(ir: ProblemIR, pool, cands: tuple, parts: dict[str, SolveResult],
                bought: dict[str, dict[str, int]]) -> bool:
    """Whether the parts that buy ``pool``'s type, with candidates on it alone, need more GPUs than it has:
    a part's cost is then (price + EPS_GPU) x its GPUs (one price per GPU of the type), so its optimum, less
    its own gap, bounds the GPUs any of its plans needs from below, and no price makes it buy fewer (a GPU
    type offered alone, ``trimtab.planning.driver.single_types``). True only where every part that buys the
    type is such a part: the whole MILP is then infeasible."""
    alone = _only_on(cands, pool)
    need = 0.0
    for w in ir.workloads:
        r = parts[w.name]
        if not bought[w.name].get(pool.type, 0):
            continue
        if not alone.get(w.name, False):
            return False
        need += r.objective * (1 - (r.gap or 0.0)) / (pool.usd_per_hour + EPS_GPU)
    return need > pool.count + 1e-6
