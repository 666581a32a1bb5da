"""OR-Tools CP-SAT backend: the solver-neutral ``MilpModel`` scaled to integers.

CP-SAT solves pure integer programs, so the translation is explicit and conservative:

* **Continuous variables** (route rates, rps; budget slack) become integers in units of ``1 / S_v``,
  ``x = X / S_v``, with ``S_v`` the largest power of two for which the variable's upper bound times ``S_v``
  stays within ``2**18`` (about 2.6e5 steps: a resolution of 4e-6 of the bucket's rate). Routes of one
  demand row share their bound (the bucket's rate), hence their scale, so the row stays exact.
  CP-SAT needs finite domains: bounds missing in the model are inferred from constraints of the form
  ``sum a_i v_i <= b`` with ``a_i > 0`` and ``v_i >= 0`` (a route can never exceed its bucket's rate);
  a model with a variable still unbounded is refused (``Status.ERROR``; the formulation gives every
  variable a bound).
* **Constraints** ``sum a_i v_i <= b`` are multiplied by a power of two ``M`` so that the smallest
  coefficient is at least ``1e4`` (relative rounding error <= 1e-4, well inside the cost model's 0.5 %
  capacity tolerance), then rounded *toward feasibility*: coefficients of non-negative variables down,
  the right-hand side up. Every point feasible in the float model stays feasible (so CP-SAT finds the
  same optimum as HiGHS and CBC, whose capacity rows are typically tight), and a CP-SAT solution may
  exceed a row by at most 1e-4 of its terms: a replica loaded 0.01 % above its capacity at SLO, far
  inside the cost model's bisection tolerance; ``trimtab.gate.analytic`` re-derives the SLOs regardless.
  (Rounding the other way is exact-safe but turned tight optima infeasible and cost a whole replica.)
  ``>=`` rows are negated first. ``==`` rows must scale exactly (demand rows do: coefficient
  1 over routes, rhs ``floor(rate x S_v)``, at most ``1 / S_v`` rps below the rate; rounded down, not to
  nearest, so that a row bounding one route by the same rate, ``x <= rate y`` in the adapter MILP, admits the
  whole demand: rounding up made HiGHS's optimum infeasible there and CP-SAT stopped at 2.40 instead of 1.60
  $/h).
* **Objective** coefficients are scaled by a power of two so the smallest is at least ``1e6`` (capped so the
  objective's activity fits ``2**60``; a tie-break term may then round away) and rounded
  to nearest; the objective reported is recomputed from the original float coefficients, the gap from
  CP-SAT's bound in scaled units (``(obj - bound) / max(|obj|, 1)``).

Why so coarse: CP-SAT's search slows sharply with wide domains and large coefficients (domains of 2**30
found no feasible point of the quickstart in 20 s; 2**18 solves it in 0.3 s; row coefficients of 1e5
take ten times as long as 1e4). ``linearization_level
= 2`` puts the full LP relaxation in the search, which this routing structure needs.

Determinism: one search worker, a fixed random seed and a deterministic time limit
(``max_deterministic_time``), so the same model gives the same solution on any machine; the wall-clock limit
is a safety net whose expiry gives no solution (``trimtab.solvers.base``).
"""
from __future__ import annotations

import math
import time

from trimtab.solvers.base import (Backend, SolveOptions, SolveResult, Status, Termination, bound_within,
                                  safety_net)
from trimtab.solvers.model import MilpModel

SEED = 20240601
DOMAIN_MAX = 2**18  # largest scaled continuous value
COEF_MIN = 1e4  # smallest scaled row coefficient (relative rounding error 1e-4)
OBJ_COEF_MIN = 1e6
INT64_SAFE = 2**62


