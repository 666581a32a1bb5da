"""The routing-balance LP after the MILP: same replicas and cost, no workload's busiest deployment busier."""
import pytest

from trimtab.milp.candidates import build_candidates
from trimtab.milp.formulate import formulate, n_var, x_var
from trimtab.ir.lower import lower
from trimtab.milp.solve import balance_routes
from trimtab.spec.load import load_spec
from trimtab.solvers import get_backend
from trimtab.solvers.base import SolveOptions
from tests.conftest import QUICKSTART


def _max_util(ir, cands, values):
    out = {}
    for c in cands.candidates:
        n = round(values.get(n_var(c.id), 0.0))
        if n:
            w = ir.workload(c.workload)
            u = sum(values.get(x_var(w.name, b, c.id), 0.0) / cap for b, cap in c.capacity_rps) / n
            out[w.name] = max(out.get(w.name, 0.0), u)
    return out


def test_balance_keeps_replicas_and_lowers_peak_utilisation():
    ir = lower(load_spec(QUICKSTART))
    cands = build_candidates(ir)
    be = get_backend("highs")
    opts = SolveOptions(time_limit_s=30)
    raw = be.solve(formulate(ir, cands), opts)
    bal = balance_routes(ir, cands, be, opts, raw)
    m = formulate(ir, cands)
    # the cost of the balanced routes' solution, recomputed from its values (not the objective it carries)
    assert m.evaluate(m.objective, bal.values) == pytest.approx(raw.objective, rel=1e-9)
    ints = [v for v in raw.values if v.startswith("replicas[")]
    assert all(round(bal.values[v]) == round(raw.values[v]) for v in ints)
    # every bucket's demand is still routed in full, and within the fixed replicas' capacity
    assert m.violations(bal.values, tol=1e-6) == []
    before, after = _max_util(ir, cands, raw.values), _max_util(ir, cands, bal.values)
    assert set(before) == set(after)
    assert all(after[w] <= before[w] + 1e-7 for w in before)
    # the LP's optimum: with several deployments, the peak is the load over the whole capacity bought when
    # every bucket can go anywhere; at least one workload of the example gets strictly less busy
    assert any(after[w] < before[w] - 1e-3 for w in before), (before, after)
