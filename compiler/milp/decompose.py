"""Decomposition of the ``min_cost`` MILP by workload, when the shared rows do not bind (or one is priced
out).

Entry point: ``solve_split(ir, cands, backend, options, derate) -> SolveResult | None`` (None: solve whole).

Every variable of the formulation belongs to one workload (its candidates' replicas and routes); only the
inventory rows (per GPU type) and the budget row couple workloads. Solving each workload on its own, with
those rows kept (each alone is a relaxation of the shared row), gives per-workload optima whose sum is a lower
bound on the whole problem's optimum. When the union of the per-workload solutions also satisfies the shared
rows, it is feasible for the whole problem and so optimal, to the largest per-workload gap (the sum of the
parts' gaps, each relative to its part, is at most the largest of them relative to the whole). When exactly
one GPU type's row is broken (and there is no budget row), ``_price_out`` prices that type up until the parts
fit and keeps the union when its Lagrangian bound certifies it within ``PRICE_GAP`` (optimal to the MIP gap
where the search reaches it); parts that have no other type and already need more than it has make the whole
problem infeasible (``_cannot_fit``). When several rows are broken, or pricing one out breaks another,
``trimtab.milp.columns`` prices every row at once, with the same certificate. Otherwise the caller solves
the whole MILP: on such specs it is the one the solver does not finish (its LP bound is far below the parts'
integer optima), so the decomposition is the answer wherever it can certify one.

Used only where it pays and is sound: ``min_cost``, at least two workloads, at least ``MIN_CANDIDATES``
candidates, and no inter-rack KV-link row (shared by every workload's P/D candidates).
"""
from __future__ import annotations

from dataclasses import replace

from trimtab.deployment.shape import CandidateSet
from trimtab.deployment.price import fleet_usd_per_hour, replica_usd_per_hour
from trimtab.milp.columns import price_rows
from trimtab.milp.parts import Parts, Plan
from trimtab.milp.formulate import EPS_GPU, formulate, n_var
from trimtab.ir.model import ProblemIR
from trimtab.solvers.base import Backend, SolveOptions, SolveResult, Status, Termination

MIN_CANDIDATES = 300  # below this the whole MILP solves in well under a second


