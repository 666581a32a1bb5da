"""Property tests (hypothesis) over random small specs. ``max_examples`` is modest to keep the suite fast.

* a random spec gives a plan the independent verifier accepts, or an explained infeasibility;
* more GPUs never cost more; higher rates never cost less (round-1 MILP optimum, before any derating);
* renaming and reordering entries changes nothing but names;
* spec and plan survive a YAML round trip.
"""
from __future__ import annotations

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trimtab.api import plan
from trimtab.milp.candidates import build_candidates
from trimtab.gate.analytic import check, load_plan
from trimtab.errors import InfeasibleError
from trimtab.planning.explain import explain
from trimtab.planning.feasibility import min_cost
from trimtab.ir.lower import lower
from trimtab.contract.write import emit
from trimtab.spec.load import load_spec
from trimtab.solvers import SolveOptions, get_backend

SETTINGS = settings(max_examples=8, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
HIGHS = get_backend("highs")
OPTS = SolveOptions(time_limit_s=20)
GPUS = ["l4", "l40s", "a100-80gb", "h100-sxm"]


@st.composite
def specs(draw) -> dict:
    gpus = draw(st.lists(st.sampled_from(GPUS), min_size=1, max_size=3, unique=True))
    workloads = []
    for i in range(draw(st.integers(1, 2))):
        isl = draw(st.sampled_from([{"fixed": 256}, {"fixed": 2000}, {"uniform": {"min": 100, "max": 3000}}]))
        workloads.append({
            "name": f"w{i}", "model": "llama-3.1-8b",
            "rate_rps": draw(st.sampled_from([0.5, 2.0, 8.0, 25.0])),
            "input_tokens": isl, "output_tokens": {"fixed": draw(st.sampled_from([32, 200]))},
            "slo": {"ttft_ms": draw(st.sampled_from([200, 1000, 5000])),
                    "tpot_ms": draw(st.sampled_from([20, 60, 150])), "percentile": 90}})
    spec = {"version": 1, "name": "prop",
            "gpus": [{"type": g, "count": draw(st.integers(0, 8))} for g in gpus],
            "models": [{"name": "llama-3.1-8b"}], "workloads": workloads}
    if draw(st.booleans()):
        spec["budget_usd_per_hour"] = draw(st.sampled_from([2.0, 10.0, 50.0]))
    return spec


def load(d: dict):
    return load_spec("prop.yaml", text=yaml.safe_dump(d, sort_keys=False))


def cost(d: dict) -> float | None:
    ir = lower(load(d))
    r = min_cost(ir, build_candidates(ir), HIGHS, OPTS)
    return None if r is None else round(r.objective, 6)


@SETTINGS
@given(specs())
def test_plan_is_verified_or_infeasibility_explained(d):
    spec = load(d)
    try:
        r = plan(spec, validate=False)
    except InfeasibleError as exc:
        assert exc.lines
        e = explain(lower(spec), HIGHS, OPTS)
        assert not e.feasible and (e.problems or e.alternatives)
        return
    rep = check(r.plan, spec)
    assert [v for v in rep.violations if not v.startswith("workload ")] == [], rep.violations
    if not any("could not be brought" in w for w in r.plan.warnings):
        assert rep.ok, rep.violations


@SETTINGS
@given(specs(), st.integers(1, 8))
def test_more_gpus_never_cost_more(d, extra):
    base = cost(d)
    more = {**d, "gpus": [{**g, "count": g["count"] + extra} for g in d["gpus"]]}
    after = cost(more)
    if base is not None:
        assert after is not None and after <= base + 1e-6


@SETTINGS
@given(specs(), st.sampled_from([1.5, 2.0, 4.0]))
def test_higher_rates_never_cost_less(d, k):
    base = cost(d)
    up = {**d, "workloads": [{**w, "rate_rps": w["rate_rps"] * k} for w in d["workloads"]]}
    after = cost(up)
    if after is not None:
        assert base is not None and after >= base - 1e-6


@SETTINGS
@given(specs())
def test_renaming_and_reordering_changes_only_names(d):
    renamed = {**d, "name": "other", "gpus": list(reversed(d["gpus"])),
               "workloads": [{**w, "name": "x-" + w["name"]} for w in reversed(d["workloads"])]}
    assert cost(d) == cost(renamed)


@SETTINGS
@given(d=specs())
def test_spec_and_plan_yaml_round_trip(tmp_path_factory, d):
    spec = load(d)
    again = load_spec("again.yaml", text=yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True)))
    assert again == spec
    try:
        r = plan(spec, validate=False)
    except InfeasibleError:
        return
    text = emit(r.plan)
    p = tmp_path_factory.mktemp("rt") / "plan.yaml"
    p.write_text(text)
    assert emit(load_plan(p)) == text
