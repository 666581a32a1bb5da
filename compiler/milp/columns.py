"""Several inventory rows priced at once: the workload MILPs of ``trimtab.milp.decompose`` joined by column
generation over the rows their union breaks.

Entry point: ``price_rows(plans, count, unit, floor, start, solve, backend, options, rel_gap)``
-> ``Priced | NoFit | None``.

Why: on specs where one GPU type is much the cheapest for most workloads, the parts' union buys more of it
than the spec has; pricing it out alone moves its parts onto the next cheapest type, whose row then breaks
in turn, and one price searched after another undoes the other's work. The whole MILP is the one the
solver does not finish (its LP bound is far below the parts' integer optima). Column generation prices
every row together and keeps every plan it meets:

    plans P_w: every plan of workload w solved so far, at any prices; c_p its cost at the spec's prices,
               g_p[t] its GPUs of type t
    master (the dual of the restricted master LP, so that its variables are the prices):
        max  sum_w u_w - sum_t count_t lam_t
        s.t. u_w <= c_p + sum_t g_p[t] lam_t          for every plan p of w
             lam_t in [0, LAM_MAX] and within STEP of the best prices so far (a trust region: plain
             cutting planes jump between the corners of the price box)
    Its value without the trust region, V, bounds from above what any prices give over the known plans;
    each part solved at the master's prices lam gives z_w(lam), and L(lam) = sum_w z_w(lam) - lam . count
    bounds the whole MILP's optimum from below (the inventory rows relaxed with multipliers lam). The plans
    found join P_w and the master is solved again, until the selection below or V is within rel_gap of
    max L, or ``STEPS``.
    selection (MILP):  min sum_p c_p y_p  s.t.  sum_{p of w} y_p = 1,  sum_p g_p[t] y_p <= count_t,
                       y_p binary
    the cheapest union of known plans that fits every row; its gap to the best L is certified.
    no fit (where no mix of the known plans fits the rows either): the least overflow's row prices y (the
    elastic LP relaxation of the selection) are a direction in which L may grow without bound; every part is
    solved at lam = M y for a large M, and where L(lam) exceeds the ceiling (the whole inventory at each
    type's dearest rate per GPU: no plan that fits costs more) no plan fits (weak duality): ``NoFit``.
    repair (where no selection fits once the prices are the best the plans allow: the plans that fit are
    not the parts' optimum at any prices tried): the selection's LP relaxation with a slack on each row
    (the least overflow) keeps the workloads it gives one plan whole that buys no type whose row overflows;
    the others are solved together, their own candidates in one MILP in which the kept workloads choose
    again among their known plans (``joint``); its gap to the best L is certified too.

Each part is solved at its own types' prices only, so a part none of whose types moved is not solved again
(the memo of ``trimtab.milp.parts.Parts``), nor one whose optimum at earlier prices buys no type whose price
moved while none of its types got cheaper (``Parts._still_optimal``: that optimum is one still).
"""
from __future__ import annotations

from dataclasses import dataclass

from trimtab.milp.parts import Plan, choose, same_plan
from trimtab.solvers.base import Backend, SolveOptions, SolveResult
from trimtab.solvers.model import Constraint, MilpModel

STEPS = 30  # master solves at most
LAM_MAX = 16.0  # the price box, in multiples of the dearest GPU type's price per GPU-hour
# the trust region's half-width, in the same multiples; halved after a step that gains nothing, doubled after
# one that gains at its edge
STEP = 0.1
STEP_NEAR = 0.02  # from the last round's prices: a few workloads' derates moved them
JOINT_MAX = 30  # workloads a repair solves together at most (more: the whole MILP decides)
RAY_SHARE = 0.01  # the no-fit proof's rows: those whose overflow price is at least this share of the largest


@dataclass(frozen=True)
class NoFit:
    """No plan fits every row: at ``prices`` the Lagrangian bound ``bound`` exceeds ``ceiling``, what any plan
    that fits costs at most."""

    bound: float
    ceiling: float
    prices: dict[str, float]


@dataclass(frozen=True)
class Priced:
    chosen: dict[str, SolveResult]  # workload -> its selected plan (objective at the spec's prices)
    gap: float  # certified: (selection - best L) / selection
    bound: float  # best L: no plan of the whole MILP costs less
    prices: dict[str, float]  # the prices of the best L, per type ($ per GPU-hour more)
    steps: int
    together: int = 0  # workloads the repair solved together (0: a selection of known plans fits)


