"""Cross-checks: standard small problems with hand-computed optima, on every available backend.

Like cvxpy's ``solver_test_helpers`` (lp_0, mi_lp_0, ...): the same problems run on HiGHS, CBC and CP-SAT;
objectives must agree with the hand value and with each other, and every solution must satisfy the
solver-neutral model (``MilpModel.violations``) and, for real specs, the independent verifier
(``trimtab.gate.analytic``), which re-derives inventory, budget, routing, memory fit and SLOs from the IR.
"""
from __future__ import annotations

import pytest

from trimtab.api import plan
from trimtab.gate.analytic import check
from trimtab.deployment.shape import Candidate, CandidateSet
from trimtab.milp.formulate import formulate, n_var
from trimtab.milp.solve import solve_ir
from trimtab.ir.lower import lower
from trimtab.spec.load import load_spec
from trimtab.solvers import SolveOptions, Status, available_backends, get_backend
from tests.conftest import HEAVY_KV_SPEC, SMALL_SPEC

BACKENDS = available_backends()
OPTS = SolveOptions(time_limit_s=30)
TOL = {"highs": 1e-6, "cbc": 1e-6, "cpsat": 1e-3}  # cpsat rows hold to ~1e-4 of their terms (docs/solvers.md)


def spec_text(h100: int = 8, l4: int = 8, budget: float | None = 100.0, rate: float = 5.0,
              objective: str = "min_cost") -> str:
    t = SMALL_SPEC.replace("count: 8, usd_per_hour: 4.0", f"count: {h100}, usd_per_hour: 4.0") \
        .replace("count: 8, usd_per_hour: 0.8", f"count: {l4}, usd_per_hour: 0.8") \
        .replace("rate_rps: 5", f"rate_rps: {rate}").replace("name: small\n",
                                                             f"name: small\nobjective: {objective}\n")
    if budget is None:
        return t.replace("budget_usd_per_hour: 100\n", "")
    return t.replace("budget_usd_per_hour: 100", f"budget_usd_per_hour: {budget}")


def ir_of(**kw):
    return lower(load_spec("s.yaml", text=spec_text(**kw)))


def cand(cid: str, gpu: str, gpus: int, usd: float, cap: float, bucket: str) -> Candidate:
    return Candidate(id=cid, workload="short", model="llama-3.1-8b", gpu=gpu, tp=gpus, pp=1, dtype="bf16",
                     max_num_seqs=256, max_batched_tokens=2048, kv_cache_tokens=10**6, usd_per_hour=usd,
                     capacity_rps=((bucket, cap),))


# (name, spec kwargs, candidates as (id, gpu, gpus, usd, cap), hand optimum, replicas at the optimum)
STANDARD = [
    # rate 5: A alone needs 5 replicas ($5), B alone 1 ($3.5): 1 x B.
    ("cheapest_single", {}, [("A", "l4", 1, 1.0, 1.0), ("B", "h100-sxm", 1, 3.5, 6.0)], 3.5, {"B": 1}),
    # one h100 (4 rps) and the remaining 1 rps on one l4.
    ("inventory_mix", {"h100": 1}, [("A", "l4", 1, 1.0, 1.0), ("B", "h100-sxm", 1, 3.5, 4.0)], 4.5,
     {"A": 1, "B": 1}),
    # rate 10, caps 3 and 4 at $1 and $1.2: 2 x A + 1 x B = 10 rps for $3.2 beats 1 A + 2 B ($3.4),
    # 3 x B ($3.6) and 4 x A ($4).
    ("integer_rounding", {"rate": 10}, [("A", "l4", 1, 1.0, 3.0), ("B", "l4", 1, 1.2, 4.0)], 3.2,
     {"A": 2, "B": 1}),
    # same price and capacity, A on 1 GPU, B on 2: fewer GPUs breaks the tie.
    ("fewer_gpus_tiebreak", {"rate": 2}, [("A", "h100-sxm", 1, 4.0, 2.0), ("B", "l4", 2, 4.0, 2.0)], 4.0,
     {"A": 1, "B": 0}),
]


def _cands(ir, rows):
    b = ir.workloads[0].buckets[0].name
    return CandidateSet(tuple(cand(i, g, n, usd, cap, b) for i, g, n, usd, cap in rows), ())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", STANDARD, ids=[c[0] for c in STANDARD])