class CpSatBackend(Backend):
    name = "cpsat"
    required_modules = ("ortools",)
    supports = frozenset({"integer", "continuous(scaled)", "linear", "time_limit", "gap"})

    def __init__(self, name: str = "cpsat"):
        if name != "cpsat":
            raise ValueError(name)

    def solve(self, model: MilpModel, options: SolveOptions) -> SolveResult:
        from ortools.sat.python import cp_model

        t0 = time.perf_counter()
        try:
            scaled = _Scaled(model)
        except ValueError as exc:
            return SolveResult(Status.ERROR, Termination.SOLVER_ERROR, seconds=time.perf_counter() - t0,
                               backend=self.name, message=str(exc))
        cp = cp_model.CpModel()
        iv = {}
        for name, (lo, hi) in scaled.domains.items():
            iv[name] = cp.new_int_var(lo, hi, name)
        for coefs, lo, hi in scaled.rows:
            if not coefs:  # 0 <= hi, 0 >= lo or 0 == lo: decided now
                if (hi is not None and hi < 0) or (lo is not None and lo > 0):
                    return SolveResult(Status.INFEASIBLE, Termination.INFEASIBLE,
                                       seconds=time.perf_counter() - t0, backend=self.name)
                continue
            expr = sum(c * iv[n] for n, c in coefs)
            if lo == hi:
                cp.add(expr == lo)
            elif lo is None:
                cp.add(expr <= hi)
            else:
                cp.add(expr >= lo)
        obj = sum(c * iv[n] for n, c in scaled.objective) if scaled.objective else 0
        if model.sense == "min":
            cp.minimize(obj)
        else:
            cp.maximize(obj)
        solver = cp_model.CpSolver()
        p = solver.parameters
        p.num_workers = 1
        p.linearization_level = 2
        p.random_seed = SEED
        p.max_deterministic_time = options.deterministic_time  # the limit that may decide the answer
        p.max_time_in_seconds = max(options.time_limit_s, 0.01)  # the safety net: never an answer
        p.relative_gap_limit = options.mip_rel_gap
        p.log_search_progress = options.verbose
        st = solver.solve(cp)
        secs = time.perf_counter() - t0
        net = solver.deterministic_time < p.max_deterministic_time  # short of its work limit: the safety net
        if st not in (cp_model.OPTIMAL, cp_model.INFEASIBLE) and net:
            return safety_net(self.name, options, secs)
        if st == cp_model.INFEASIBLE:
            return SolveResult(Status.INFEASIBLE, Termination.INFEASIBLE, seconds=secs, backend=self.name)
        if st == cp_model.MODEL_INVALID:
            return SolveResult(Status.ERROR, Termination.SOLVER_ERROR, seconds=secs, backend=self.name,
                               message=cp.validate() or "model invalid")
        if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):  # UNKNOWN: the deterministic limit, no solution
            return SolveResult(Status.NO_SOLUTION, Termination.WORK_LIMIT if st == cp_model.UNKNOWN
                               else Termination.SOLVER_ERROR, seconds=secs, backend=self.name,
                               message=f"cp-sat status {solver.status_name(st)} (max_deterministic_time "
                                       f"{options.deterministic_time:g})")
        values = {}
        for name, var in iv.items():
            x = solver.value(var)
            values[name] = float(x) if name in scaled.integer else x / scaled.S[name]
        objective = model.evaluate(model.objective, values)
        if st == cp_model.OPTIMAL:
            # OPTIMAL within relative_gap_limit: report the remaining (scaled) gap honestly.
            gap = _gap(solver.objective_value, solver.best_objective_bound)
            return SolveResult(Status.OPTIMAL if gap <= options.mip_rel_gap + 1e-12 else Status.FEASIBLE,
                               Termination.CONVERGED, values, objective, gap, secs, self.name,
                               bound=bound_within(objective, gap, model.sense))
        gap = _gap(solver.objective_value, solver.best_objective_bound)
        return SolveResult(Status.FEASIBLE, Termination.WORK_LIMIT, values, objective, gap, secs, self.name,
                           bound=bound_within(objective, gap, model.sense))


def _gap(obj: float, bound: float) -> float:
    return abs(obj - bound) / max(abs(obj), 1.0)


def _pow2_at_least(x: float) -> int:
    return 2 ** max(0, math.ceil(math.log2(x))) if x > 1 else 1


