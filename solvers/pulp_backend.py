"""Backends for HiGHS (through highspy) and CBC (through PuLP, which bundles it).

HiGHS: the model is built in highspy directly, the one PuLP's HiGHS interface would build
(``_highs_model``), and its status and solution are read from highspy itself (``_highs``). CBC:
PuLP's ``prob.status`` can say "Optimal" after a time limit (coin-or/pulp #383, #711); we read ``sol_status``
too and report ``feasible`` unless optimality is proven. Both stop short of the gap only at a node limit
(deterministic); the wall-clock time limit is a safety net whose expiry gives no answer
(``trimtab.solvers.base``).
"""
from __future__ import annotations

import contextlib
import math
import os
import sys
import time

import numpy as np

from trimtab.solvers.base import (Backend, SolveOptions, SolveResult, Status, Termination, bound_within,
                                  safety_net)
from trimtab.solvers.model import MilpModel


class PulpBackend(Backend):
    def __init__(self, name: str = "highs"):
        if name not in ("highs", "cbc"):
            raise ValueError(name)
        self.name = name
        self.required_modules = ("highspy",) if name == "highs" else ("pulp",)

    def _solver(self, options: SolveOptions):
        import pulp

        return pulp.PULP_CBC_CMD(msg=options.verbose, timeLimit=options.time_limit_s,
                                 gapRel=options.mip_rel_gap, threads=options.threads,
                                 maxNodes=options.node_limit)

    def solve(self, model: MilpModel, options: SolveOptions) -> SolveResult:
        if self.name == "highs":
            return self._highs(model, options, time.perf_counter())
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
            prob += (lhs <= c.rhs if c.sense == "<=" else lhs >= c.rhs if c.sense == ">=" else lhs == c.rhs,
                     f"c{i}")
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
        if secs >= options.time_limit_s * 0.98:  # CBC says no more: the safety net is never an answer
            return safety_net(self.name, options, secs)
        if status == pulp.LpStatusInfeasible or sol == pulp.LpSolutionInfeasible:
            return SolveResult(Status.INFEASIBLE, Termination.INFEASIBLE, seconds=secs, backend=self.name)
        if status == pulp.LpStatusUnbounded or sol == pulp.LpSolutionUnbounded:
            return SolveResult(Status.NO_SOLUTION, Termination.UNBOUNDED, seconds=secs, backend=self.name)
        if sol == pulp.LpSolutionOptimal:  # (CBC says no bound: optimal is within gapRel of it)
            return SolveResult(Status.OPTIMAL, Termination.CONVERGED, values, obj, 0.0, secs, self.name,
                               bound=bound_within(obj, options.mip_rel_gap, model.sense))
        if sol == pulp.LpSolutionIntegerFeasible and obj is not None:  # stopped at the node limit
            return SolveResult(Status.FEASIBLE, Termination.WORK_LIMIT, values, obj, None, secs, self.name)
        return SolveResult(Status.NO_SOLUTION, Termination.SOLVER_ERROR, seconds=secs, backend=self.name,
                           message=f"pulp status {pulp.LpStatus[status]}")

    def _highs(self, model: MilpModel, options: SolveOptions, t0: float) -> SolveResult:
        """Build and run HiGHS (``_highs_model``), and read its own model status and solution: PuLP's reader
        indexes a solution HiGHS never produced when it stops without one (IndexError) and knows no status of
        the node limit (kSolutionLimit)."""
        import highspy

        with _quiet(not options.verbose):
            h, cols = _highs_model(model, options)
            h.run()
        secs = time.perf_counter() - t0
        st, info = h.getModelStatus(), h.getInfo()
        S = highspy.HighsModelStatus
        why = h.modelStatusToString(st)
        if st == S.kTimeLimit:
            return safety_net(self.name, options, secs)
        if st in (S.kInfeasible, S.kUnboundedOrInfeasible):
            return SolveResult(Status.INFEASIBLE, Termination.INFEASIBLE, seconds=secs, backend=self.name)
        if st == S.kUnbounded:
            return SolveResult(Status.NO_SOLUTION, Termination.UNBOUNDED, seconds=secs, backend=self.name)
        work = st in (S.kSolutionLimit, S.kIterationLimit)  # the node limit (or an LP's iteration limit)
        solved = int(info.primal_solution_status) == int(highspy.kSolutionStatusFeasible)  # a point held
        if not ((st == S.kOptimal or work) and solved):
            term = Termination.WORK_LIMIT if work else Termination.SOLVER_ERROR
            limit = f" (mip_max_nodes {options.node_limit})" if work else ""
            return SolveResult(Status.NO_SOLUTION, term, seconds=secs, backend=self.name,
                               message=f"HiGHS stopped without a solution: {why}{limit}")
        col = list(h.getSolution().col_value)
        values = {n: 0.0 for n in model.variables}  # (a variable no row or objective uses is not a column)
        for n, i in cols.items():
            values[n] = col[i]
        obj = model.evaluate(model.objective, values)
        mip = any(v.kind == "integer" for v in model.variables.values())
        bound = float(info.mip_dual_bound) if mip else obj  # (an LP's optimum is its own bound)
        bound = bound if math.isfinite(bound) else None
        if st == S.kOptimal:
            return SolveResult(Status.OPTIMAL, Termination.CONVERGED, values, obj, 0.0, secs, self.name,
                               duals=_duals(model, h) if not mip else {}, bound=bound)
        gap = float(info.mip_gap) if info.mip_gap < float("inf") else None
        return SolveResult(Status.FEASIBLE, Termination.WORK_LIMIT, values, obj, gap, secs, self.name,
                           f"HiGHS stopped at its work limit: {why} (mip_max_nodes {options.node_limit})",
                           bound=bound)