def test_standard_optimum(case, backend):
    _, kw, rows, optimum, replicas = case
    ir = ir_of(**kw)
    m = formulate(ir, _cands(ir, rows))
    res = get_backend(backend).solve(m, OPTS)
    assert res.status is Status.OPTIMAL, res
    assert res.objective == pytest.approx(optimum, abs=1e-3)
    assert {k: round(res.values[n_var(k)]) for k in replicas} == replicas
    assert m.violations(res.values, tol=TOL[backend]) == []
    assert res.gap is not None and res.gap <= 1e-4


@pytest.mark.parametrize("backend", BACKENDS)
def test_budget_infeasible_and_elastic_relaxation(backend):
    ir = ir_of(budget=3.0)
    cs = _cands(ir, STANDARD[0][2])
    res = get_backend(backend).solve(formulate(ir, cs), OPTS)
    assert res.status is Status.INFEASIBLE
    from trimtab.planning.explain import relaxations
    lines = relaxations(ir, cs, get_backend(backend), OPTS)
    # hand: 3 x A = 3 rps only; the cheapest full plan is 1 x B = $3.5
    assert lines == ["raise budget_usd_per_hour from 3 to at least 3.50"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_max_goodput_hand_optimum(backend):
    # budget $3, rate 5: B ($3.5) is out of reach; 3 x A serve 3 rps at $3.
    ir = ir_of(budget=3.0, objective="max_goodput")
    res = solve_ir(ir, _cands(ir, STANDARD[0][2]), get_backend(backend), OPTS)
    assert res.has_solution
    served = sum(v for k, v in res.values.items() if k.startswith("route["))
    assert served == pytest.approx(3.0, rel=1e-3)
    assert res.objective == pytest.approx(3.0, abs=1e-3)  # stage 2: min cost at that rate


# ------------------------------------------------------------------ real specs, full pipeline
ADAPTERS = SMALL_SPEC.replace("  - name: llama-3.1-8b\n", """  - name: llama-3.1-8b
    adapters_from: {count: 12, rank: 16, traffic: {zipf: {s: 1.1}}}
""", 1).replace("    model: llama-3.1-8b\n", "    model: llama-3.1-8b\n    adapter: \"*\"\n", 1)
REAL = {
    "small": spec_text(),
    "small_tight_inventory": spec_text(h100=1, l4=3, rate=12),
    "small_no_budget": spec_text(budget=None, rate=20),
    "goodput": spec_text(budget=5.0, rate=40, objective="max_goodput"),
    "adapters": ADAPTERS,  # the adapter planner (trimtab.planning.lora.LoraPlanner)
    "pd": HEAVY_KV_SPEC,  # prefill/decode pairs (trimtab.milp.disagg) inside the unified planner
}
# What each special case must exercise, whatever the backend: otherwise it would pass without testing its
# path.
SHAPE = {"adapters": lambda p: bool(p.adapter_routes),
         "pd": lambda p: {"prefill", "decode"} <= {d.role for d in p.deployments if d.replicas}}


# the adapter model takes CP-SAT ~40 s (a third of the quick suite's slowest minute): in the slow suite
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "adapters" else n
                                  for n in sorted(REAL)])
def test_backends_agree_and_verify(name):
    spec = load_spec(f"{name}.yaml", text=REAL[name])
    costs = {}
    for b in BACKENDS:
        # The answer is set by each backend's deterministic work limit; the wall-clock safety net is raised so
        # that a slower or busier machine (CP-SAT on the adapter model: ~40 s alone here, over 60 beside
        # another suite) cannot turn it into a stop without a plan.
        r = plan(spec, backend=b, validate=False, time_limit_s=900)
        rep = check(r.plan, spec)
        structural = [v for v in rep.violations if not v.startswith("workload ")]
        assert structural == [], (b, rep.violations)
        if not any("could not be brought" in w for w in r.plan.warnings):
            assert rep.ok, (b, rep.violations)
        assert SHAPE.get(name, lambda p: True)(r.plan), (b, name)
        costs[b] = r.plan.cost_usd_per_hour
        if r.plan.goodput is not None:
            costs[b] = (r.plan.cost_usd_per_hour, round(r.plan.goodput.served_rps, 2))
    assert len(set(costs.values())) == 1, costs