def price_rows(plans: dict[str, list[Plan]], count: dict[str, int], unit: float, floor: float,
               start: dict[str, float], solve, backend: Backend, options: SolveOptions,
               rel_gap: float, near: bool = False, joint=None,
               ceiling: float | None = None) -> Priced | NoFit | None:
    """``plans``: per workload, the plans known so far (at least one each; extended in place). ``floor``: L
    at the spec's prices (the sum of the parts' lower bounds). ``start``: the prices tried first (the whole
    LP relaxation's duals, which are usually close: the parts' integrality moves them little). ``near``:
    ``start`` is where the last round's search ended, so the trust region starts small (``STEP_NEAR``).
    ``count``: GPUs of each type. ``unit``: the dearest type's price per GPU-hour (scales the box).
    ``solve(prices) -> {workload: (Plan, lower bound of its optimum at those prices)} | None`` solves every
    part at the given prices. ``joint(names, others) -> {workload: SolveResult} | None``: the workloads
    ``names`` solved together, each of ``others`` ({workload: its plans}) choosing one of its plans, within
    the spec's rows (the repair). ``ceiling``: no plan that fits the rows costs more (the no-fit proof).
    ``NoFit``: no plan fits every row (proven). None: a part has no answer, or neither a selection of known
    plans nor a repair fits every row."""
    types = sorted(count)
    lam_max, step = LAM_MAX * unit, (STEP_NEAR if near else STEP) * unit
    best_lb, best = floor, {t: 0.0 for t in types}
    lam: dict[str, float] | None = {t: min(max(start.get(t, 0.0), 0.0), lam_max) for t in types}
    k = 0
    while k < STEPS:
        k += 1
        if k > 1 or not any(lam.values()):
            lam, _ = _master(plans, count, types, best, step, lam_max, backend, options)
            if lam is None:
                return None
        lb = _bound_at(plans, count, types, solve, lam)
        if lb is None:
            return None
        if lb > best_lb + 1e-9 * max(abs(best_lb), 1.0):
            if k > 1 and any(abs(lam[t] - best[t]) >= step * (1 - 1e-9) for t in types):
                step = min(2 * step, lam_max)  # a gain at the region's edge: the best prices may lie further
            best_lb, best = lb, lam
        elif k > 1:
            step /= 2  # a null step: the master's model of L is wrong this far out
        _, top = _master(plans, count, types, best, None, lam_max, backend, options)
        chosen = _select(plans, count, types, backend, options)
        if chosen is not None:
            cost = sum(r.objective for r in chosen.values())
            if cost - best_lb <= rel_gap * max(abs(cost), 1e-12):
                break  # certified optimal to the MIP gap
        if top is not None and top - best_lb <= rel_gap * max(abs(top), 1e-12):
            break  # the prices are the best the plans allow: more steps find no better bound
    together = 0
    if chosen is None and ceiling is not None:
        proof = _no_fit(plans, count, types, solve, ceiling, backend, options)
        if proof is not None:
            return proof
    if chosen is None and joint is not None:
        chosen, together = _repair(plans, count, types, backend, options, joint)
        cost = None if chosen is None else sum(r.objective for r in chosen.values())
    if chosen is None:
        return None
    return Priced(chosen, max(cost - best_lb, 0.0) / max(abs(cost), 1e-12), best_lb, best, k, together)


def _no_fit(plans: dict[str, list[Plan]], count: dict[str, int], types: list[str], solve, ceiling: float,
            backend: Backend, options: SolveOptions) -> NoFit | None:
    """``NoFit`` where no mix of the known plans fits the rows and the parts at far prices along the least
    overflow's row prices give a Lagrangian bound above ``ceiling``; None otherwise (the parts' plans there
    join ``plans``)."""
    over, r, _ = _overflow(plans, count, types, backend, options)
    if not over or r is None:
        return None
    ray = {t: max(-r.duals.get(f"inventory[{t}]", 0.0), 0.0) for t in types}
    top = max(ray.values(), default=0.0)
    if top <= 0:
        return None
    # the rows that make the overflow (a price of at least RAY_SHARE of the largest; the rest are the cost's
    # tie-break), far enough along that one GPU more than a row holds, at the least of these prices,
    # outweighs every cost; the others unpriced (the prices stay within 4 / RAY_SHARE of the ceiling)
    ray = {t: y if y >= RAY_SHARE * top else 0.0 for t, y in ray.items()}
    least = min(y for y in ray.values() if y > 0)
    far = {t: 4 * ceiling * ray[t] / least for t in types}
    bound = _bound_at(plans, count, types, solve, far)
    return NoFit(bound, ceiling, far) if bound is not None and bound > ceiling else None


def _bound_at(plans: dict[str, list[Plan]], count: dict[str, int], types: list[str], solve,
              lam: dict[str, float]) -> float | None:
    """L(lam): every part solved at ``lam``, its plan added to ``plans`` where new; None where a part has no
    answer."""
    got = solve(lam)
    if got is None:
        return None
    bound = -sum(count[t] * lam[t] for t in types)
    for w in plans:
        plan, low = got[w]
        if all(not same_plan(plan, p) for p in plans[w]):
            plans[w].append(plan)
        bound += low
    return bound