def solve_split(ir: ProblemIR, cands: CandidateSet, backend: Backend, options: SolveOptions,
                derate: dict[str, float] | None = None, memo: dict | None = None) -> SolveResult | None:
    """``memo`` (one per planning run, across its rounds): each workload's MILP solved to optimality is kept
    under the derates of its own candidates; a later round whose derates leave them unchanged takes that
    solution instead of solving the same MILP again (the backend is deterministic: the same answer). Rounds
    change the derates of a few workloads, so from the second round on most of the 100 MILPs of a large spec
    are not re-solved."""
    pd = tuple(getattr(cands, "disagg", ()))
    if (ir.objective != "min_cost" or len(ir.workloads) < 2 or len(cands.candidates) < MIN_CANDIDATES
            or (pd and getattr(ir, "inter_rack_gbps", None))
            or any(c.kv_offload_gib or c.kv_borrow_gib for c in cands.candidates)):  # KV-tier rows are shared
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
    used = _used(cands.candidates + pd, parts)
    over = [p for p in ir.gpus if used.get(p.type, 0) > p.count]
    if ir.budget_usd_per_hour is not None:
        usd = fleet_usd_per_hour((round(parts[c.workload].values.get(n_var(c.id), 0.0)), c.usd_per_hour)
                                 for c in cands.candidates + pd)
        if usd > ir.budget_usd_per_hour * (1 + 1e-9):
            return None
    note = f"decomposed into {len(ir.workloads)} workload MILPs"
    gap_bound = None
    if over:
        if ir.budget_usd_per_hour is not None:
            return None
        if len(over) == 1 and _cannot_fit(ir, over[0], cands.candidates + pd, parts):
            why = (f"{note}: the workloads that use {over[0].type} have no other type and need more than "
                   f"its {over[0].count} GPUs")
            return SolveResult(Status.INFEASIBLE, Termination.CONVERGED, seconds=ps.spent,
                               backend=backend.name, message=why)
        priced = (_price_out(ir, over[0], cands.candidates + pd, parts, ps.solve, options.mip_rel_gap)
                  if len(over) == 1 else None)
        if ps.stopped:
            return ps.stopped[0]
        # the parts moved off the priced type: the other rows again
        if priced is not None and not any(_used(cands.candidates + pd, priced[0]).get(p.type, 0) > p.count
                                          for p in ir.gpus):
            parts, gap_bound, lam = priced
            note += (f", {over[0].type} priced out at +{lam:g} $/GPU-h (Lagrangian; certified gap "
                     f"{gap_bound:.2e})")
        else:
            # the prices the last round ended at, where it priced rows of this IR and set (most parts are the
            # same and in the memo at those prices), else the LP relaxation's
            last = memo.get(("prices", id(ir), id(cands)))
            start = (last[2] if last is not None and last[0] is ir and last[1] is cands
                     else _lp_prices(ir, cands, derate, backend, options.after(ps.spent)))
            floor = sum(r.objective * (1 - (r.gap or 0.0)) for r in parts.values())
            rows = price_rows({w.name: list(ps.seen[w.name]) for w in ir.workloads},
                              {p.type: p.count for p in ir.gpus}, max(p.usd_per_hour for p in ir.gpus), floor,
                              start, at_prices, backend, options.after(ps.spent), options.mip_rel_gap)
            if ps.stopped:
                return ps.stopped[0]
            if rows is None or rows.gap > max(options.mip_rel_gap, PRICE_GAP):
                return None
            parts, gap_bound = rows.chosen, rows.gap
            memo[("prices", id(ir), id(cands))] = (ir, cands, rows.prices)
            raised = ", ".join(f"{t} +{p:.4g}" for t, p in sorted(rows.prices.items()) if p)
            note += (f", GPU types priced out together ({raised} $/GPU-h; {rows.steps} price steps, "
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
    return SolveResult(status, term, values, objective, gap, ps.spent, backend.name, note)


def _lp_prices(ir: ProblemIR, cands: CandidateSet, derate: dict[str, float], backend: Backend,
               options: SolveOptions) -> dict[str, float]:
    """Each GPU type's inventory price in the whole MILP's LP relaxation (the row's dual, $ per GPU-hour);
    empty where the backend gives no duals."""
    m = formulate(ir, cands, derate)
    r = backend.solve(m.relaxed(), options)
    return {c.key: max(-r.duals.get(c.name, 0.0), 0.0) for c in m.constraints if c.family == "inventory"}


def _used(cands: tuple, parts: dict[str, SolveResult]) -> dict[str, int]:
    """GPUs per type the parts' solutions buy."""
    used: dict[str, int] = {}
    for c in cands:
        n = round(parts[c.workload].values.get(n_var(c.id), 0.0))
        used[c.gpu] = used.get(c.gpu, 0) + n * c.gpus
    return used


# evaluations of the price search at most (each re-solves the parts that buy the priced type)
PRICE_STEPS = 24
BREAKPOINT = 1e-3  # relative width of the price bracket at which the search stops halving
# A priced-out union within this certified gap is the answer where the search cannot close the solver's own
# gap (rel_gap): the whole MILP of a spec that needs pricing out is the one the solver cannot finish
# (docs/solvers.md)
PRICE_GAP = 0.01


def _only_on(cands: tuple, pool) -> dict[str, bool]:
    """Per workload with candidates: whether every one of them is on ``pool``'s type, priced per GPU (a
    replica's $/h its GPUs x the type's price: cost and GPUs of any of its plans are then proportional)."""
    out: dict[str, bool] = {}
    for c in cands:
        per_gpu = abs(c.usd_per_hour - replica_usd_per_hour(pool.usd_per_hour, c.gpus)) \
            <= 1e-9 * max(c.usd_per_hour, 1.0)
        out[c.workload] = out.get(c.workload, True) and c.gpu == pool.type and per_gpu
    return out


def _cannot_fit(ir: ProblemIR, pool, cands: tuple, parts: dict[str, SolveResult]) -> bool:
    """Whether the parts that buy ``pool``'s type, with candidates on it alone, need more GPUs than it has:
    a part's cost is then (price + EPS_GPU) x its GPUs (one price per GPU of the type), so its optimum, less
    its own gap, bounds the GPUs any of its plans needs from below, and no price makes it buy fewer (a GPU
    type offered alone, ``trimtab.planning.driver.single_types``). True only where every part that buys the
    type is such a part: the whole MILP is then infeasible."""
    alone = _only_on(cands, pool)
    on_type: dict[str, list] = {}
    for c in cands:
        if c.gpu == pool.type:
            on_type.setdefault(c.workload, []).append(c)
    need = 0.0
    for w in ir.workloads:
        r = parts[w.name]
        buys = sum(round(r.values.get(n_var(c.id), 0.0)) * c.gpus for c in on_type.get(w.name, ()))
        if not buys:
            continue
        if not alone.get(w.name, False):
            return False
        need += r.objective * (1 - (r.gap or 0.0)) / (pool.usd_per_hour + EPS_GPU)
    return need > pool.count + 1e-6


def _price_out(ir: ProblemIR, pool, cands: tuple, parts: dict[str, SolveResult], solve, rel_gap: float):
    """The parts re-solved with ``pool``'s GPUs at a price lam more per GPU-hour, for the smallest lam
    (doubling, then bisection) at which they buy no more of them than the spec has: a Lagrangian relaxation of
    that one inventory row. For every lam, L(lam) = sum_w z_w(lam) - lam x count (z_w: workload w's optimum at
    the raised price) is a lower bound on the whole MILP's optimum, and the parts' union at a lam where they
    fit is feasible for it; when the two meet to ``rel_gap`` (exactly so when the parts buy all ``count``
    GPUs: complementary slackness) the union is optimal to that gap. The search stops there, or where the
    bracket is ``BREAKPOINT`` wide (parts switching together, ``_repair``); the union is returned with its
    certified gap and lam when that gap is within ``PRICE_GAP``, else None: the whole MILP decides. A part
    that buys none of the type at some lam buys none at any higher lam (its plan's cost is unchanged and every
    other plan's only rose), so only the others are re-solved going up; a part whose plan is the same at both
    ends of the bracket, or that has no other type, is not re-solved between them."""
    gpu, count = pool.type, pool.count
    alone = _only_on(cands, pool)
    by_w: dict[str, list] = {w.name: [] for w in ir.workloads}
    for c in cands:
        by_w[c.workload].append(c)

    def buys(r: SolveResult, n: str) -> int:
        return sum(round(r.values.get(n_var(c.id), 0.0)) * c.gpus for c in by_w[n] if c.gpu == gpu)

    def evaluate(lam: float, base: dict[str, SolveResult], lo: float, above: dict[str, SolveResult] | None,
                 hi: float | None):
        """The parts at ``lam``, from ``base`` (at ``lo`` < lam) and ``above`` (at ``hi`` > lam, if known)."""
        out, todo = {}, []
        for w in ir.workloads:
            r0 = base[w.name]
            k = buys(r0, w.name)
            if k == 0:  # priced out already (at this or a lower lam): unchanged
                out[w.name] = r0
                continue
            if alone[w.name]:  # its cost is (price + lam) x its GPUs: the same plan is optimal at any lam
                out[w.name] = replace(r0, objective=r0.objective + (lam - lo) * k)
                continue
            r1 = above[w.name] if above is not None else None
            if r1 is not None and hi is not None and _same_plan(r0, r1, k, buys(r1, w.name), lo, hi):
                # one plan optimal at both ends buys the same GPUs: it is optimal between (z_w is concave in
                # lam, and this plan's line meets it at both ends), so the part needs no solve
                out[w.name] = replace(r0, objective=r0.objective + (lam - lo) * k)
                continue
            todo.append(w.name)
        got = solve(todo, {gpu: lam})
        if any(r is None for r in got.values()):
            return None
        return {w.name: out[w.name] if w.name in out else got[w.name] for w in ir.workloads}

    def bound(lam: float, sol: dict[str, SolveResult]) -> float:
        # each part's optimum is at least its objective less its own gap
        return sum(r.objective * (1 - (r.gap or 0.0)) for r in sol.values()) - lam * count

    def union() -> tuple[dict[str, SolveResult], float]:
        # the fitting parts with as many of those below the bracket as fit (_repair), at the spec's prices;
        # its gap to the best Lagrangian bound so far
        at_hi = {n: replace(r, objective=r.objective - hi * buys(r, n)) for n, r in hi_sol.items()}
        at_lo = {n: replace(r, objective=r.objective - lo * buys(r, n)) for n, r in lo_sol.items()}
        out = _repair(at_hi, at_lo, lambda n, r: buys(r, n), count)
        cost = sum(r.objective for r in out.values())
        return out, max(cost - best_lb, 0.0) / max(abs(cost), 1e-12)

    best_lb = bound(0.0, parts)
    lo, lo_sol = 0.0, parts
    hi, hi_sol = None, None
    step = max(pool.usd_per_hour, 1e-6) / 4
    for _ in range(PRICE_STEPS):
        lam = step if hi is None and lo == 0.0 else (lo * 2 if hi is None else (lo + hi) / 2)
        sol = evaluate(lam, lo_sol, lo, hi_sol, hi)
        if sol is None:
            return None
        best_lb = max(best_lb, bound(lam, sol))
        if sum(buys(r, n) for n, r in sol.items()) <= count:
            hi, hi_sol = lam, sol
        else:
            lo, lo_sol = lam, sol
        if hi_sol is not None:
            out, gap = union()
            if gap <= rel_gap:
                break  # certified optimal to the MIP gap
        if hi is not None and hi - lo <= BREAKPOINT * hi:
            break  # at the price where parts switch together: halving further only flips the same ties
    if hi_sol is None:
        return None
    out, gap = union()
    if gap > max(rel_gap, PRICE_GAP):
        return None
    return out, gap, hi


def _same_plan(r0: SolveResult, r1: SolveResult, k0: int, k1: int, lo: float, hi: float) -> bool:
    """Whether a part's solutions at prices ``lo`` and ``hi`` are one plan for the interval: both proven
    optimal, buying as many GPUs of the priced type, at the same cost at the spec's prices."""
    if k0 != k1 or r0.gap or r1.gap or r0.objective is None or r1.objective is None:
        return False
    c0, c1 = r0.objective - lo * k0, r1.objective - hi * k1
    return abs(c0 - c1) <= 1e-9 * max(abs(c0), 1.0)


def _repair(hi: dict[str, SolveResult], lo: dict[str, SolveResult], buys,
            count: int) -> dict[str, SolveResult]:
    """The parts at the lowest price found to fit (``hi``), with as many as fit of those that buy more of the
    priced type just below it (``lo``) taking that plan instead, the largest saving per GPU first (ties by
    workload name): at the price where many parts switch at once (identical workloads, or ties), the fitting
    side alone buys far fewer GPUs than the spec has, and the Lagrangian's gap is that slack times the price.
    Every part keeps a plan that is optimal for its own MILP at some price, so the union stays feasible for
    every row but the priced type's, which the greedy keeps within ``count`` (the caller checks the
    others)."""
    out = dict(hi)
    used = sum(buys(n, r) for n, r in hi.items())
    moves = []
    for n, r in lo.items():
        extra = buys(n, r) - buys(n, hi[n])
        saving = hi[n].objective - r.objective
        if extra > 0 and saving > 0:
            moves.append((-saving / extra, n, extra))
    for _, n, extra in sorted(moves):
        if used + extra <= count:
            out[n], used = lo[n], used + extra
    return out
