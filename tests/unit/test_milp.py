"""The MILP on hand-built candidate sets with known optima, on every installed PuLP backend."""
from __future__ import annotations

import pytest

from trimtab.deployment.shape import Candidate, CandidateSet
from trimtab.milp.formulate import formulate, n_var
from trimtab.ir.lower import lower
from trimtab.spec.load import load_spec
from trimtab.solvers import SolveOptions, Status, get_backend
from tests.conftest import SMALL_SPEC

BACKENDS = [b for b in ("highs", "cbc") if get_backend(b).is_available()]


def ir_with(count_h100: int = 8, count_l4: int = 8, budget: float | None = 100.0, rate: float = 5.0):
    text = SMALL_SPEC.replace("count: 8, usd_per_hour: 4.0", f"count: {count_h100}, usd_per_hour: 4.0") \
        .replace("count: 8, usd_per_hour: 0.8", f"count: {count_l4}, usd_per_hour: 0.8") \
        .replace("rate_rps: 5", f"rate_rps: {rate}")
    if budget is None:
        text = text.replace("budget_usd_per_hour: 100\n", "")
    else:
        text = text.replace("budget_usd_per_hour: 100", f"budget_usd_per_hour: {budget}")
    return lower(load_spec("s.yaml", text=text))


def cand(cid: str, gpu: str, gpus: int, usd: float, cap: float, bucket: str) -> Candidate:
    return Candidate(id=cid, workload="short", model="llama-3.1-8b", gpu=gpu, tp=gpus, pp=1, dtype="bf16",
                     max_num_seqs=256, max_batched_tokens=2048, kv_cache_tokens=10**6, usd_per_hour=usd,
                     capacity_rps=((bucket, cap),))


def solve(ir, cands, backend):
    m = formulate(ir, cands)
    res = get_backend(backend).solve(m, SolveOptions(time_limit_s=30))
    return m, res


@pytest.mark.parametrize("backend", BACKENDS)
def test_cheapest_mix_is_found(backend):
    # rate 5: A alone needs 5 replicas ($5), B alone 1 replica ($3.5). Optimum: 1 x B = 3.5.
    ir = ir_with()
    b = ir.workloads[0].buckets[0].name
    cs = CandidateSet((cand("A", "l4", 1, 1.0, 1.0, b), cand("B", "h100-sxm", 1, 3.5, 6.0, b)), ())
    m, res = solve(ir, cs, backend)
    assert res.status is Status.OPTIMAL
    assert res.objective == pytest.approx(3.5, abs=1e-3)
    assert m.violations(res.values) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_inventory_forces_mixing(backend):
    # Only one h100 (cap 4 rps, $3.5): the remaining 1 rps goes to one l4 replica ($1): optimum 4.5.
    ir = ir_with(count_h100=1)
    b = ir.workloads[0].buckets[0].name
    cs = CandidateSet((cand("A", "l4", 1, 1.0, 1.0, b), cand("B", "h100-sxm", 1, 3.5, 4.0, b)), ())
    m, res = solve(ir, cs, backend)
    assert res.objective == pytest.approx(4.5, abs=1e-3)
    assert round(res.values[n_var("A")]) == 1 and round(res.values[n_var("B")]) == 1
    assert m.violations(res.values) == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_budget_makes_it_infeasible(backend):
    ir = ir_with(budget=3.0)
    b = ir.workloads[0].buckets[0].name
    cs = CandidateSet((cand("A", "l4", 1, 1.0, 1.0, b), cand("B", "h100-sxm", 1, 3.5, 6.0, b)), ())
    _, res = solve(ir, cs, backend)
    assert res.status is Status.INFEASIBLE


def test_tie_break_prefers_fewer_gpus():
    # Same price per replica and capacity: a 2-GPU replica loses to a 1-GPU one.
    ir = ir_with()
    b = ir.workloads[0].buckets[0].name
    cs = CandidateSet((cand("A-two", "h100-sxm", 2, 4.0, 6.0, b), cand("B-one", "h100-sxm", 1, 4.0, 6.0, b)),
                      ())
    _, res = solve(ir, cs, "highs")
    assert round(res.values[n_var("B-one")]) == 1 and round(res.values[n_var("A-two")]) == 0


def test_elastic_model_names_the_relaxation():
    from trimtab.planning.explain import relaxations

    ir = ir_with(count_h100=1, count_l4=0, budget=None)
    b = ir.workloads[0].buckets[0].name
    cs = CandidateSet((cand("B", "h100-sxm", 1, 3.5, 2.0, b),), ())  # needs 3 replicas for 5 rps
    lines = relaxations(ir, cs, get_backend("highs"), SolveOptions())
    assert lines == ["raise gpus[0] (h100-sxm).count from 1 to at least 3"]


def test_a_large_elastic_model_names_its_lp_bound(monkeypatch):
    """Hand-computed: 5 rps on replicas of 2 GPUs carrying 2 rps each. The MILP needs 3 replicas (6 GPUs); its
    LP relaxation 2.5 (5 GPUs), a bound every repair reaches. Past EXACT_MAX_INTEGERS the LP's number is
    named as a bound (the MILP there can run for minutes in the solver's root node), with what suffices: the
    workload's LP plan rounded up, 3 replicas."""
    import trimtab.planning.explain as ex

    ir = ir_with(count_h100=1, count_l4=0, budget=None)
    b = ir.workloads[0].buckets[0].name
    cs = CandidateSet((cand("B", "h100-sxm", 2, 7.0, 2.0, b),), ())
    assert ex.relaxations(ir, cs, get_backend("highs"), SolveOptions()) == \
        ["raise gpus[0] (h100-sxm).count from 1 to at least 6"]
    monkeypatch.setattr(ex, "EXACT_MAX_INTEGERS", 0)
    assert ex.relaxations(ir, cs, get_backend("highs"), SolveOptions()) == \
        ["raise gpus[0] (h100-sxm).count from 1 to at least 5 (the LP relaxation's bound)",
         "these together suffice (the LP relaxation's plan with each replica count rounded up):",
         "  raise gpus[0] (h100-sxm).count from 1 to 6"]


def test_lp_duals_are_the_objectives_rate_per_unit_of_right_hand_side():
    """Hand-computed: min x + 2y with x + y >= 3 and x <= 2 has x = 2, y = 1 (cost 4). One more unit of demand
    is a y (+2); one more unit of room for x replaces a y (-1). The integer model has no duals; its
    relaxation does (``MilpModel.relaxed``)."""
    from trimtab.solvers.model import Constraint, MilpModel

    m = MilpModel("duals")
    x, y = m.add_var("x", "integer"), m.add_var("y", "integer")
    m.add(Constraint("demand", "demand", ((x, 1.0), (y, 1.0)), ">=", 3.0))
    m.add(Constraint("room", "inventory", ((x, 1.0),), "<=", 2.0))
    m.objective = ((x, 1.0), (y, 2.0))
    be = get_backend("highs")
    assert be.solve(m, SolveOptions()).duals == {}
    lp = be.solve(m.relaxed(), SolveOptions())
    assert lp.objective == pytest.approx(4.0)
    assert lp.duals["demand"] == pytest.approx(2.0) and lp.duals["room"] == pytest.approx(-1.0)
