"""Prefill/decode disaggregation: chosen where it pays, not where it does not; KV links; check and
simulation."""
from __future__ import annotations

from pathlib import Path

import pytest

import trimtab.milp.disagg as disagg
from trimtab.api import load_spec, plan
from trimtab.gate.analytic import check
from trimtab.cost.factory import replica_model
from trimtab.cost.model import TrafficClass
from trimtab.ir.lower import lower
from trimtab.contract.write import plan_to_data
from trimtab.contract.schema import Plan
from tests.conftest import golden_plan, planned

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "disaggregated.yaml"


def roles(p: Plan) -> set[str]:
    return {d.role for d in p.deployments if d.replicas}


@pytest.fixture(scope="module")
def pd_plan():
    return planned("disaggregated", validate=False)


def test_pd_chosen_where_it_pays(pd_plan, monkeypatch):
    p = pd_plan.plan
    assert {"prefill", "decode"} <= roles(p)
    assert all(r.prefill and r.decode and r.deployment is None for r in p.routes if r.prefill)
    monkeypatch.setattr(disagg, "ENABLED", False)
    unified = plan(load_spec(EXAMPLE), validate=False).plan
    assert roles(unified) == {"unified"}
    assert p.cost_usd_per_hour < unified.cost_usd_per_hour


def test_pd_plan_passes_check_and_emits_pair_routes(pd_plan):
    spec = load_spec(EXAMPLE)
    rep = check(pd_plan.plan, spec)
    assert rep.ok, rep.violations
    data = plan_to_data(pd_plan.plan)
    pair = [r for r in data["routes"] if "prefill" in r]
    assert pair and all("deployment" not in r and r["decode"] for r in pair)
    assert Plan.model_validate(data) == Plan.model_validate(plan_to_data(Plan.model_validate(data)))


def test_explain_prices_the_pd_plan_it_explains(pd_plan):
    """``explain`` reads the solve's replicas over every candidate, P/D sides too: it stated 0.00 $/h for
    this example when it read the unified ones alone."""
    from trimtab.api import explain

    ex = explain(load_spec(EXAMPLE))
    assert ex.feasible and {"prefill", "decode"} <= roles(pd_plan.plan)
    assert ex.cost_usd_per_hour == pytest.approx(pd_plan.plan.cost_usd_per_hour, abs=0.005)


def test_pd_not_offered_for_short_prompts(small_spec_path):
    r = plan(load_spec(small_spec_path), validate=False)
    assert r.candidates.disagg == ()
    assert roles(r.plan) == {"unified"}


def test_narrow_network_keeps_kv_local(tmp_path):
    text = EXAMPLE.read_text() + """nodes:
  - {name: h, gpu: h100-sxm, count: 8, nic_gbps: 0.5}
  - {name: a, gpu: h200, count: 8, nic_gbps: 0.5}
"""
    p = tmp_path / "narrow.yaml"
    p.write_text(text)
    r = plan(load_spec(p), validate=False)
    assert roles(r.plan) == {"unified"}


def test_kv_link_rows_bound_transfer(pd_plan):
    from trimtab.milp.formulate import formulate

    m = formulate(pd_plan.ir, pd_plan.candidates)
    fams = {c.family for c in m.constraints}
    assert {"pd_balance", "kv_link"} <= fams


def test_check_rejects_bad_pair_route(pd_plan):
    p = pd_plan.plan
    uni = next((d for d in p.deployments if d.role == "unified"), None)
    pre = next(d for d in p.deployments if d.role == "prefill")
    routes = []
    for r in p.routes:
        if r.prefill:
            r = r.model_copy(update={"decode": pre.name})  # a prefill deployment on the decode side
        routes.append(r)
    bad = p.model_copy(update={"routes": routes})
    rep = check(bad, load_spec(EXAMPLE))
    assert not rep.ok
    assert any("decode deployment" in v and "has role prefill" in v for v in rep.violations)
    del uni


def test_decode_only_tpot_has_no_prefill_interference():
    ir = lower(load_spec(EXAMPLE))
    rm = replica_model(ir, "llama-3.1-70b", "h100-sxm", 8, 1, "bf16", 256, 2048)
    assert rm.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2
    cls = TrafficClass(1.0, 6000, 400, 12000, 0.3)
    uni = rm.evaluate([cls], 99)
    dec = rm.evaluate_decode([cls], 99)
    pre = rm.evaluate_prefill([cls], 99)
    assert dec.stable and pre.stable and uni.stable
    assert dec.tpot_s < uni.tpot_s
    assert pre.ttft_s[0] <= uni.ttft_s[0]
    assert rm.capacity_rps_role("decode", cls, 3000, 35, 99) > 0
    # hand-off eats the TTFT
    assert rm.capacity_rps_role("prefill", cls, 3000, 35, 99, transfer_s=10.0) == 0.0


def test_simulation_validates_pd_plan():
    """The simulator runs the prefill queue, the KV hand-off and the decode queue; the plan ``trimtab plan``
    emits (validated by simulation) passes ``check``'s simulated replay."""
    from trimtab.ir.lower import lower
    from trimtab.gate.simulated import check_simulated
    from trimtab.sim.validate import simulate_seeds

    spec = load_spec(EXAMPLE)
    emitted = golden_plan("disaggregated")  # trimtab plan's bytes (tests/golden)
    assert {"prefill", "decode"} <= roles(emitted)
    assert emitted.simulation is not None and emitted.simulation.passed
    rep, res = check_simulated(emitted, spec)
    assert rep.ok, rep.violations
    assert res.seeds[0] not in emitted.simulation.seeds  # check judges at seeds the planner did not use
    rec = emitted.simulation
    replay = simulate_seeds(emitted, spec, lower(spec), tuple(rec.seeds), rec.requests)
    assert abs(replay.intervals["rag"].mean - rec.attainment["rag"]) <= 1e-4  # rounded to 4 digits


@pytest.mark.parametrize("backend", ["cbc"])  # cpsat solves it too, in about a minute
def test_other_backends_solve_pd(backend):
    spec = load_spec(EXAMPLE)
    r = plan(spec, backend=backend, validate=False)
    assert {"prefill", "decode"} <= roles(r.plan)
    assert check(r.plan, spec).ok


def test_fill_covers_prefill_and_decode_pools():
    """The share of derated capacity each bought deployment uses (``capacity_fill``, which a simulated miss
    multiplies into the derate) covers P/D pools too, recomputed here from the plan's routes: each pool's
    routed rps over (capacity x replicas), per length range."""
    from trimtab.milp.formulate import capacity_fill

    r = plan(load_spec(EXAMPLE), validate=False)
    fill = capacity_fill(r.candidates, r.solve, {})
    pools = [d for d in r.plan.deployments if d.role in ("prefill", "decode")]
    assert pools and all(d.name in fill for d in pools)
    cands = {c.id: c for c in r.candidates.disagg}
    rate = {w.name: w.rate_rps for w in r.ir.workloads}
    for d in pools:
        side = "prefill" if d.role == "prefill" else "decode"
        load = sum(rt.share * rate[rt.workload] / cands[d.name].capacity(rt.bucket)
                   for rt in r.plan.routes if getattr(rt, side) == d.name)
        assert 0 < fill[d.name] <= 1 + 1e-6
        assert abs(fill[d.name] - load / d.replicas) < 1e-3
