"""PuLP backend for HiGHS (through highspy) and CBC (bundled with PuLP).

PuLP's ``prob.status`` can say "Optimal" after a time limit (coin-or/pulp #383, #711); we read
``sol_status`` too and report ``feasible`` with the gap unless optimality is proven.
"""
from __future__ import annotations

import contextlib
import os
import sys
import time

from trimtab.solvers.base import Backend, SolveOptions, SolveResult, Status, Termination
from trimtab.solvers.model import MilpModel


class PulpBackend(Backend):
    def __init__(self, name: str = "highs"):
        if name not in ("highs", "cbc"):
            raise ValueError(name)
        self.name = name
        self.required_modules = ("pulp", "highspy") if name == "highs" else ("pulp",)

    def _solver(self, options: SolveOptions):
        import pulp

        if self.name == "highs":
            return pulp.HiGHS(msg=options.verbose, timeLimit=options.time_limit_s, gapRel=options.mip_rel_gap,
                              threads=options.threads)
        return pulp.PULP_CBC_CMD(msg=options.verbose, timeLimit=options.time_limit_s, gapRel=options.mip_rel_gap,
                                 threads=options.threads)

    def solve(self, model: MilpModel, options: SolveOptions) -> SolveResult:
        import pulp

        prob = pulp.LpProblem(model.name.replace(" ", "_") or "trimtab",
                              pulp.LpMinimize if model.sense == "min" else pulp.LpMaximize)
        pv = {}
        for i, v in enumerate(model.variables.values()):
            pv[v.name] = pulp.LpVariable(f"x{i}", lowBound=v.lb, upBound=v.ub,
                                         cat=pulp.LpInteger if v.kind == "integer" else pulp.LpContinuous)
        prob += _affine(pulp, pv, model.objective)
        for i, c in enumerate(model.constraints):
            lhs = _affine(pulp, pv, c.expr)
            prob += (lhs <= c.rhs if c.sense == "<=" else lhs >= c.rhs if c.sense == ">=" else lhs == c.rhs), f"c{i}"
        t0 = time.perf_counter()
        try:
            with _quiet(not options.verbose):
                prob.solve(self._solver(options))
        except pulp.PulpSolverError as exc:
            return SolveResult(Status.ERROR, Termination.SOLVER_ERROR, seconds=time.perf_counter() - t0,
                               backend=self.name, message=str(exc))
        secs = time.perf_counter() - t0
        status, sol = prob.status, prob.sol_status
        values = {n: (v.value() or 0.0) for n, v in pv.items()}
        obj = pulp.value(prob.objective)
        hit_limit = secs >= options.time_limit_s * 0.98
        if status == pulp.LpStatusInfeasible or sol == pulp.LpSolutionInfeasible:
            return SolveResult(Status.INFEASIBLE, Termination.INFEASIBLE, seconds=secs, backend=self.name)
        if status == pulp.LpStatusUnbounded or sol == pulp.LpSolutionUnbounded:
            return SolveResult(Status.NO_SOLUTION, Termination.UNBOUNDED, seconds=secs, backend=self.name)
        if sol == pulp.LpSolutionOptimal and not hit_limit:
            return SolveResult(Status.OPTIMAL, Termination.CONVERGED, values, obj, 0.0, secs, self.name)
        if sol in (pulp.LpSolutionIntegerFeasible, pulp.LpSolutionOptimal) and obj is not None:
            gap = self._gap(prob, obj)
            return SolveResult(Status.FEASIBLE, Termination.TIME_LIMIT if hit_limit else Termination.CONVERGED,
                               values, obj, gap, secs, self.name)
        return SolveResult(Status.NO_SOLUTION, Termination.TIME_LIMIT if hit_limit else Termination.SOLVER_ERROR,
                           seconds=secs, backend=self.name, message=f"pulp status {pulp.LpStatus[status]}")

    def _gap(self, prob, obj: float) -> float | None:
        """Relative gap from HiGHS' dual bound when available; unknown (None) otherwise."""
        solver_model = getattr(prob, "solverModel", None)
        if solver_model is not None:
            try:
                info = solver_model.getInfo()
                return float(info.mip_gap)
            except Exception:  # noqa: BLE001 - gap is optional information
                return None
        return None


@contextlib.contextmanager
def _quiet(enabled: bool):
    """Silence native solver banners (highspy prints one on stdout even with output off)."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _affine(pulp, pv: dict, expr) -> object:
    """``sum coef x var`` as one PuLP expression, built from a dict (what ``lpSum`` of products gives, repeated
    variables summed, in the same order) without PuLP's per-term temporaries: a tenth of the build time on big
    models."""
    terms: dict = {}
    for n, coef in expr:
        v = pv[n]
        terms[v] = terms.get(v, 0.0) + coef
    return pulp.LpAffineExpression(terms)
