"""The analytic rounds' derate (trimtab.planning.rounds.derate_analytic) and the factors it takes from the
cost model
(trimtab.milp.assess.load_factor_to_meet, analytic_needs)."""
from __future__ import annotations

from dataclasses import dataclass

from trimtab.milp.assess import analytic_needs, assess, load_factor_to_meet
from trimtab.milp.candidates import build_candidates
from trimtab.deployment.shape import DeploymentSpecView, RouteView
from trimtab.ir.lower import lower
from trimtab.planning.rounds import ANALYTIC_FLOOR, DERATE, derate_analytic
from trimtab.spec.load import load_spec
from tests.sim.helpers import one_deployment_plan, write_spec


def _view_routes(plan, f=1.0):
    d = plan.deployments[0]
    return DeploymentSpecView.of_plan(d), [RouteView(r.workload, r.bucket, d.name,
                                                     r.share * f) for r in plan.routes]


def _meets(ir, plan, f):
    view, routes = _view_routes(plan, f)
    return assess(ir, [view], routes).workloads["w"].slo_met


def test_the_load_factor_is_the_edge_of_meeting_the_slo(tmp_path):
    # 40 rps of 2k-token prompts on one H100 replica: far over what it can serve within a 500 ms p90 TTFT.
    p = write_spec(tmp_path, rate=40, isl="{fixed: 2048}", osl="{fixed: 64}", ttft=500, tpot=200, pct=90)
    ir = lower(load_spec(p))
    plan = one_deployment_plan(p)
    assert not _meets(ir, plan, 1.0)
    f = load_factor_to_meet(ir, *_view_routes(plan), "w")
    assert 0 < f < 1
    # the bisection's edge, at its resolution
    assert _meets(ir, plan, f) and not _meets(ir, plan, f + 2 ** -8)
    # the deployment's factor is that share times its fill
    assert analytic_needs(ir, plan, "d", "w", 0.5) == {"d": f * 0.5}
    assert analytic_needs(ir, plan, "nope", "w", 1.0) == {}


def test_a_tail_no_load_can_fix_gives_zero_and_a_met_slo_gives_one(tmp_path):
    p = write_spec(tmp_path, rate=1, isl="{fixed: 8192}", osl="{fixed: 16}", ttft=20, tpot=200, pct=90)
    ir = lower(load_spec(p))
    # 8k-token prefill > 20 ms
    assert load_factor_to_meet(ir, *_view_routes(one_deployment_plan(p)), "w") == 0.0
    p = write_spec(tmp_path, rate=1, isl="{fixed: 256}", osl="{fixed: 16}", ttft=5000, tpot=500, pct=90,
                   name="ok.yaml")
    ir = lower(load_spec(p))
    plan = one_deployment_plan(p)
    assert load_factor_to_meet(ir, *_view_routes(plan), "w") == 1.0
    assert analytic_needs(ir, plan, "d", "w", 1.0) == {}  # nothing to derate


MIXED = "{histogram: {edges: [200, 400, 11000, 13000], weights: [0.9, 0, 0.1]}}"


def test_peers_get_the_factor_the_same_mix_needs_at_their_own_capacity(tmp_path):
    """Short and long prompts mixed on one deployment: each bucket's capacity was computed alone, the mix's
    p99 TTFT (the short prompts waiting behind the long ones) is longer. Every other shape of the workload
    gets the factor at which the same mix, at its full capacity, meets the SLO in the cost model."""
    p = write_spec(tmp_path, rate=6, isl=MIXED, osl="{fixed: 64}", ttft=3000, tpot=200, pct=99)
    ir = lower(load_spec(p))
    cands = build_candidates(ir, jobs=1)
    mine = [c for c in cands.candidates if c.workload == "w" and c.role == "unified"]
    assert len(ir.workloads[0].buckets) > 1 and mine
    plan = one_deployment_plan(p)
    needs = analytic_needs(ir, plan, "d", "w", 1.0, mine)
    peers = {cid: f for cid, f in needs.items() if cid != "d"}
    assert peers, "no shape needs a derate for the mix: the case needs another look"
    by_id = {c.id: c for c in mine}
    w = ir.workloads[0]
    mix = [(r.bucket, r.share) for r in plan.routes]
    # the oracle: assess the mix on one replica of the shape, at f of its capacity
    for cid, f in peers.items():
        c = by_id[cid]
        rate = 1.0 / sum(sh / c.capacity(b) for b, sh in mix)

        def ok(g):
            routes = [RouteView("w", b, cid, sh * rate * g / w.rate_rps) for b, sh in mix]
            return assess(ir, [DeploymentSpecView.of_candidate(c, 1)], routes).workloads["w"].slo_met

        assert 0 <= f < 1 and not ok(1.0) and (f == 0 or ok(f)) and not ok(f + 2 ** -8)


@dataclass
class Miss:
    workload: str
    worst_deployment: str


def test_derate_steps():
    m = [Miss("w", "a")]
    assert derate_analytic(m, {}) == {"a": DERATE}  # no cost-model factor: the fixed step, as before
    # a bigger step where the model asks
    assert derate_analytic(m, {"a": 0.8}, {"a": 0.7}) == {"a": 0.8 * 0.7}
    assert derate_analytic(m, {}, {"a": 0.95}) == {"a": DERATE}  # never less than the fixed step at fault
    assert derate_analytic(m, {}, {"a": 0.0}) == {"a": ANALYTIC_FLOOR}  # at most the floor per round
    # another shape given the same mix: what it needs, no fixed step (it did not miss), the same floor
    assert derate_analytic(m, {"b": 0.9}, {"a": 0.6, "b": 0.95, "c": 0.0}) == {"a": 0.6, "b": 0.9 * 0.95,
                                                                                "c": ANALYTIC_FLOOR}
