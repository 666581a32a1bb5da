"""The HiGHS backend builds its model in highspy directly (``solvers/pulp_backend.py``, ``_highs_model``);
the model must be the one PuLP's HiGHS interface builds, column for column and row for row, so that HiGHS
takes the same path to the same answer. The oracle is PuLP itself, building the same ``MilpModel``."""
from __future__ import annotations

import pulp
import pytest

from trimtab.ir.lower import lower
from trimtab.milp.candidates import build_candidates
from trimtab.milp.formulate import formulate
from trimtab.solvers import SolveOptions
from trimtab.solvers.pulp_backend import _affine, _highs_model, _quiet
from trimtab.spec.load import load_spec


def _pulp_lp(model, options: SolveOptions):
    """The HiGHS model PuLP builds from ``model`` (variables named x{i} in the model's order)."""
    prob = pulp.LpProblem("t", pulp.LpMinimize if model.sense == "min" else pulp.LpMaximize)
    pv = {v.name: pulp.LpVariable(f"x{i}", lowBound=v.lb, upBound=v.ub,
                                  cat=pulp.LpInteger if v.kind == "integer" else pulp.LpContinuous)
          for i, v in enumerate(model.variables.values())}
    prob += _affine(pulp, pv, model.objective)
    for i, c in enumerate(model.constraints):
        lhs = _affine(pulp, pv, c.expr)
        prob += (lhs <= c.rhs if c.sense == "<=" else lhs >= c.rhs if c.sense == ">=" else lhs == c.rhs,
                 f"c{i}")
    solver = pulp.HiGHS(msg=False, timeLimit=options.time_limit_s, gapRel=options.mip_rel_gap,
                        threads=options.threads, mip_max_nodes=options.node_limit)
    with _quiet(True):
        solver.createAndConfigureSolver(prob)
        solver.buildSolverModel(prob)
    return prob.solverModel


def _arrays(h):
    lp = h.getLp()
    m = lp.a_matrix_
    return (lp.num_col_, lp.num_row_, list(lp.col_cost_), list(lp.col_lower_), list(lp.col_upper_),
            list(lp.row_lower_), list(lp.row_upper_), list(lp.integrality_), m.format_, list(m.start_),
            list(m.index_), list(m.value_))


@pytest.mark.parametrize("example", ["quickstart", "disaggregated", "moe"])
def test_the_direct_build_is_pulps_model(example):
    ir = lower(load_spec(f"examples/{example}.yaml"))
    whole = formulate(ir, build_candidates(ir))
    options = SolveOptions(node_limit=123, mip_rel_gap=2e-4)
    for model in (whole, whole.relaxed(), whole.elastic(lambda n: f"slack[{n}]")):
        with _quiet(True):
            mine, _ = _highs_model(model, options)
        theirs = _pulp_lp(model, options)
        assert _arrays(mine) == _arrays(theirs)
        for opt in ("mip_rel_gap", "threads", "time_limit", "mip_max_nodes", "output_flag"):
            assert mine.getOptionValue(opt) == theirs.getOptionValue(opt), opt