def _duals(model: MilpModel, h) -> dict[str, float]:
    """An LP's row duals by the model's row names (HiGHS's sign: d objective / d right-hand side; a MILP's
    HiGHS does not give). Row i is the model's constraint i."""
    dual = list(h.getSolution().row_dual)
    return {c.name: float(dual[i]) for i, c in enumerate(model.constraints)}


def _highs_model(model: MilpModel, options: SolveOptions):
    """(a HiGHS instance holding ``model`` with ``options`` set, {variable name: column}), in one bulk
    call per kind: PuLP's objects cost a third of a small model's solve, and the price search of
    ``trimtab.milp.columns`` solves thousands. The model is the one PuLP's ``buildSolverModel`` gives HiGHS,
    so that the solver takes the same path to the same answer: the used variables (in the objective or a
    row) as columns in the order of their PuLP names (``x{i}``, sorted as strings), each term's repeated
    variables summed in order of appearance from 0.0, a maximisation's costs negated, zero coefficients left
    out of the rows, every row kept in order."""
    import highspy

    inf = highspy.kHighsInf
    index = {n: i for i, n in enumerate(model.variables)}
    objective = _summed(model.objective)
    rows = [_summed(c.expr) for c in model.constraints]
    used = set(objective)
    for r in rows:
        used.update(r)
    order = sorted(used, key=lambda n: f"x{index[n]}")
    cols = {n: j for j, n in enumerate(order)}
    sign = -1.0 if model.sense == "max" else 1.0
    vs = [model.variables[n] for n in order]
    h = highspy.Highs()
    if not options.verbose:
        h.setOptionValue("output_flag", False)
    # one thread and a node limit: the same model gives the same answer on any machine (trimtab.solvers.base)
    h.setOptionValue("mip_rel_gap", options.mip_rel_gap)
    h.setOptionValue("threads", options.threads)
    h.setOptionValue("time_limit", float(options.time_limit_s))
    h.setOptionValue("mip_max_nodes", options.node_limit)
    if options.small:
        for heuristic in ("rins", "rens", "root_reduced_cost", "feasibility_jump"):
            h.setOptionValue(f"mip_heuristic_run_{heuristic}", False)
        h.setOptionValue("mip_allow_restart", False)
    h.addCols(len(order), np.array([sign * objective.get(n, 0.0) for n in order], dtype=np.float64),
              np.array([-inf if v.lb is None else v.lb for v in vs], dtype=np.float64),
              np.array([inf if v.ub is None else v.ub for v in vs], dtype=np.float64),
              0, np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float64))
    ints = [j for j, v in enumerate(vs) if v.kind == "integer"]
    if ints:
        h.changeColsIntegrality(len(ints), np.array(ints, dtype=np.int32),
                                np.full(len(ints), highspy.HighsVarType.kInteger, dtype=np.uint8))
    lower, upper, starts, idx, val = [], [], [], [], []
    for c, r in zip(model.constraints, rows):
        starts.append(len(idx))
        for n, coef in r.items():
            if coef != 0:
                idx.append(cols[n])
                val.append(coef)
        lower.append(c.rhs if c.sense in (">=", "==") else -inf)
        upper.append(c.rhs if c.sense in ("<=", "==") else inf)
    if model.constraints:
        h.addRows(len(model.constraints), np.array(lower, dtype=np.float64),
                  np.array(upper, dtype=np.float64), len(idx), np.array(starts, dtype=np.int32),
                  np.array(idx, dtype=np.int32), np.array(val, dtype=np.float64))
    return h, cols


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


def _summed(expr) -> dict[str, float]:
    """``sum coef x var`` as {variable name: coefficient}: repeated variables summed from 0.0, in order of
    first appearance (what ``lpSum`` of products gives; both builds read it)."""
    terms: dict[str, float] = {}
    for n, coef in expr:
        terms[n] = terms.get(n, 0.0) + coef
    return terms


def _affine(pulp, pv: dict, expr) -> object:
    """``_summed`` as one PuLP expression, without PuLP's per-term temporaries: a tenth of the build time on
    big models."""
    return pulp.LpAffineExpression({pv[n]: coef for n, coef in _summed(expr).items()})