def _repair(plans: dict[str, list[Plan]], count: dict[str, int], types: list[str], backend: Backend,
            options: SolveOptions, joint) -> tuple[dict[str, SolveResult] | None, int]:
    """The workloads the selection's LP relaxation (each row's overflow least, then the cost) does not give
    one plan whole that buys no type whose row overflows, solved together while the others choose again among
    their known plans (``joint``), and how many those are; None where too many workloads are left or
    nothing fits."""
    over, r, ys = _overflow(plans, count, types, backend, options)
    if r is None:
        return None, 0
    kept: dict[str, Plan] = {}
    for w, ps in plans.items():
        whole = [p for p, y in zip(ps, ys[w]) if r.values.get(y, 0.0) >= 1 - 1e-6]
        if whole and not over & {t for t, n in whole[0].gpus.items() if n}:
            kept[w] = whole[0]
    free = [w for w in plans if w not in kept]
    if not free:  # (an integral relaxation is a selection that fits)
        return {w: p.result for w, p in kept.items()}, 0
    if len(free) > JOINT_MAX:
        return None, 0
    got = joint(free, {w: plans[w] for w in plans if w in kept})
    return (None, 0) if got is None else ({w: got[w] for w in plans}, len(free))


def _master(plans: dict[str, list[Plan]], count: dict[str, int], types: list[str], centre: dict[str, float],
            step: float | None, lam_max: float, backend: Backend, options: SolveOptions):
    """The master's prices and value, within ``step`` of ``centre`` (None: the whole box)."""
    m = MilpModel("price rows", sense="max")
    for t in types:
        lo, hi = (0.0, lam_max)
        if step is not None:
            lo, hi = max(centre[t] - step, 0.0), min(centre[t] + step, lam_max)
        m.add_var(f"lam[{t}]", "continuous", lo, hi, family="price")
    objective = [(f"lam[{t}]", -float(count[t])) for t in types]
    for w, ps in plans.items():
        top = max(p.result.objective + lam_max * sum(p.gpus.values()) for p in ps)
        u = m.add_var(f"u[{w}]", "continuous", 0.0, top, family="bound")
        objective.append((u, 1.0))
        for i, p in enumerate(ps):
            expr = ((u, 1.0),) + tuple((f"lam[{t}]", -float(n)) for t, n in sorted(p.gpus.items()) if n)
            m.add(Constraint(f"plan[{w}/{i}]", "plan", expr, "<=", p.result.objective))
    m.objective = tuple(objective)
    r = backend.solve(m, options)
    if not r.has_solution or r.objective is None:
        return None, None
    return {t: r.values.get(f"lam[{t}]", 0.0) for t in types}, r.objective


def _select(plans: dict[str, list[Plan]], count: dict[str, int], types: list[str], backend: Backend,
            options: SolveOptions) -> dict[str, SolveResult] | None:
    """The cheapest choice of one known plan per workload within every type's count."""
    m, ys = _selection(plans, count, types)
    r = backend.solve(m, options)
    if not r.has_solution:
        return None
    return {w: next(p.result for p, y in zip(ps, ys[w]) if round(r.values.get(y, 0.0)) == 1)
            for w, ps in plans.items()}


def _overflow(plans: dict[str, list[Plan]], count: dict[str, int], types: list[str], backend: Backend,
              options: SolveOptions) -> tuple[set[str], SolveResult | None, dict[str, list[str]]]:
    """(the types whose rows overflow in the selection's LP relaxation with a slack on each row, the least
    overflow and then the least cost; that solve, None where it has no solution; the plan variables)."""
    m, ys = _selection(plans, count, types)
    r = backend.solve(m.relaxed().elastic(lambda row: f"over[{row}]", integer_families=()), options)
    if not r.has_solution:
        return set(), None, ys
    return {t for t in types if r.values.get(f"over[inventory[{t}]]", 0.0) > 1e-6}, r, ys


def _selection(plans: dict[str, list[Plan]], count: dict[str, int],
               types: list[str]) -> tuple[MilpModel, dict[str, list[str]]]:
    """The selection MILP, and each workload's plan variables in the order of its plans."""
    m = MilpModel("select plans")
    ys, objective, use = choose(m, plans)
    for t in types:
        if use.get(t):
            m.add(Constraint(f"inventory[{t}]", "inventory", tuple(use[t]), "<=", float(count[t]),
                             relaxable=True))
    m.objective = tuple(objective)
    return m, ys