class _Scaled:
    """Integer data of a ``MilpModel``: domains, rows (coefs, lo, hi) and objective."""

    def __init__(self, model: MilpModel):
        ub = {n: v.ub for n, v in model.variables.items()}
        lb = {n: v.lb for n, v in model.variables.items()}
        # Infer missing upper bounds from rows sum a_i v_i <= b (or ==) with a_i > 0 and every v_i >= 0.
        for c in model.constraints:
            if c.sense == ">=" or not c.expr or any(a <= 0 or lb[n] < 0 for n, a in c.expr):
                continue
            for n, a in c.expr:
                bound = c.rhs / a
                if ub[n] is None or bound < ub[n]:
                    ub[n] = bound
        missing = sorted(n for n, u in ub.items() if u is None)
        if missing:
            raise ValueError(f"cpsat needs bounded variables; unbounded: {', '.join(missing[:5])}")
        self.integer = {n for n, v in model.variables.items() if v.kind == "integer"}
        self.S: dict[str, int] = {}
        self.domains: dict[str, tuple[int, int]] = {}
        for n in model.variables:
            if n in self.integer:
                self.domains[n] = (math.ceil(lb[n] - 1e-9), math.floor(ub[n] + 1e-9))
            else:
                top = max(abs(ub[n]), abs(lb[n]), 1e-12)
                self.S[n] = s = 2 ** max(-30, min(40, math.floor(math.log2(DOMAIN_MAX / top))))
                self.domains[n] = (math.floor(lb[n] * s + 1e-9), math.ceil(ub[n] * s - 1e-9))
        self.rows: list[tuple[list[tuple[str, int]], int | None, int | None]] = []
        for c in model.constraints:
            self.rows.append(self._row(c))
        coefs = [(n, a if n in self.integer else a / self.S[n]) for n, a in model.objective if a != 0]
        if coefs:
            m = _pow2_at_least(OBJ_COEF_MIN / min(abs(a) for _, a in coefs))
            # Cap the scale so the objective's activity fits 2**60: tiny tie-break terms may then round away.
            while m > 1 and self._activity(coefs, m) > 2**60:
                m //= 2
            self._check_overflow(coefs, m, "objective")
            self.objective = [(n, round(a * m)) for n, a in coefs if round(a * m) != 0]
        else:
            self.objective = []

    def _activity(self, coefs, m: float) -> float:
        return sum(abs(a) * m * max(abs(self.domains[n][0]), abs(self.domains[n][1])) for n, a in coefs)

    def _check_overflow(self, coefs, m: float, what: str) -> None:
        act = self._activity(coefs, m)
        if act > INT64_SAFE:
            raise ValueError(f"cpsat: {what} overflows 64-bit integers after scaling (activity {act:.3g})")

    def _row(self, c):
        coefs = [(n, a if n in self.integer else a / self.S[n]) for n, a in c.expr if a != 0]
        rhs = c.rhs
        if c.sense == "==":
            # Exact scaling only: find a power of two making every coefficient an integer.
            for k in range(-40, 41):
                m = 2.0**k
                if all(round(a * m) != 0 and abs(a * m - round(a * m)) <= 1e-9 * abs(a * m)
                       for _, a in coefs):
                    self._check_overflow(coefs, m, c.name)
                    # A row of positive terms (a demand: routes summing to a rate) rounds its rate down, so
                    # every row bounding one term by that rate (x <= rate y: lora_hold) still admits the whole
                    # of it.
                    r = (math.floor(rhs * m + 1e-9) if rhs > 0 and all(a > 0 for _, a in coefs)
                         else round(rhs * m))
                    return [(n, round(a * m)) for n, a in coefs], r, r
            raise ValueError(f"cpsat: equality {c.name} has coefficients that do not scale to integers")
        sign = 1.0 if c.sense == "<=" else -1.0
        coefs = [(n, sign * a) for n, a in coefs]
        rhs *= sign
        if not coefs:
            m = 1
        else:
            m = _pow2_at_least(COEF_MIN / min(abs(a) for _, a in coefs))
        self._check_overflow(coefs, m, c.name)
        # Optimistic rounding (toward feasibility): a point feasible in the float model stays feasible here.
        out = []
        for n, a in coefs:
            lo, _hi = self.domains[n]
            out.append((n, math.floor(a * m + 1e-9) if lo >= 0 else math.ceil(a * m - 1e-9)))
        hi = math.ceil(rhs * m - 1e-9 * max(1.0, abs(rhs * m)))
        if sign > 0:
            return out, None, hi
        return [(n, -a) for n, a in out], -hi, None
