"""Solving the formulated MILP for the spec's objective: split by workload where nothing couples them
(``trimtab.milp.decompose``), else whole; then re-spread the routes over the replicas bought
(``balance_routes``); ``max_goodput`` in two stages. Above ``trimtab.milp.formulate`` (the model) and
``trimtab.milp.decompose`` (its split). The balance LP's notation is in compiler/milp/formulate.py's
docstring ("Routing balance").
"""
from __future__ import annotations

import time
from dataclasses import replace

from trimtab.milp.decompose import solve_split
from trimtab.deployment.shape import CandidateSet
from trimtab.milp.formulate import GOODPUT_TOL, formulate, n_var
from trimtab.ir.model import ProblemIR
from trimtab.solvers.base import Backend, SolveOptions, SolveResult, Status, Termination


def util_var(workload: str) -> str:
    return f"utilisation[{workload}]"


def balance_routes(ir: ProblemIR, cands: CandidateSet, backend: Backend, options: SolveOptions,
                   res: SolveResult, derate: dict[str, float] | None = None) -> SolveResult:
    """``res`` with its routes re-spread by the balance LP (module docstring); replicas, cost, status and gap
    are the MILP's. Returns ``res`` unchanged when it has no solution or the LP gives none (the MILP's
    routes stand)."""
    if not res.has_solution:
        return res
    # Only the deployments bought: a candidate with no replicas carries no traffic, so its routes stay 0 (and
    # the LP is the size of the plan, not of the candidate set).
    bought = lambda c: round(res.values.get(n_var(c.id), 0.0)) > 0  # noqa: E731
    cands = replace(cands, candidates=tuple(c for c in cands.candidates if bought(c)))
    m = formulate(ir, cands, derate)
    fixed = {}
    for name, v in list(m.variables.items()):
        if v.kind == "integer":
            val = float(round(res.values.get(name, 0.0)))
            fixed[name] = val
            m.variables[name] = replace(v, lb=val, ub=val)
    util = {}
    rows = []
    for con in m.constraints:
        # a unified candidate's capacity row (a P/D side's stays as it is: the LP evens out the unified ones)
        c = con.key if con.family == "capacity" and con.key.role == "unified" else None
        if c is not None:
            u = util.get(c.workload) or m.add_var(util_var(c.workload), "continuous", 0.0, 1.0)
            util[c.workload] = u
            expr = tuple(t for t in con.expr if t[0] != n_var(c.id)) + ((u, -fixed[n_var(c.id)]),)
            con = replace(con, expr=expr)
        rows.append(con)
    if not util:
        return res
    return solve_balance(m, rows, util, backend, options, res)


def solve_balance(m, rows, util: dict[str, str], backend: Backend, options: SolveOptions,
                  res: SolveResult) -> SolveResult:
    """Solve a balance LP (``m`` with its constraints replaced by ``rows``) minimising the sum of the
    per-workload utilisation variables ``util``, in the time ``res`` left; ``res`` with its route values
    replaced by the LP's (the other values, status and gap are the MILP's), or unchanged but for the seconds
    when the LP has none. Shared by ``balance_routes`` and
    ``trimtab.planning.redundancy.balance_survivors``."""
    m.constraints = rows
    m.objective = tuple((u, 1.0) for u in sorted(util.values()))
    m.sense = "min"
    bal = backend.solve(m, options.after(res.seconds))
    if bal.termination == Termination.TIME_LIMIT:  # the safety net: no answer, nor the MILP's routes
        return replace(bal, seconds=res.seconds + bal.seconds)
    if not bal.has_solution:
        return replace(res, seconds=res.seconds + bal.seconds)
    values = dict(res.values)
    values.update({k: v for k, v in bal.values.items() if m.variables[k].family == "route"})
    return replace(res, values=values, seconds=res.seconds + bal.seconds)


def solve_ir(ir: ProblemIR, cands: CandidateSet, backend: Backend, options: SolveOptions,
             derate: dict[str, float] | None = None, memo: dict | None = None) -> SolveResult:
    """Solve for the spec's objective: one solve for ``min_cost``, two for ``max_goodput`` (max served
    rate, then min cost keeping it). The result's ``seconds`` covers both; the time limit is shared."""
    if ir.objective != "max_goodput":
        t0 = time.perf_counter()
        split = solve_split(ir, cands, backend, options, derate, memo)
        if split is not None:
            res = split
        else:  # the split's time (a price search that could not certify) counts against the safety net too
            tried = time.perf_counter() - t0
            res = backend.solve(formulate(ir, cands, derate), options.after(tried))
            res = replace(res, seconds=res.seconds + tried)
        return balance_routes(ir, cands, backend, options, res, derate)
    return two_stage(lambda floor: formulate(ir, cands, derate, objective="max_goodput", goodput_floor=floor),
                     backend, options)


def two_stage(model, backend: Backend, options: SolveOptions) -> SolveResult:
    """``max_goodput`` in two solves: ``model(None)`` maximises the served rate, ``model(floor)`` minimises
    cost serving at least (1 - GOODPUT_TOL) of it. The result's ``seconds`` covers both; the time
    limit is shared."""
    first = backend.solve(model(None), options)
    if not first.has_solution:
        return first
    floor = (first.objective or 0.0) * (1 - GOODPUT_TOL)
    second = backend.solve(model(floor), options.after(first.seconds))
    if second.termination == Termination.TIME_LIMIT:  # the safety net: no answer (trimtab.solvers.base)
        return replace(second, seconds=first.seconds + second.seconds)
    if not second.has_solution:  # keep stage 1's plan: it serves the most, maybe not at the lowest cost
        # (its bound is on the rate served, not the cost: none is stated)
        return replace(first, seconds=first.seconds + second.seconds, bound=None)
    gaps = [g for g in (first.gap, second.gap) if g is not None]
    return replace(second, seconds=first.seconds + second.seconds,
                   gap=max(gaps) if len(gaps) == 2 else None,
                   status=(Status.OPTIMAL if Status.FEASIBLE not in (first.status, second.status)
                           else Status.FEASIBLE))
